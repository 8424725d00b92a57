"""Scatter rows (`Nest.csr_row`): an ``add_at`` fused with a stencil on a flattened field (a
point source injected into a wave step) runs the rows without scatter entries in the element
function's instance ``S = false``, whose loop over the entries is gone, so those rows
vectorise and join flat runs (the values read at their positions only inside the loop); a row
with entries runs alone, with the loop. The pads' row images are numbered before the scatter's
positions (`nest._walk_rows`), so the row ends are inlined, not the edge function. The values and
gradients are NumPy's ``np.add.at`` of the same base (float32 sums in float64, rounded
once), with the entries in the first row, the last row, repeated positions and a row's last
element, for constant positions (the compile-time transpose) and positions read from memory
(the sort), on 1 and 2 threads."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

LAP = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], dtype=np.float32)
SHAPE = (2, 20, 33)  # rows of 33: runs of several rows between the rows with entries
N = int(np.prod(SHAPE))
ROW = SHAPE[-1]
# flat positions: the first row, a repeated one, a row's last element, the last row, the other batch
POSITIONS = np.array([3, 5 * ROW + 7, 5 * ROW + 7, 9 * ROW + ROW - 1, N - 2, 20 * ROW + 11, 5 * ROW + 7])


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("scatter_rows")
    u = g.input("u", SHAPE, dtype="float32")
    c = g.input("c", SHAPE, dtype="float32", requires_grad=False)
    v = g.input("v", (len(POSITIONS),), dtype="float32")
    p = g.input("p", (len(POSITIONS),), dtype="int32")
    # one base per scatter, so that each is fused into its scatter's kernel (a shared one is written once)
    fixed = dp.reshape(dp.add_at(_base(u, c, 2.0), POSITIONS, v * 3.0), SHAPE)
    moving = dp.reshape(dp.add_at(_base(u, c, 0.5), p, v), SHAPE)
    g.output("fixed", fixed)
    g.output("moving", moving)
    g.output("loss", dp.sum(dp.square(fixed)) + dp.sum(moving * c))
    return g.build()


def _base(u: dp.Tensor, c: dp.Tensor, k: float) -> dp.Tensor:
    return dp.reshape(u + c * dp.correlate(k * u, LAP[None], mode="constant"), (-1,))


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        "u": rng.normal(size=SHAPE).astype(np.float32),
        "c": rng.uniform(0.05, 0.2, size=SHAPE).astype(np.float32),
        "v": rng.normal(size=len(POSITIONS)).astype(np.float32),
        "p": POSITIONS[::-1].astype(np.int32),
    }


@pytest.fixture(scope="module")
def programs() -> list[dp.Program]:
    graph = _graph()
    return [dp.compile(graph, wrt=["u", "v"], loss="loss", device="cpu", threads=t) for t in (1, 2)]


def _numpy(x: dict[str, np.ndarray], k: float, positions: np.ndarray, values: np.ndarray) -> np.ndarray:
    """``np.add.at`` of the base in float64, rounded once, as the kernels sum a float32 row."""
    g = dp.GraphBuilder("base")
    u = g.input("u", SHAPE, dtype="float32")
    c = g.input("c", SHAPE, dtype="float32", requires_grad=False)
    g.output("base", _base(u, c, k))
    base = dp.interpret(g.build(), u=x["u"], c=x["c"])["base"].astype(np.float64)
    np.add.at(base, positions, values.astype(np.float64))
    return base.astype(np.float32).reshape(SHAPE)


def test_rows_without_entries_skip_the_loop(programs: list[dp.Program]) -> None:
    text = programs[0].plans["run"].module.text
    assert text.count("csr_o = [&]") >= 2  # each scatter's row check (`drivers._csr_class`)
    assert "if (S)" in text  # the loop over entries, which only a row with entries runs
    assert text.count("auto one_row") >= 2  # flat runs: the values read at positions only inside that loop
    drivers = [d for d in text.split("DP_FN void ") if "csr_o = [&]" in d and d.split("(")[0].endswith("_cpu")]
    assert drivers and all("_ends<" in d for d in drivers)  # row ends inlined: the pads took row images


def test_values_are_numpys_add_at(programs: list[dp.Program]) -> None:
    x = _inputs()
    for program in programs:
        out = program.run(**x)
        np.testing.assert_array_equal(out["fixed"], _numpy(x, 2.0, POSITIONS, x["v"] * np.float32(3.0)))
        np.testing.assert_array_equal(out["moving"], _numpy(x, 0.5, x["p"], x["v"]))


def test_gradients_match_the_interpreter_and_threads(programs: list[dp.Program]) -> None:
    x = _inputs()
    graph = _graph()
    results = [p.value_and_grad(**x) for p in programs]
    for name in ("u", "v"):
        assert results[0][1][name].tobytes() == results[1][1][name].tobytes()
    want = dp.interpret_grad(graph, ["u", "v"], **x)
    for name in ("u", "v"):
        np.testing.assert_allclose(results[0][1][name], want[name], rtol=1e-5, atol=1e-5)

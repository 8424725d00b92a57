"""Flat row runs (`dpt_ir.backends.cxx.flat_rows`): a pointwise stencil nest with short rows runs
consecutive rows as one element loop. The values, gradients and status flags are the row walk's
bit for bit (`Target.flat_rows = 0` compiles the row walk), for the pad modes, a batch axis and 1
or 2 threads; rows wider than `Target.flat_rows` keep the row walk."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.base import Target
from dpt_ir.backends.cxx import flat_rows
from dpt_ir.backends.cxx.nest import cover
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

LAP = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], dtype=np.float32)
SHAPE = (2, 40, 37)  # a batch of 2, rows of 37: runs of several rows, two pad rows and ends per row


def _graph(mode: str, shape: tuple[int, ...] = SHAPE) -> dp.Graph:
    """Two leapfrog-like steps of a padded laplacian."""
    g = dp.GraphBuilder(f"flat_rows_{mode}")
    u = g.input("u", shape, dtype="float32")
    c = g.input("c", shape, dtype="float32", requires_grad=False)
    v = 2.0 * u + c * dp.correlate(u, LAP[None], mode=mode)
    w = 2.0 * v - u + c * dp.correlate(v, LAP[None], mode=mode)
    g.output("w", w)
    g.output("loss", dp.sum(dp.square(w)))
    return g.build()


def _inputs(shape: tuple[int, ...] = SHAPE) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(11)
    return {
        "u": rng.normal(size=shape).astype(np.float32),
        "c": rng.uniform(0.05, 0.2, size=shape).astype(np.float32),
    }


@pytest.fixture
def row_walk(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Compile with `Target.flat_rows = 0` (a distinct cache key: the target's fingerprint)."""
    made = Target.for_device

    def walk(device: str, threads: int = 1, *budgets: int | None) -> Target:
        return Target(**{**made(device, threads, *budgets).model_dump(), "flat_rows": 0})

    monkeypatch.setattr(Target, "for_device", walk)
    yield


def _flat_text(program: dp.Program) -> str:
    return "\n".join(p.module.text for p in program.plans.values())


@pytest.mark.parametrize("mode", ["constant", "nearest", "reflect"])
def test_flat_runs_are_the_row_walks_bits(mode: str, request: pytest.FixtureRequest) -> None:
    graph, x = _graph(mode), _inputs()
    flat = [dp.compile(graph, wrt=["u"], loss="loss", device="cpu", threads=t) for t in (1, 2)]
    assert "one_row" in _flat_text(flat[0])  # the flat runs' driver
    results = [p.value_and_grad(**x) for p in flat]
    request.getfixturevalue("row_walk")
    walk = dp.compile(graph, wrt=["u"], loss="loss", device="cpu", threads=1)
    assert "one_row" not in _flat_text(walk)
    expected = walk.value_and_grad(**x)
    for out, grads in results:
        assert out["w"].tobytes() == expected[0]["w"].tobytes()
        assert grads["u"].tobytes() == expected[1]["u"].tobytes()
    reference = dp.interpret_grad(graph, ["u"], **x)["u"]
    np.testing.assert_allclose(expected[1]["u"], reference, rtol=2e-4, atol=2e-4)


def test_flags_raised_in_a_run_are_the_row_walks(request: pytest.FixtureRequest) -> None:
    """A run whose loop raises a status flag reruns row by row: the error is the row walk's."""
    g = dp.GraphBuilder("flat_rows_flags")
    u = g.input("u", SHAPE, dtype="float32")
    g.output("loss", dp.sum(dp.log(dp.correlate(u, LAP[None], mode="constant") + 4.0)))
    graph = g.build()
    x = {"u": np.ones(SHAPE, dtype=np.float32)}
    x["u"][1, 17, 5] = -30.0  # one element's log argument below zero
    messages = []
    for walk in (False, True):
        if walk:
            request.getfixturevalue("row_walk")
        program = dp.compile(graph, wrt=["u"], device="cpu", threads=1)
        assert ("one_row" in _flat_text(program)) != walk
        with pytest.raises(dp.NumericalError) as err:
            program.run(**x)
        messages.append(str(err.value))
    assert messages[0] == messages[1]


def test_rows_wider_than_the_target_walk_row_by_row() -> None:
    wide = (2, 12, Target.for_device("cpu").flat_rows + 1)
    program = dp.compile(_graph("constant", wide), wrt=["u"], loss="loss", device="cpu", threads=1)
    assert "one_row" not in _flat_text(program)


def test_reads_of_summed_slots_only_do_not_end_a_run() -> None:
    """The adjoint of ``nearest`` pads sums a second image in its edge rows only. The reads
    through that image (and through the pad's images below it) have index 0 in every other
    row, so their bases do not advance: the run check compares them only in a summing row
    (``rs``), or no run would ever pass one row."""
    g = dp.GraphBuilder("flat_rows_summed")
    u = g.input("u", (24, 20), dtype="float32")
    k = g.input("k", (24, 20), dtype="float32")
    g.output("loss", dp.sum(dp.square(u + k * dp.correlate(u, LAP, mode="nearest"))))
    joint = run_pipeline(g.build(), CompileOptions(wrt=("u", "k"))).graph
    nests = [n for grp in plan_of(joint).groups if (n := cover(joint, grp)) is not None and n.summed]
    assert nests, "the adjoint's group should sum row images"
    for nest in nests:
        only = flat_rows.summed_only(nest)
        assert any(nest.images[m].slot == 0 for m in only), "a pad's image below the second slot"
        check = flat_rows.same_row_class(nest)
        guarded = [k for k, r in enumerate(nest.row_reads) if any(x and m in only for m, x in enumerate(r.images))]
        assert guarded
        for k, r in enumerate(nest.row_reads):
            term = f"nrb[{k}] == rb[{k}] + (r1 - row) * {nest.inner * r.step}"
            assert (f"(!rs || {term})" in check) == (k in guarded), term

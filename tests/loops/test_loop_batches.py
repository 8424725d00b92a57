"""Loops over a batch axis run one loop per batch element (`dpt_ir.passes.loop_batches`).

- The pass splits a loop whose body maps the batch (elementwise work, stencils and slices
  along the other axes, batched and shared closures, batched ``xs``, ``fori_loop``'s index)
  into one loop per element on a body built for one element, with the same packed results;
  it leaves alone a body that mixes the batch (a stencil tap, a sum or a flattening scatter
  along it), a batch of one, elements too small and batches too large.
- Compiled (the CPU splits by default, `Target.loop_batches`): values and gradients equal the
  interpreter's on the unsplit graph; bits are equal for 1 and 2 threads, store-every-carry and
  ``checkpoint=2``; with 2 threads the element loops run side by side
  (`loop_program.run_side_by_side`), with 1 one after the other.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.passes import loop_batches
from dpt_ir.runtime import loop_program

LAP = np.array([[[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]])  # one tap along the batch axis
B, N, STEPS = 3, 48, 16  # 2 x 48² values an element: above loop_batches.MIN_ELEMENTS


def wave(b: int = B, n: int = N, checkpoint: Any = None, xs_batched: bool = False, body: Any = None) -> dp.Graph:
    """A leapfrog over ``b`` shots: a shared closure (``c``, one field), a batched one (``s``, a
    source per shot), a source signal (one per step, or one per step and shot), a receiver row."""
    g = dp.GraphBuilder(f"batch_{b}_{n}_{checkpoint}_{xs_batched}")
    v = g.input("v", (n, n), "float64")
    mask = g.input("mask", (b, n, n), "float64", requires_grad=False)
    f = g.input("f", (STEPS, b) if xs_batched else (STEPS,), "float64", requires_grad=False)
    c, s = 0.1 * v * v, -(v * v) * mask

    def step(carry: Any, ft: Any) -> tuple[Any, Any]:
        prev, u = carry
        if body is not None:
            return body(prev, u, c, s, ft)
        src = s * dp.reshape(ft, (b, 1, 1)) if xs_batched else s * ft
        new = 2.0 * u - prev + c * dp.correlate(u, LAP, mode="constant") + src
        return (u, new), u[:, 2, :]

    zero = dp.broadcast_to(0.0 * v, (b, n, n))
    _, data = dp.scan(step, (zero, zero), f, checkpoint=checkpoint)
    g.output("loss", dp.sum(dp.square(data)))
    return g.build()


def inputs(b: int = B, n: int = N, xs_batched: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    mask = np.zeros((b, n, n))
    for e in range(b):
        mask[e, 4, 5 + 9 * e] = 1.0  # near the receiver row (2): the data are not zero
    f = rng.standard_normal((STEPS, b) if xs_batched else STEPS)
    return {"v": 1.0 + 0.2 * rng.uniform(size=(n, n)), "mask": mask, "f": f}


def scans(graph: dp.Graph) -> int:
    return sum(node.op == "scan" for node in graph.nodes)


@pytest.mark.parametrize("xs_batched", [False, True])
def test_a_batched_loop_becomes_one_loop_per_element_with_the_same_values(xs_batched: bool) -> None:
    graph = wave(xs_batched=xs_batched)
    split = loop_batches.run(graph)
    assert scans(graph) == 1 and scans(split) == B
    ins = inputs(xs_batched=xs_batched)
    want = dp.interpret(graph, **ins)["loss"]
    assert want > 1e-3
    assert np.allclose(dp.interpret(split, **ins)["loss"], want, rtol=1e-12)
    g_want, g_got = dp.interpret_grad(graph, ["v"], **ins), dp.interpret_grad(split, ["v"], **ins)
    np.testing.assert_allclose(g_got["v"], g_want["v"], rtol=1e-10, atol=1e-12 * np.abs(g_want["v"]).max())


def _mixing_tap(prev: Any, u: Any, c: Any, s: Any, ft: Any) -> Any:
    w = np.zeros((3, 3, 3))
    w[:, 1, 1] = (1.0, -2.0, 1.0)  # taps along the batch axis: shot b reads shots b - 1 and b + 1
    return (u, 2.0 * u - prev + c * dp.correlate(u, w, mode="constant") + s * ft), u[:, 2, :]


def _sum_over_shots(prev: Any, u: Any, c: Any, s: Any, ft: Any) -> Any:
    new = 2.0 * u - prev + s * ft + 0.01 * dp.sum(u, axis=0, keepdims=True)
    return (u, new), u[:, 2, :]


def _first_shot_only(prev: Any, u: Any, c: Any, s: Any, ft: Any) -> Any:
    return (u, 2.0 * u - prev + s * ft), u[0, 2, :]  # a y without the batch axis


@pytest.mark.parametrize("body", [_mixing_tap, _sum_over_shots, _first_shot_only])
def test_a_body_that_mixes_the_batch_is_left_whole(body: Any) -> None:
    graph = wave(body=body)
    assert scans(loop_batches.run(graph)) == 1


@pytest.mark.parametrize(("b", "n"), [(1, N), (B, 16), (loop_batches.MAX_BATCH + 1, 24)])
def test_a_batch_of_one_small_elements_or_too_many_are_left_whole(b: int, n: int) -> None:
    assert scans(loop_batches.run(wave(b=b, n=n))) == 1


def test_a_flattening_scatter_is_left_whole_and_fori_loop_splits() -> None:
    g = dp.GraphBuilder("scatter_and_fori")
    u0 = g.input("u0", (B, N, N), "float64")
    flat = np.arange(B) * N * N  # one cell per shot of the flattened batch

    def inject(carry: Any, _: Any) -> tuple[Any, Any]:
        return dp.reshape(dp.add_at(dp.reshape(carry, (-1,)), flat, 1.0 + 0.0 * dp.sum(carry)), (B, N, N)), None

    left, _ = dp.scan(inject, u0, length=3)
    u1 = g.input("u1", (B, 64, 64), "float64")  # 4096 values an element
    right = dp.fori_loop(3, lambda i, u: 0.5 * u + dp.cast(i, "float64"), u1)
    g.output("loss", dp.sum(left) + dp.sum(right))
    graph = g.build()
    split = loop_batches.run(graph)
    assert scans(split) == 1 + B  # the scatter's loop whole, the fori_loop split
    rng = np.random.default_rng(2)
    ins = {"u0": rng.standard_normal((B, N, N)), "u1": rng.standard_normal((B, 64, 64))}
    assert np.allclose(dp.interpret(split, **ins)["loss"], dp.interpret(graph, **ins)["loss"], rtol=1e-12)


def test_an_auto_budget_is_shared_out() -> None:
    split = loop_batches.run(wave(checkpoint="auto"))
    budgets = {n.attrs["memory_budget"] for n in split.nodes if n.op == "scan"}
    assert budgets == {-(-256 * 2**20 // B)}


@pytest.fixture(scope="module")
def compiled() -> dict[tuple[Any, int], dp.Program]:
    return {(ck, t): dp.compile(wave(checkpoint=ck), wrt=["v"], threads=t) for ck in (None, 2) for t in (1, 2)}


def test_compiled_split_loops_equal_the_interpreter_and_keep_their_bits(
    compiled: dict[tuple[Any, int], dp.Program], monkeypatch: pytest.MonkeyPatch
) -> None:
    ins = inputs()
    graph = wave()
    assert scans(compiled[(None, 1)].graph) == B  # the CPU target splits
    want = dp.interpret_grad(graph, ["v"], **ins)["v"]
    loss = dp.interpret(graph, **ins)["loss"]
    assert loss > 1e-3
    side: list[int] = []
    real = loop_program.run_side_by_side
    monkeypatch.setattr(loop_program, "run_side_by_side", lambda g, e, t: (side.append(len(g)), real(g, e, t)))
    grads = {}
    for key, program in compiled.items():
        program.value_and_grad(**ins)  # the first call records the native tables, one loop at a time
        side.clear()
        out, g = program.value_and_grad(**ins)
        assert np.allclose(out["loss"], loss, rtol=1e-12), key
        np.testing.assert_allclose(g["v"], want, rtol=1e-10, atol=1e-12 * np.abs(want).max())
        assert (side == [B, B]) == (key[1] == 2), (key, side)  # forward and reverse loops, side by side
        grads[key] = g["v"]
        assert np.allclose(program.run(**ins)["loss"], loss, rtol=1e-12), key
    first = grads[(None, 1)]
    assert all(np.array_equal(first, g) for g in grads.values()), "bits differ across threads or policies"

"""Compiled loops over zero-size carries and per-step inputs (issue 27): a scan whose carry
or ``xs`` rows have no element runs, forward and reverse (checkpointed), and gives the
interpreter's values and (zero-size) gradients. Warp refuses to slice a zero-size array;
the loop's per-step views of empty arrays are empty arrays of their own (`runtime.loop`)."""

from __future__ import annotations

from typing import Any

import numpy as np

import dpt_ir as dp


def _graph() -> dp.Graph:
    """Two carries, one empty, and two per-step inputs, one with empty rows."""
    g = dp.GraphBuilder("scan_zero")
    a = g.input("a", (3,), "float32")
    e = g.input("e", (2, 0), "float32")
    xs = g.input("xs", (4, 3), "float32")
    zs = g.input("zs", (4, 2, 0), "float32")

    def step(carry: tuple[dp.Tensor, dp.Tensor], x: tuple[dp.Tensor, dp.Tensor]) -> tuple[Any, dp.Tensor]:
        c, d = carry
        return (dp.sin(c) * x[0], d * x[1] + 1.0), dp.sum(c * x[0]) + dp.sum(d)

    (c, d), ys = dp.scan(step, (a, e), (xs, zs), checkpoint=2)
    g.output("d", d)
    g.output("loss", dp.sum(c) + dp.sum(ys) + dp.sum(d))
    return g.build()


def test_a_scan_with_empty_carries_and_rows() -> None:
    graph = _graph()
    rng = np.random.default_rng(0)
    shapes = {i.name: i.type.shape for i in graph.inputs}
    inputs = {k: rng.uniform(-1.0, 1.0, s).astype(np.float32) for k, s in shapes.items()}
    program = dp.compile(graph, wrt=list(shapes), device="cpu")
    expected = dp.interpret(graph, **inputs)
    out = program.run(**inputs)
    for name, value in expected.items():
        assert out[name].shape == value.shape and out[name].dtype == value.dtype
        np.testing.assert_allclose(out[name], value, rtol=1e-5)
    values, grads = program.value_and_grad(**inputs)
    reference = dp.interpret_grad(graph, list(shapes), **inputs)
    np.testing.assert_allclose(values["loss"], expected["loss"], rtol=1e-5)
    for name, g in reference.items():
        assert grads[name].shape == shapes[name] and grads[name].dtype == np.float32
        np.testing.assert_allclose(grads[name], g, rtol=1e-5, atol=1e-6)


def _no_steps() -> dp.Graph:
    """A scan over ``xs`` with no rows and a fori_loop of no steps (jax.lax semantics)."""
    g = dp.GraphBuilder("scan_none")
    a = g.input("a", (3,), "float32")
    xs = g.input("xs", (0, 3), "float32")

    def step(c: dp.Tensor, x: dp.Tensor) -> tuple[dp.Tensor, dp.Tensor]:
        return dp.sin(c) * x, dp.sum(c * x)

    c, ys = dp.scan(step, a, xs)
    f = dp.fori_loop(0, lambda i, v: v * 2.0, a)
    g.output("ys", ys)
    g.output("loss", dp.sum(c * c) + dp.sum(f) + dp.sum(ys))
    return g.build()


def test_a_loop_of_no_steps_returns_init_and_empty_ys() -> None:
    graph = _no_steps()
    assert not any(n.op == "scan" for n in graph.nodes)  # nothing runs: no loop op
    a = np.array([0.5, -1.0, 2.0], np.float32)
    inputs = {"a": a, "xs": np.zeros((0, 3), np.float32)}
    program = dp.compile(graph, wrt=["a", "xs"], device="cpu")
    out, grads = program.value_and_grad(**inputs)
    assert out["ys"].shape == (0,) and out["ys"].dtype == np.float32
    np.testing.assert_allclose(out["loss"], np.sum(a * a) + np.sum(a), rtol=1e-6)
    np.testing.assert_allclose(grads["a"], 2 * a + 1, rtol=1e-6)
    assert grads["xs"].shape == (0, 3)
    expected = dp.interpret(graph, **inputs)
    np.testing.assert_allclose(out["loss"], expected["loss"], rtol=1e-6)


def test_an_empty_carry_passed_through_rotates() -> None:
    """A leapfrog over empty fields: the passed-through carry shares its source's array in the
    forward (`Loop._rotated`) and in the checkpointed reverse's recomputed steps
    (`Loop._spares`). An empty array holds no memory (no pointer), so it is always free:
    before, the forward's rotation found no free array and raised StopIteration."""

    def step(carry: tuple[dp.Tensor, dp.Tensor], _: Any) -> tuple[Any, None]:
        prev, u = carry
        return (u, 2.0 * u - prev), None

    for checkpoint in (None, 2):
        g = dp.GraphBuilder(f"scan_zero_through_{checkpoint}")
        a = g.input("a", (0, 3), "float32")
        (_, u), _ = dp.scan(step, (a, a * 1.0), length=6, checkpoint=checkpoint)
        g.output("loss", dp.sum(u * u))
        graph = g.build()
        x = np.zeros((0, 3), np.float32)
        program = dp.compile(graph, wrt=["a"], device="cpu")
        assert program.run(a=x)["loss"] == dp.interpret(graph, a=x)["loss"] == 0.0
        out, grads = program.value_and_grad(a=x)
        assert out["loss"] == 0.0 and grads["a"].shape == (0, 3)

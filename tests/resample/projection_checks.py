"""The check both matrix-free projectors' stack tests make (`test_radon_compiled`,
`test_fanbeam`): a float64 program ``y = R x`` with loss ``sum(w * y)``, compiled for 1 and 2
threads, gives the same bits for both, equals the interpreter to rounding (values and the
gradient, which is the transpose ``Rᵀ w``), and passes the dot test to 1e-12."""

from __future__ import annotations

import numpy as np

import dpt_ir as dp


def assert_stack_program(graph: dp.Graph, x: np.ndarray, w: np.ndarray) -> None:
    got = {}
    for threads in (1, 2):
        out, grads = dp.compile(graph, wrt=["x"], device="cpu", threads=threads).value_and_grad(x=x, w=w)
        got[threads] = (out["y"], grads["x"])
    np.testing.assert_array_equal(got[1][0], got[2][0])
    np.testing.assert_array_equal(got[1][1], got[2][1])
    y, gx = got[1]
    want = dp.interpret(graph, x=x, w=w)["y"]
    np.testing.assert_allclose(y, want, rtol=1e-13, atol=1e-13 * np.abs(want).max())
    want_g = dp.interpret_grad(graph, ["x"], x=x, w=w)["x"]
    np.testing.assert_allclose(gx, want_g, rtol=1e-12, atol=1e-12 * np.abs(want_g).max())
    lhs, rhs = float(np.sum(y * w)), float(np.sum(x * gx))
    assert abs(lhs - rhs) <= 1e-12 * abs(lhs)

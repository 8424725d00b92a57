"""float64 on the C++ path (issue 11): float64 groups (elementwise math through dp_math.h's
libm overloads, every float lane reduction, casts to and from float32) take the C++ path,
give the interpreter's values and gradients at the float64 tolerance, and report an
out-of-domain input and a non-finite float64 result (the probe on the bits).

Cost: one small graph (64 x 33) compiled once for the module (run and value_and_grad).
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

from .harness import off_cxx

SHAPE = (64, 33)


def f64_graph() -> dp.Graph:
    g = dp.GraphBuilder("cxx_f64")
    x = g.input("x", SHAPE, "float64")
    w = g.input("w", SHAPE, "float32", requires_grad=False)
    y = dp.sin(x * 2.0) * dp.cast(w, "float64") + dp.exp(-dp.square(x))
    z = dp.tanh(y) + dp.sigmoid(x) + dp.softplus(y) + dp.erf(x) + dp.pow(dp.abs(x) + 1.0, y)
    z = z + dp.atan2(x, y + 2.0) + dp.log1p(dp.abs(y)) + dp.expm1(x * 0.5) + dp.sqrt(dp.abs(x) + 0.25)
    g.output("loss", dp.sum(dp.square(z)) + dp.mean(dp.cos(x)))
    g.output("rowmax", dp.max(z, axis=1))
    g.output("rowmin", dp.min(y, axis=1))
    g.output("lse", dp.logsumexp(z, axis=1))
    g.output("arg", dp.argmax(y, axis=1))
    g.output("z32", dp.cast(z, "float32"))
    g.output("logx", dp.log(x))  # NaN for x < 0: the non-finite check
    return g.build()


def feed(seed: int, positive: bool = True) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(0.05 if positive else -1.0, 1.5, SHAPE)
    return {"x": x, "w": rng.uniform(0.5, 1.5, SHAPE).astype(np.float32)}


@pytest.fixture(scope="module")
def program() -> dp.Program:
    return dp.compile(f64_graph(), wrt=["x"], loss="loss")


def test_float64_groups_take_the_cxx_path(program: dp.Program) -> None:
    for name in ("run", "value_and_grad"):
        plan = program.plans[name]
        off = off_cxx(plan.kernels, plan.module.text)
        assert plan.kernels and not off, (name, off)


def test_float64_values_and_gradients_match_the_interpreter(program: dp.Program) -> None:
    ins = feed(1)
    got, want = program.run(**ins), dp.interpret(program.graph, **ins)
    for name in ("loss", "rowmax", "rowmin", "lse", "z32", "logx"):
        tol = 1e-6 if name == "z32" else 1e-12
        np.testing.assert_allclose(got[name], want[name], rtol=tol, atol=tol, err_msg=name)
    np.testing.assert_array_equal(got["arg"], want["arg"])
    assert got["loss"].dtype == np.float64 and got["z32"].dtype == np.float32
    _, grads = program.value_and_grad(**ins)
    ref = dp.interpret_grad(program.graph, ["x"], seed={"loss": 1.0}, **ins)
    scale = float(np.abs(ref["x"]).max())
    assert float(np.abs(grads["x"] - ref["x"]).max()) <= 1e-12 * scale


def test_float64_domain_and_non_finite_checks_raise(program: dp.Program) -> None:
    with pytest.raises(dp.NumericalError, match="out-of-domain input at node 'log_"):
        program.run(**feed(2, positive=False))
    ins = feed(3)
    ins["x"][3, 4] = 1e200  # square overflows float64: the loss (a float64 sum) is inf
    with pytest.raises(dp.NumericalError, match="non-finite value at node 'sum_"):
        program.run(**ins)

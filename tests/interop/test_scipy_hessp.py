"""``dpt_ir.scipy.objective(...).hessp``: the Hessian-vector product of the loss, for SciPy's
trust-ncg and Newton-CG. On the small deconvolution (a quadratic), trust-ncg reaches the
L-BFGS-B minimum in fewer function evaluations; ``hessp`` equals `dp.interpret_hvp`."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.optimize as opt

import dpt_ir as dp
import dpt_ir.scipy as dps
from tests.interop.conftest import DECONV_SHAPE
from tests.interop.test_scipy import observed


def test_hessp_equals_the_interpreter(deconv_program: dp.Program) -> None:
    y, rng = observed(1), np.random.default_rng(0)
    fun = dps.objective(deconv_program, y=y)
    x, p = rng.standard_normal(fun.size), rng.standard_normal(fun.size)
    got = fun.hessp(x, p)
    _, _, want = dp.interpret_hvp(deconv_program.graph, ["x"], {"x": p.reshape(DECONV_SHAPE)},
                                  x=x.reshape(DECONV_SHAPE), y=y)  # fmt: skip
    np.testing.assert_allclose(got, want["x"].reshape(-1), rtol=1e-12, atol=1e-12)
    assert got.dtype == np.float64 and fun.nhev == 1


@pytest.mark.parametrize("method", ["trust-ncg", "Newton-CG"])
def test_newton_methods_reach_the_lbfgsb_minimum_in_fewer_evaluations(deconv_program: dp.Program, method: str) -> None:
    y = observed(0)
    reference = dps.objective(deconv_program, y=y)
    x0 = reference.x0(x=np.zeros(DECONV_SHAPE))
    lbfgs = opt.minimize(reference, x0, jac=True, method="L-BFGS-B", options={"ftol": 1e-15, "gtol": 1e-10})
    fun = dps.objective(deconv_program, y=y)
    newton = opt.minimize(fun, x0, jac=True, hessp=fun.hessp, method=method, options={"gtol": 1e-8}
                          if method == "trust-ncg" else {"xtol": 1e-12})  # fmt: skip
    assert newton.success, newton.message
    assert newton.fun <= lbfgs.fun + 1e-9 * abs(lbfgs.fun)
    assert newton.nfev < lbfgs.nfev and fun.nhev > 0  # (SciPy's own nhev may count one more)


def test_hessp_refuses_a_wrong_vector(deconv_program: dp.Program) -> None:
    fun = dps.objective(deconv_program, y=observed(0))
    with pytest.raises(dp.ContractError, match=r"expected a flat real vector of 64 values, found shape \[3\]"):
        fun.hessp(np.zeros(fun.size), np.zeros(3))

"""dpt_ir.scipy.objective: L-BFGS-B on a small deconvolution reaches at least the minimum
SciPy reaches with numerical gradients, in fewer evaluations; flattening and contracts."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi
import scipy.optimize as opt

import dpt_ir as dp
import dpt_ir.scipy as dps
from tests.interop.conftest import DECONV_SHAPE, DECONV_SIGMA


def observed(seed: int) -> np.ndarray:
    """A blurred, noisy square: the data the deconvolution fits."""
    rng = np.random.default_rng(seed)
    truth = np.zeros(DECONV_SHAPE)
    truth[2:6, 3:7] = 1.0
    return ndi.gaussian_filter(truth, DECONV_SIGMA, mode="constant") + 0.01 * rng.standard_normal(DECONV_SHAPE)


def test_lbfgsb_beats_numerical_gradients(deconv_program: dp.Program) -> None:
    y = observed(0)
    fun = dps.objective(deconv_program, y=y)
    x0 = fun.x0(x=np.zeros(DECONV_SHAPE))
    options = {"maxiter": 1000, "ftol": 1e-15, "gtol": 1e-10}  # the same stopping rule for both
    ours = opt.minimize(fun, x0, jac=True, method="L-BFGS-B", options=options)

    def value(x: np.ndarray) -> float:
        return float(deconv_program.run(x=x.reshape(DECONV_SHAPE), y=y)["loss"])

    numerical = opt.minimize(value, x0, method="L-BFGS-B", options=options)  # 2-point differences
    assert ours.success, ours.message
    assert ours.fun <= numerical.fun + 1e-12 * abs(numerical.fun)
    assert ours.nfev < numerical.nfev
    assert fun.nfev == ours.nfev
    x = fun.unflatten(ours.x)["x"]
    want = dp.interpret_grad(deconv_program.graph, ["x"], x=x, y=y)["x"]
    np.testing.assert_allclose(fun(ours.x)[1], want.reshape(-1), rtol=1e-9, atol=1e-12)


def test_flat_vector_round_trip(pair_program: dp.Program) -> None:
    rng = np.random.default_rng(1)
    a, b = rng.standard_normal((3, 4)), rng.standard_normal((3, 4))
    fun = dps.objective(pair_program, w=np.ones((3, 4)))
    x = fun.x0(b=b, a=a)
    assert x.dtype == np.float64 and x.shape == (24,)
    np.testing.assert_array_equal(x, np.concatenate([a.ravel(), b.ravel()]))  # wrt order, C order
    back = fun.unflatten(x)
    np.testing.assert_array_equal(back["a"], a)
    np.testing.assert_array_equal(back["b"], b)
    value, grad = fun(x)
    _, grads = pair_program.value_and_grad(a=a, b=b, w=np.ones((3, 4)))
    assert isinstance(value, float) and grad.dtype == np.float64
    np.testing.assert_array_equal(grad, np.concatenate([grads["a"].ravel(), grads["b"].ravel()]))


def test_contract_errors(pair_program: dp.Program) -> None:
    w = np.ones((3, 4))
    with pytest.raises(dp.ContractError, match=r"missing \['w'\]"):
        dps.objective(pair_program)
    with pytest.raises(dp.ContractError, match=r"found wrt \['a'\]"):
        dps.objective(pair_program, a=w, w=w)
    fun = dps.objective(pair_program, w=w)
    with pytest.raises(dp.ContractError, match="flat real vector of 24 values"):
        fun(np.zeros(23))
    with pytest.raises(dp.ContractError, match="expected shape"):
        fun.x0(a=np.zeros((4, 3)), b=w)

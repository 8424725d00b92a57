"""The NumPy peer of the benchmark cases: forward and a hand-written backward, float32.

`VALUE_AND_GRAD` maps each case name of `benchmarks.cases.CASES` to a function taking
the case's inputs as keyword arguments (float32 arrays, the imaging mask uint8) and
returning ``(loss, grad)``: the loss as a Python float and the gradient with respect to
the case's ``wrt`` input, a float32 array of its shape. No autodiff: each backward is
the chain rule written out, in float32 the way a user would write it; only the final
loss sums accumulate in float64 (``np.sum(..., dtype=np.float64)``). The beer and the
imaging cases reuse the existing hand-written versions (`benchmarks.unfused_warp.numpy_beer`,
`benchmarks.bench_imaging.numpy_value_and_grad`).

SciPy is optional (it is in the ``[dev]`` extra, not a dependency): only chain16 (``erf``)
and imaging (the blur) use it, imported when they run; without it those two raise an
ImportError naming what to install, and `dpt-ir bench` leaves them out with that line.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from types import ModuleType

import numpy as np

from benchmarks.unfused_warp import numpy_beer

F32 = np.float32
ValueAndGrad = Callable[..., tuple[float, np.ndarray]]


def _f32(x: float) -> np.float32:
    return np.float32(x)


def _scipy(module: str, what: str) -> ModuleType:
    """``module`` of SciPy, or an ImportError saying which case needs it and how to install it."""
    try:
        return importlib.import_module(module)
    except ImportError:
        raise ImportError(
            f"the NumPy peer of this case needs SciPy ({what}), which is not installed: "
            "pip install scipy, or dpt_ir's [dev] extra"
        ) from None


def beer(x: np.ndarray, obs: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray]:
    """``sum(w * (1.3 exp(-0.7 x) - obs)**2)`` and its gradient wrt ``x`` (`numpy_beer`)."""
    loss, grad = numpy_beer(x, obs, w)
    return float(loss), grad.astype(F32, copy=False)


def chain16(x: np.ndarray) -> tuple[float, np.ndarray]:
    """The 16-op chain of `benchmarks.graphs.chain16`, summed, and its gradient wrt ``x``.

    The forward keeps every intermediate the backward needs; the backward walks the chain
    in reverse, one local derivative per op.
    """
    y1 = np.sin(x)
    y3 = y1 * _f32(0.5) + _f32(1.25)  # ops 2, 3
    y4 = np.log(y3)
    y5 = np.exp(y4)
    y6 = np.sqrt(y5)
    y7 = np.tanh(y6)
    y8 = _f32(1.0) / (_f32(1.0) + np.exp(-y7))  # sigmoid
    y10 = np.square(y8) - _f32(0.25)  # ops 9, 10
    y11 = np.cos(y10)
    y12 = np.maximum(y11, _f32(0.0)) + np.log1p(np.exp(-np.abs(y11)))  # softplus, stable
    y13 = _f32(1.0) / y12
    y14 = _scipy("scipy.special", "scipy.special.erf").erf(y13).astype(F32, copy=False)
    y15 = -y14
    y16 = np.expm1(y15)
    loss = float(np.sum(y16, dtype=np.float64))

    g = np.exp(y15)  # d expm1
    g = -g  # d negate
    g = g * (_f32(2.0 / np.sqrt(np.pi)) * np.exp(-np.square(y13)))  # d erf
    g = g * -np.square(y13)  # d reciprocal: -1/y12^2 = -y13^2
    g = g * (_f32(1.0) / (_f32(1.0) + np.exp(-y11)))  # d softplus = sigmoid
    g = g * -np.sin(y10)  # d cos (op 10 passes through)
    g = g * (_f32(2.0) * y8)  # d square
    g = g * (y8 * (_f32(1.0) - y8))  # d sigmoid
    g = g * (_f32(1.0) - np.square(y7))  # d tanh
    g = g * (_f32(0.5) / y6)  # d sqrt
    g = g * y5  # d exp
    g = g / y3  # d log (op 3 passes through)
    g = g * (_f32(0.5) * np.cos(x))  # ops 2 and 1
    return loss, g.astype(F32, copy=False)


def softmax_xent(z: np.ndarray, t: np.ndarray) -> tuple[float, np.ndarray]:
    """``mean_rows(logsumexp(z) - sum(z t))`` and its gradient wrt ``z``,
    ``(softmax(z) - t) / rows``."""
    m = np.max(z, axis=1, keepdims=True)
    e = np.exp(z - m)
    s = np.sum(e, axis=1, keepdims=True)
    per_row = np.log(s[:, 0]) + m[:, 0] - np.sum(z * t, axis=1)
    rows = z.shape[0]
    loss = float(np.sum(per_row, dtype=np.float64) / rows)
    grad = (e / s - t) * _f32(1.0 / rows)
    return loss, grad.astype(F32, copy=False)


def normalisation(x: np.ndarray, w: np.ndarray) -> tuple[float, np.ndarray]:
    """``sum(w * (c / sqrt(mean(c**2) + 1e-5))**2)`` with ``c = x - mean(x)`` over rows,
    and its gradient wrt ``x``."""
    n = x.shape[1]
    c = x - np.mean(x, axis=1, keepdims=True)
    s = np.sqrt(np.mean(np.square(c), axis=1, keepdims=True) + _f32(1e-5))
    u = c / s
    loss = float(np.sum(w * np.square(u), dtype=np.float64))

    gu = _f32(2.0) * w * u
    gs = -np.sum(gu * u, axis=1, keepdims=True) / s  # u = c / s: d/ds = -c / s^2 = -u / s
    gv = gs / (_f32(2.0) * s)  # s = sqrt(v)
    gc = gu / s + gv * (_f32(2.0 / n) * c)  # v = mean(c^2) + eps
    grad = gc - np.mean(gc, axis=1, keepdims=True)  # c = x - mean(x)
    return loss, grad.astype(F32, copy=False)


def imaging(mu: np.ndarray, counts: np.ndarray, weights: np.ndarray, mask: np.ndarray) -> tuple[float, np.ndarray]:
    """The transmission pipeline (`benchmarks.bench_imaging.numpy_value_and_grad`: scipy
    ``gaussian_filter`` forward, hand-written adjoint), gradient wrt ``mu``."""
    _scipy("scipy.ndimage", "scipy.ndimage.gaussian_filter")
    from benchmarks.bench_imaging import numpy_value_and_grad

    loss, grad = numpy_value_and_grad(mu, counts, weights, mask)
    return float(loss), grad.astype(F32, copy=False)


VALUE_AND_GRAD: dict[str, ValueAndGrad] = {
    "beer": beer,
    "chain16": chain16,
    "softmax_xent": softmax_xent,
    "normalisation": normalisation,
    "imaging": imaging,
}


def versions() -> dict[str, str]:
    """The library versions this peer runs on."""
    try:
        scipy = importlib.import_module("scipy")
    except ImportError:
        return {"numpy": np.__version__, "scipy": "not installed"}
    return {"numpy": np.__version__, "scipy": scipy.__version__}

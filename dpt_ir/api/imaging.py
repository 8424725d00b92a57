"""Imaging operators: ``scipy.ndimage``-compatible filters, finite differences and the
objectives of physical inverse problems, as compositions of the stencil family.

Filters follow ``scipy.ndimage`` names, signatures and boundary semantics (modes
``reflect``, ``constant`` with ``cval``, ``nearest``, ``mirror``, ``wrap``; integer
``origin``). Weights with fewer axes than the input apply to its trailing axes (a
leading batch dimension is left alone).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from numbers import Real
from typing import Any

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.ir.builder import Tensor, records_origin
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import normalize_axes, normalize_axis

MODES = ("reflect", "constant", "nearest", "mirror", "wrap")
ALIASES = {"grid-mirror": "reflect", "grid-constant": "constant", "grid-wrap": "wrap"}


def _mode(mode: str, where: str) -> str:
    if not isinstance(mode, str):
        raise ContractError(f"{where}: a boundary mode must be a string, found {type(mode).__name__} {mode!r}")
    mode = ALIASES.get(mode, mode)
    if mode not in MODES:
        raise ContractError(f"{where}: unknown boundary mode {mode!r}; expected one of {', '.join(MODES)}")
    return mode


def _weights(x: Tensor, weights: Any, where: str) -> np.ndarray:
    try:
        w = np.asarray(weights, dtype=np.float64)
    except (TypeError, ValueError):
        raise ContractError(f"{where}: weights must be an array of numbers, found {weights!r}") from None
    if w.ndim == 0 or w.ndim > x.ndim or w.size == 0:
        raise ContractError(f"{where}: weights of shape {list(w.shape)} do not fit an input of rank {x.ndim}")
    return w.reshape((1,) * (x.ndim - w.ndim) + w.shape)


def _origins(origin: int | Sequence[int], w: np.ndarray, where: str, rank: int | None = None) -> list[int]:
    """One origin per axis of ``w``; a scalar applies to the ``rank`` trailing axes the
    user's weights have (leading batch axes get 0), a short sequence is padded with 0."""
    origins = [origin] * (rank or w.ndim) if isinstance(origin, int | np.integer) else list(origin)
    if len(origins) < w.ndim:
        origins = [0] * (w.ndim - len(origins)) + origins
    if len(origins) != w.ndim:
        raise ContractError(f"{where}: {len(origins)} origins for weights of rank {w.ndim}")
    for o, n in zip(origins, w.shape, strict=True):
        if not -(n // 2) <= o <= (n - 1) // 2:
            raise ContractError(
                f"{where}: origin {o} is out of range for a filter of size {n} "
                f"(expected {-(n // 2)} <= origin <= {(n - 1) // 2})"
            )
    return [int(o) for o in origins]


def _accumulation(accumulate: str, where: str) -> None:
    if accumulate not in ("float64", "dtype"):
        raise ContractError(f"{where}: accumulate must be 'float64' or 'dtype', found {accumulate!r}")


def _filter(
    x: Tensor, w: np.ndarray, mode: str, cval: float, origins: list[int], where: str, accumulate: str = "float64"
) -> Tensor:
    """correlate_valid(pad(x)): the correlation of scipy.ndimage with centre len//2 + origin;
    ``accumulate``: where float32 taps are summed (`CorrelateAttrs`: ``float64``, SciPy's,
    or ``dtype``, an ordered float32 fmaf chain)."""
    mode = _mode(mode, where)
    _accumulation(accumulate, where)
    (x,) = F.lift([x], where)
    if x.size == 0:  # nothing to filter: scipy.ndimage returns the empty image (a pad cannot extend it)
        return x
    before = [n // 2 + o for n, o in zip(w.shape, origins, strict=True)]
    after = [n - 1 - b for n, b in zip(w.shape, before, strict=True)]
    padded = x.builder.emit("pad", [x], {"before": before, "after": after, "mode": mode, "cval": float(cval)})
    return F.apply("correlate_valid", padded, weights=w.tolist(), accumulate=accumulate)


@records_origin
def correlate(
    x: Tensor,
    weights: Any,
    mode: str = "reflect",
    cval: float = 0.0,
    origin: int | Sequence[int] = 0,
    *,
    accumulate: str = "float64",
) -> Tensor:
    """Multidimensional correlation with constant weights (``scipy.ndimage.correlate``).
    ``accumulate``: ``"float64"`` (SciPy's: float32 taps summed in double, rounded once) or
    ``"dtype"`` (in the data's dtype: for float32 an ordered fmaf chain, about twice as fast
    on the CPU, as XLA and PyTorch sum float32 stencils; see `CorrelateAttrs`)."""
    where = "dp.correlate"
    w = _weights(x, weights, where)
    return _filter(x, w, mode, cval, _origins(origin, w, where, np.ndim(weights)), where, accumulate)


@records_origin
def convolve(
    x: Tensor,
    weights: Any,
    mode: str = "reflect",
    cval: float = 0.0,
    origin: int | Sequence[int] = 0,
    *,
    accumulate: str = "float64",
) -> Tensor:
    """Multidimensional convolution with constant weights (``scipy.ndimage.convolve``);
    ``accumulate`` as in `correlate`."""
    where = "dp.convolve"
    w = _weights(x, weights, where)
    origins = _origins(origin, w, where, np.ndim(weights))
    flipped = w[tuple(slice(None, None, -1) for _ in w.shape)]
    shifted = [-o - (1 if n % 2 == 0 else 0) for o, n in zip(origins, w.shape, strict=True)]
    return _filter(x, flipped, mode, cval, shifted, where, accumulate)


def _along(x: Tensor, weights: Any, axis: int, origin: int, where: str) -> tuple[np.ndarray, list[int]]:
    """1-D ``weights`` as a filter of ``x``'s rank along ``axis``, and its origins (``origin``
    on that axis, 0 on the others)."""
    w = np.asarray(weights, dtype=np.float64)
    if w.ndim != 1 or w.size == 0:
        raise ContractError(f"{where}: weights must be a non-empty 1-D sequence, found shape {list(w.shape)}")
    ax = normalize_axis(axis, x.ndim, where)
    shape = [1] * x.ndim
    shape[ax] = w.size
    w = w.reshape(shape)
    return w, _origins([origin if n > 1 else 0 for n in w.shape], w, where)


@records_origin
def correlate1d(
    x: Tensor,
    weights: Any,
    axis: int = -1,
    mode: str = "reflect",
    cval: float = 0.0,
    origin: int = 0,
    *,
    accumulate: str = "float64",
) -> Tensor:
    """1-D correlation along ``axis`` (``scipy.ndimage.correlate1d``); ``accumulate`` as in
    `correlate`."""
    where = "dp.correlate1d"
    w, origins = _along(x, weights, axis, origin, where)
    return _filter(x, w, mode, cval, origins, where, accumulate)


@records_origin
def convolve1d(
    x: Tensor,
    weights: Any,
    axis: int = -1,
    mode: str = "reflect",
    cval: float = 0.0,
    origin: int = 0,
    *,
    accumulate: str = "float64",
) -> Tensor:
    """1-D convolution along ``axis`` (``scipy.ndimage.convolve1d``); ``accumulate`` as in
    `correlate`."""
    where = "dp.convolve1d"
    _accumulation(accumulate, where)
    w, origins = _along(x, weights, axis, origin, where)
    return convolve(x, w, mode, cval, origins, accumulate=accumulate)


def gaussian_kernel1d(sigma: float, truncate: float = 4.0) -> np.ndarray:
    """The normalised 1-D Gaussian weights ``scipy.ndimage.gaussian_filter1d`` uses."""
    radius = int(truncate * float(sigma) + 0.5)
    t = np.arange(-radius, radius + 1, dtype=np.float64)
    phi = np.exp(-0.5 / (float(sigma) ** 2) * t * t)
    return phi / phi.sum()


@records_origin
def gaussian_filter(
    x: Tensor,
    sigma: float | Sequence[float],
    mode: str = "reflect",
    cval: float = 0.0,
    truncate: float = 4.0,
    *,
    accumulate: str = "float64",
) -> Tensor:
    """Separable Gaussian blur (``scipy.ndimage.gaussian_filter``, order 0): one 1-D
    correlation per axis whose sigma is non-zero; ``accumulate`` as in `correlate`."""
    where = "dp.gaussian_filter"
    _accumulation(accumulate, where)
    sigmas = [float(s) for s in _per_axis(sigma, x.ndim, "sigma", where)]
    if any(s < 0 or not math.isfinite(s) for s in sigmas):
        raise ContractError(f"{where}: sigma must be finite and non-negative, found {sigma!r}")
    modes = _per_axis(mode, x.ndim, "mode", where)
    out = x
    for axis, (s, m) in enumerate(zip(sigmas, modes, strict=True)):
        if s > 0:
            out = correlate1d(out, gaussian_kernel1d(s, truncate)[::-1], axis, m, cval, accumulate=accumulate)
    return out


def _per_axis(value: Any, rank: int, what: str, where: str) -> list[Any]:
    """``value`` once per axis, as scipy.ndimage reads its per-axis arguments: a scalar (a
    Python or NumPy number, or a string for modes) applies to every axis; a sequence gives
    one per axis."""
    if isinstance(value, str) or np.ndim(value) == 0:
        items = [value] * rank
    else:
        items = list(np.asarray(value).tolist() if isinstance(value, np.ndarray) else value)
    if len(items) != rank:
        raise ContractError(f"{where}: {what} must be one value or one per axis ({rank}), found {value!r}")
    if what == "sigma" and any(isinstance(v, bool | np.bool_) or not isinstance(v, Real) for v in items):
        raise ContractError(f"{where}: sigma must be real numbers, found {value!r}")
    return items


def _spacings(varargs: tuple[Any, ...], n_axes: int, where: str) -> list[float]:
    """One sample distance per differentiated axis, read as ``numpy.gradient`` reads its
    ``*varargs``: none (unit spacing), one scalar for every axis, or one per axis.
    Coordinate arrays (non-uniform spacing) are refused."""
    if len(varargs) not in (0, 1, n_axes):
        raise ContractError(
            f"{where}: expected 0, 1 or {n_axes} spacings (one per axis differentiated), found {len(varargs)}"
        )
    out = []
    for h in varargs:
        if isinstance(h, bool | np.bool_) or not isinstance(h, int | float | np.integer | np.floating | np.ndarray):
            raise ContractError(f"{where}: a spacing must be a real scalar, found {type(h).__name__} {h!r}")
        if np.ndim(h) != 0:
            raise ContractError(
                f"{where}: spacings must be scalars (coordinate arrays are not supported), "
                f"found shape {list(np.shape(h))}"
            )
        if not math.isfinite(float(h)) or float(h) == 0:
            raise ContractError(f"{where}: a spacing must be finite and non-zero, found {float(h)!r}")
        out.append(float(h))
    if len(out) == 1:
        out *= n_axes
    return out or [1.0] * n_axes


def _difference(x: Tensor, ax: int, h: float, edge_order: int) -> Tensor:
    """``numpy.gradient`` along one axis: central differences inside, one-sided differences
    of order ``edge_order`` at the two ends."""
    n = x.shape[ax]

    def take(start: int, stop: int | None) -> Tensor:
        return x[tuple(slice(start, stop) if k == ax else slice(None) for k in range(x.ndim))]

    if edge_order == 1:
        first = (take(1, 2) - take(0, 1)) / h
        last = (take(n - 1, n) - take(n - 2, n - 1)) / h
    else:
        # NumPy's coefficients, divided by h first, in NumPy's order of terms.
        first = (-1.5 / h) * take(0, 1) + (2.0 / h) * take(1, 2) + (-0.5 / h) * take(2, 3)
        last = (0.5 / h) * take(n - 3, n - 2) + (-2.0 / h) * take(n - 2, n - 1) + (1.5 / h) * take(n - 1, n)
    parts = [first]
    if n > 2:
        parts.append((take(2, None) - take(0, n - 2)) / (2.0 * h))
    parts.append(last)
    return F.concatenate(parts, axis=ax)


@records_origin
def gradient(
    x: Tensor, *varargs: Any, axis: int | Sequence[int] | None = None, edge_order: int = 1
) -> Tensor | list[Tensor]:
    """Finite differences like ``numpy.gradient(f, *varargs, axis=None, edge_order=1)``:
    central differences inside, one-sided (first or second order) at the ends; ``varargs``
    are uniform sample distances (none: 1; one scalar for every axis; or one per axis).
    Integer inputs are differentiated in float64, as NumPy does (never in wrapping integer
    arithmetic). A list when several axes are asked for (in the order asked for), else one
    tensor."""
    where = "dp.gradient"
    (x,) = F.lift([x], where)
    if x.dtype == "bool":
        raise ContractError(f"{where}: expected a numeric input, found bool")
    if x.dtype not in ("float32", "float64"):
        x = F.cast(x, "float64")
    if edge_order not in (1, 2) or isinstance(edge_order, bool):
        raise ContractError(f"{where}: edge_order must be 1 or 2, found {edge_order!r}")
    axes = normalize_axes(axis, x.ndim, where)
    if isinstance(axis, Sequence):  # numpy.gradient returns the axes in the order asked for
        axes = tuple(normalize_axis(a, x.ndim, where) for a in axis)
    spacings = _spacings(varargs, len(axes), where)
    out = []
    for ax, h in zip(axes, spacings, strict=True):
        if x.shape[ax] < edge_order + 1:
            raise ContractError(
                f"{where}: axis {ax} has size {x.shape[ax]}; at least {edge_order + 1} samples are needed "
                f"for edge_order={edge_order}"
            )
        out.append(_difference(x, ax, h, edge_order))
    return out[0] if len(out) == 1 else out  # like numpy.gradient: one axis, one array


# -- objectives -----------------------------------------------------------------------
def _valid(x: Tensor, mask: Tensor | None, where: str) -> Tensor | None:
    if mask is None:
        return None
    if not isinstance(mask, Tensor):
        raise ContractError(f"{where}: mask must be a dp tensor (bool or uint8), found {type(mask).__name__}")
    if mask.dtype == "uint8":
        return mask != 0
    if mask.dtype != "bool":
        raise ContractError(f"{where}: mask must be bool or uint8, found {mask.dtype}")
    return mask


def _reduce(loss: Tensor, reduction: str, where: str) -> Tensor:
    if reduction == "sum":
        return F.sum(loss)
    if reduction == "mean":
        return F.sum(loss) / float(max(loss.size, 1))
    raise ContractError(f"{where}: reduction must be 'sum' or 'mean', found {reduction!r}")


def _guarded_weights(weights: Tensor | None, valid: Tensor | None, where: str) -> Tensor | None:
    if weights is None:
        return None
    ok = weights >= 0 if valid is None else (weights >= 0) | F.logical_not(valid)
    return weights.builder.emit("guard", [weights, ok], {"message": f"{where}: weights must be non-negative"})


@records_origin
def squared_error(
    pred: Tensor, obs: Tensor, weights: Tensor | None = None, mask: Tensor | None = None, reduction: str = "sum"
) -> Tensor:
    """sum or mean over pixels of ``w * (pred - obs)**2``; masked-out lanes contribute
    exactly zero loss and gradient, whatever their values (NaN included). ``mean``
    divides by the pixel count, not by the sum of weights."""
    where = "dp.squared_error"
    pred, obs = F.lift([pred, obs], where)
    valid = _valid(pred, mask, where)
    if valid is not None:
        pred, obs = F.where(valid, pred, 0.0), F.where(valid, obs, 0.0)
    loss = F.square(pred - obs)
    w = _guarded_weights(weights, valid, where)
    if w is not None:
        loss = w * loss
    if valid is not None:
        loss = F.where(valid, loss, 0.0)
    return _reduce(loss, reduction, where)


@records_origin
def poisson_deviance(
    mean: Tensor, counts: Tensor, weights: Tensor | None = None, mask: Tensor | None = None, reduction: str = "sum"
) -> Tensor:
    """The Poisson half deviance ``sum(w * (mean - counts + counts * log(counts / mean)))``
    with ``counts * log(counts / mean) = 0`` where counts is 0.

    Written for stable values and gradients: the logarithm only ever sees positive
    operands in the lanes where its branch is not taken, so masked lanes and zero counts
    give exact zeros, never NaN. An unmasked lane with a zero mean and positive count
    gives an infinite loss (a NumericalError at the checkpoint); negative counts or
    weights raise it too.
    """
    where = "dp.poisson_deviance"
    mean, counts = F.lift([mean, counts], where)
    valid = _valid(mean, mask, where)
    if valid is not None:
        mean, counts = F.where(valid, mean, 1.0), F.where(valid, counts, 0.0)
    ok = counts >= 0 if valid is None else (counts >= 0) | F.logical_not(valid)
    counts = counts.builder.emit("guard", [counts, ok], {"message": f"{where}: counts must be non-negative"})
    positive = counts > 0
    ratio = F.where(positive, counts, 1.0) / F.where(positive, mean, 1.0)
    loss = mean - counts + F.where(positive, counts * F.log(ratio), 0.0)
    w = _guarded_weights(weights, valid, where)
    if w is not None:
        loss = w * loss
    if valid is not None:
        loss = F.where(valid, loss, 0.0)
    return _reduce(loss, reduction, where)

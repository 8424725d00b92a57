"""NumPy reference of scipy.ndimage's cubic B-spline prefilter along one axis, and of its
exact adjoint (the transposed recursive filter).

Assumes float64 arithmetic. Guarantees, for ``order=3`` and every scipy.ndimage mode, the
same causal + anti-causal recursion as scipy's ``ni_splines.c`` (gain, then per pole a
boundary initialisation of the first coefficient, the causal pass, an initialisation of
the last coefficient and the anti-causal pass), so `spline_filter1d` equals
``scipy.ndimage.spline_filter1d(x, 3, axis, mode=mode)`` to rounding. `spline_filter1d_adjoint`
applies the transpose of every step in reverse order: ``<F x, y> == <x, Fᵀ y>`` to rounding.

Each boundary initialisation replaces one coefficient by a linear functional of the
line; `init_functional` gives its weights explicitly so that the forward step and its
transpose read the same numbers. A line of length 1 is left unchanged (scipy skips it).
"""

from __future__ import annotations

import numpy as np

# The pole of the cubic B-spline, sqrt(3) - 2 (scipy's get_filter_poles, order 3).
CUBIC_POLE = -0.267949192431122706472553658494127633
SPLINE_ORDERS = (0, 1, 3)


def filter_family(mode: str) -> str:
    """The boundary initialisation scipy's ``apply_filter`` uses for ``mode``."""
    if mode == "grid-wrap":
        return "wrap"
    if mode in ("nearest", "reflect", "grid-mirror"):
        return "reflect"
    return "mirror"  # constant, grid-constant, mirror, wrap


def init_functional(n: int, z: float, family: str, causal: bool) -> np.ndarray:
    """Weights ``a`` (length ``n``) such that the initialisation sets ``c[0] = a @ c``
    (causal) or ``c[n - 1] = a @ c`` (anti-causal), as scipy's ``_init_*`` functions."""
    a = np.zeros(n)
    powers = z ** np.arange(2 * n + 1, dtype=np.float64)
    if family == "mirror" and causal:
        zn1 = powers[n - 1]
        a[0] += 1.0
        a[n - 1] += zn1
        for i in range(1, n - 1):
            a[i] += powers[i]
            a[n - 1 - i] += powers[i] * zn1
        return a / (1 - zn1 * zn1)
    if family == "mirror":
        a[n - 2] = z * z / (z * z - 1)
        a[n - 1] = z / (z * z - 1)
        return a
    if family == "wrap" and causal:
        a[0] = 1.0
        for i in range(1, n):
            a[n - i] += powers[i]
        return a / (1 - powers[n])
    if family == "wrap":
        a[n - 1] = 1.0
        for i in range(n - 1):
            a[i] += powers[i + 1]
        return a * (z / (powers[n] - 1))
    if family == "reflect" and causal:
        zn = powers[n]
        k = z / (1 - zn * zn)
        a[0] += 1.0 + k
        a[n - 1] += k * zn
        for i in range(1, n):
            a[i] += k * powers[i]
            a[n - 1 - i] += k * powers[i] * zn
        return a
    if family == "reflect":
        a[n - 1] = z / (z - 1)
        return a
    raise ValueError(f"unknown spline filter family {family!r}")


def _gain(z: float) -> float:
    return (1.0 - z) * (1.0 - 1.0 / z)


def _lines(x: np.ndarray, axis: int) -> np.ndarray:
    """A float64 copy of ``x`` with ``axis`` moved last (the lines being filtered)."""
    return np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1).copy()


def spline_filter1d(x: np.ndarray, axis: int, mode: str) -> np.ndarray:
    """scipy.ndimage.spline_filter1d(x, order=3, axis=axis, mode=mode), in float64."""
    c = _lines(x, axis)
    n = c.shape[-1]
    if n > 1:
        z = CUBIC_POLE
        family = filter_family(mode)
        first, last = init_functional(n, z, family, True), init_functional(n, z, family, False)
        c *= _gain(z)
        c[..., 0] = c @ first
        for i in range(1, n):
            c[..., i] += z * c[..., i - 1]
        c[..., n - 1] = c @ last
        for i in range(n - 2, -1, -1):
            c[..., i] = z * (c[..., i + 1] - c[..., i])
    return np.moveaxis(c, -1, axis)


def _replace_transposed(c: np.ndarray, a: np.ndarray, k: int) -> None:
    """Transpose of ``c[k] = a @ c``: every element gains ``a[j] * c[k]``, then ``c[k]`` is scaled by ``a[k]``."""
    ck = c[..., k : k + 1].copy()
    c += ck * a
    c[..., k] = ck[..., 0] * a[k]


def spline_filter1d_adjoint(y: np.ndarray, axis: int, mode: str) -> np.ndarray:
    """The transpose of `spline_filter1d`: each step of the recursion transposed, in reverse order."""
    c = _lines(y, axis)
    n = c.shape[-1]
    if n > 1:
        z = CUBIC_POLE
        family = filter_family(mode)
        first, last = init_functional(n, z, family, True), init_functional(n, z, family, False)
        # anti-causal pass c[i] = z * (c[i + 1] - c[i]), i = n-2..0, transposed: i = 0..n-2
        for i in range(n - 1):
            c[..., i + 1] += z * c[..., i]
            c[..., i] *= -z
        _replace_transposed(c, last, n - 1)
        # causal pass c[i] += z * c[i - 1], i = 1..n-1, transposed: i = n-1..1
        for i in range(n - 1, 0, -1):
            c[..., i - 1] += z * c[..., i]
        _replace_transposed(c, first, 0)
        c *= _gain(z)
    return np.moveaxis(c, -1, axis)


def spline_filter(x: np.ndarray, mode: str) -> np.ndarray:
    """scipy.ndimage.spline_filter(x, order=3, mode=mode): the 1-D filter along every axis in turn."""
    out = np.asarray(x, dtype=np.float64)
    for axis in range(out.ndim):
        out = spline_filter1d(out, axis, mode)
    return out


def filter_matrix(n: int, mode: str, adjoint: bool = False) -> np.ndarray:
    """The (n, n) matrix of the filter along a line of length ``n`` (its transpose when
    ``adjoint``): column j is the filter applied to the unit vector e_j."""
    eye = np.eye(n)
    return spline_filter1d_adjoint(eye, 0, mode) if adjoint else spline_filter1d(eye, 0, mode)

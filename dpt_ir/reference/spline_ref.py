"""NumPy reference of scipy.ndimage's B-spline prefilter along one axis, and of its
exact adjoint (the transposed recursive filter).

Assumes float64 arithmetic. Guarantees, for orders 2 to 5 and every scipy.ndimage mode, the
same causal + anti-causal recursion as scipy's ``ni_splines.c`` (the gain of every pole,
then per pole a boundary initialisation of the first coefficient, the causal pass, an
initialisation of the last coefficient and the anti-causal pass), so `spline_filter1d`
equals ``scipy.ndimage.spline_filter1d(x, order, axis, mode=mode)`` to rounding. `spline_filter1d_adjoint`
applies the transpose of every step in reverse order: ``<F x, y> == <x, Fᵀ y>`` to rounding.

Each boundary initialisation replaces one coefficient by a linear functional of the
line; `init_functional` gives its weights explicitly so that the forward step and its
transpose read the same numbers. A line of length 1 is left unchanged (scipy skips it).
"""

from __future__ import annotations

import math

import numpy as np

FILTER_ORDERS = (2, 3, 4, 5)  # the orders with a prefilter (0 and 1 interpolate their input)


def filter_poles(order: int) -> tuple[float, ...]:
    """The poles of the B-spline of ``order`` (scipy's ``get_filter_poles``, the same formulas)."""
    if order == 2:
        return (math.sqrt(8.0) - 3.0,)
    if order == 3:
        return (math.sqrt(3.0) - 2.0,)
    if order == 4:
        return (
            math.sqrt(664.0 - math.sqrt(438976.0)) + math.sqrt(304.0) - 19.0,
            math.sqrt(664.0 + math.sqrt(438976.0)) - math.sqrt(304.0) - 19.0,
        )
    if order == 5:
        return (
            math.sqrt(67.5 - math.sqrt(4436.25)) + math.sqrt(26.25) - 6.5,
            math.sqrt(67.5 + math.sqrt(4436.25)) - math.sqrt(26.25) - 6.5,
        )
    raise ValueError(f"no spline prefilter of order {order}")


def filter_gain(poles: tuple[float, ...]) -> float:
    """The product of ``(1 - z)(1 - 1/z)`` over the poles, in scipy's order."""
    g = 1.0
    for z in poles:
        g *= (1.0 - z) * (1.0 - 1.0 / z)
    return g


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


def _lines(x: np.ndarray, axis: int) -> np.ndarray:
    """A float64 copy of ``x`` with ``axis`` moved last (the lines being filtered)."""
    return np.moveaxis(np.asarray(x, dtype=np.float64), axis, -1).copy()


def spline_filter1d(x: np.ndarray, axis: int, mode: str, order: int = 3) -> np.ndarray:
    """scipy.ndimage.spline_filter1d(x, order=order, axis=axis, mode=mode), in float64."""
    c = _lines(x, axis)
    n = c.shape[-1]
    if n > 1:
        poles, family = filter_poles(order), filter_family(mode)
        c *= filter_gain(poles)
        for z in poles:
            first, last = init_functional(n, z, family, True), init_functional(n, z, family, False)
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


def spline_filter1d_adjoint(y: np.ndarray, axis: int, mode: str, order: int = 3) -> np.ndarray:
    """The transpose of `spline_filter1d`: each step of the recursion transposed, in reverse order."""
    c = _lines(y, axis)
    n = c.shape[-1]
    if n > 1:
        poles, family = filter_poles(order), filter_family(mode)
        for z in reversed(poles):
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
        c *= filter_gain(poles)
    return np.moveaxis(c, -1, axis)


def spline_filter(x: np.ndarray, mode: str, order: int = 3) -> np.ndarray:
    """scipy.ndimage.spline_filter(x, order=order, mode=mode): the 1-D filter along every axis in turn."""
    out = np.asarray(x, dtype=np.float64)
    for axis in range(out.ndim):
        out = spline_filter1d(out, axis, mode, order)
    return out


def filter_matrix(n: int, mode: str, adjoint: bool = False, order: int = 3) -> np.ndarray:
    """The (n, n) matrix of the filter along a line of length ``n`` (its transpose when
    ``adjoint``): column j is the filter applied to the unit vector e_j."""
    eye = np.eye(n)
    return spline_filter1d_adjoint(eye, 0, mode, order) if adjoint else spline_filter1d(eye, 0, mode, order)

"""Interpolation at coordinates that are graph tensors (registration), as a composite.

Assumes the (prefiltered) image ``x`` and float coordinates ``c`` of shape
``(x.ndim, *output_shape)`` in the same graph. Guarantees scipy.ndimage's taps
(`dpt_ir.reference.resample_ref`, which this mirrors formula by formula): the mode's mapping of an
out-of-range coordinate (with C's truncating divisions), the footprint start, the folding
of footprint taps (``mirror`` for ``constant`` and ``wrap``), the B-spline weights of
orders 0 to 5, and the cval rules; built from elementwise ops, one ``dp.take`` of
every footprint tap and a sum over the footprint in scipy's order.

Gradients: wrt the image, the gradient of ``take``, an ``add_at`` of the weighted
cotangent (a per-evaluation counting sort by destination and an ordered sum: no float
atomics); wrt the coordinates, the derivative of the weights (``floor`` has none, so the
fractional part's derivative is 1) chained through the mode's piecewise-linear mapping.
At integer coordinates (orders 0 and 1) and at the edges of ``constant`` mode the
interpolant is not differentiable; there the gradient is the one-sided one of the branch
taken.
"""

from __future__ import annotations

import math

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.api.gather import take
from dpt_ir.ir.builder import Tensor
from dpt_ir.reference.resample_ref import canonical_mode, knot_weights


def _trunc(v: Tensor) -> Tensor:
    """C's cast of a double to an integer: toward zero."""
    return F.where(v < 0.0, F.ceil(v), F.floor(v))


def map_coordinate(c: Tensor, n: int, mode: str) -> Tensor:
    """`dpt_ir.reference.resample_ref.map_coordinate` on a tensor (``constant``: -1 outside)."""
    mode = canonical_mode(mode)
    lo, hi = c < 0.0, c > float(n - 1)
    if mode in ("mirror", "reflect", "wrap", "grid-wrap") and n <= 1:
        return F.where(lo | hi, 0.0, c)
    if mode == "mirror":
        sz2 = float(2 * n - 2)
        v = sz2 * _trunc(-c / sz2) + c
        low = F.where(v <= float(1 - n), v + sz2, -v)
        w = c - sz2 * _trunc(c / sz2)
        high = F.where(w >= float(n), sz2 - w, w)
    elif mode == "reflect":
        sz2 = float(2 * n)
        v = F.where(c < -sz2, sz2 * _trunc(-c / sz2) + c, c)
        low = F.where(v < float(-n), v + sz2, F.where(v > -1e-15, 1e-15, -v) - 1.0)
        w = c - sz2 * _trunc(c / sz2)
        high = F.where(w >= float(n), sz2 - w - 1.0, w)
    elif mode == "wrap":
        sz = float(n - 1)
        low = c + sz * (_trunc(-c / sz) + 1.0)
        high = c - sz * _trunc(c / sz)
    elif mode == "grid-wrap":
        low = c + float(n) * (_trunc((-1.0 - c) / float(n)) + 1.0)
        high = c - float(n) * _trunc(c / float(n))
    elif mode == "nearest":
        low, high = F.zeros_like(c), F.zeros_like(c) + float(n - 1)
    elif mode == "constant":
        low = high = F.zeros_like(c) - 1.0
    else:  # grid-constant: unchanged
        return c
    return F.where(lo, low, F.where(hi, high, c))


def spline_weights(cc: Tensor, order: int) -> list[Tensor]:
    """`dpt_ir.reference.resample_ref.spline_weights` on a tensor: one tensor per footprint tap."""
    if order == 0:
        return [F.zeros_like(cc) + 1.0]
    x = cc - F.floor(cc if order & 1 else cc + 0.5)
    return knot_weights(x, order)


def _axis_taps(cc: Tensor, n: int, order: int, mode: str) -> tuple[Tensor | None, list[Tensor], list[Tensor], list]:
    """(inside or None, tap positions as float tensors, weights, per-tap "reads cval" or None)."""
    mode = canonical_mode(mode)
    if mode not in ("grid-constant", "nearest"):
        cc = map_coordinate(cc, n, mode)
    inside = cc > -1.0 if mode == "constant" else None
    if inside is not None:
        cc = F.where(inside, cc, 0.0)
    start = F.floor(cc) - float(order // 2) if order & 1 else F.floor(cc + 0.5) - float(order // 2)
    positions, cval_taps = [], []
    for k in range(order + 1):
        p = start + float(k)
        if mode == "grid-constant":
            cval_taps.append((p < 0.0) | (p > float(n - 1)))
            p = F.clip(p, 0.0, float(n - 1))
        else:
            cval_taps.append(None)
            p = map_coordinate(p, n, "mirror" if mode in ("constant", "wrap") else mode)
        positions.append(p)
    return inside, positions, spline_weights(cc, order), cval_taps


def interpolate_at(x: Tensor, c: Tensor, order: int, mode: str, cval: float, npad: int) -> Tensor:
    """``x`` (already prefiltered and prepadded by ``npad``) sampled at the coordinates ``c``.

    Every tensor here has the output's shape: per axis, the ``order + 1`` tap positions and
    weights are computed once per point; each footprint tap is one ``take`` of the flat
    image (scipy's footprint order: last axis fastest); the sum is separable, innermost axis
    first (``sum_a w0[a] * sum_b w1[b] * x[a, b]`` in 2-D): the same terms as scipy's
    sequential sum, equal to rounding, with fewer products and, for the gradient wrt the
    coordinates, each axis' weight derivatives applied to shared partial sums."""
    d, k = x.ndim, order + 1
    strides = [math.prod(x.shape[h + 1 :]) for h in range(d)]
    per_axis = [_axis_taps(c[h] + float(npad), x.shape[h], order, mode) for h in range(d)]
    flat = F.reshape(x, (-1,))
    values = [_tap_value(flat, per_axis, strides, combo, cval) for combo in np.ndindex(*(k,) * d)]
    for h in reversed(range(d)):  # sum out the last remaining axis: groups of k consecutive taps
        ws = per_axis[h][2]
        values = [_weighted_sum(ws, values[g * k : (g + 1) * k]) for g in range(len(values) // k)]
    (out,) = values
    inside = [t[0] for t in per_axis if t[0] is not None]
    if inside:
        all_inside = inside[0]
        for m in inside[1:]:
            all_inside = all_inside & m
        out = F.where(all_inside, out, float(cval))
    return out


def _tap_value(flat: Tensor, per_axis: list, strides: list[int], combo: tuple[int, ...], cval: float) -> Tensor:
    """The (flat) image at footprint tap ``combo`` of every point; ``cval`` where it reads cval."""
    pos, cv = None, None
    for h, t in enumerate(combo):
        _, positions, _, cvals = per_axis[h]
        term = positions[t] * float(strides[h])
        pos = term if pos is None else pos + term
        if cvals[t] is not None:
            cv = cvals[t] if cv is None else cv | cvals[t]
    value = take(flat, F.cast(pos, "int32"), mode="clip")
    return value if cv is None else F.where(cv, float(cval), value)


def _weighted_sum(weights: list[Tensor], values: list[Tensor]) -> Tensor:
    """``weights[0] * values[0] + weights[1] * values[1] + ...``, left to right."""
    total = weights[0] * values[0]
    for w, v in zip(weights[1:], values[1:], strict=True):
        total = total + w * v
    return total


def affine_coordinates(matrix: Tensor, offset: Tensor, out_shape: tuple[int, ...]) -> Tensor:
    """``matrix @ o + offset`` for every output index ``o`` (``matrix``: (ndim, out ndim))."""
    b = matrix.builder
    grid = F.concatenate(
        [F.expand_dims(F.cast(F.iota(b, out_shape, [a]), matrix.dtype), 0) for a in range(len(out_shape))], axis=0
    )
    m = F.reshape(matrix, (*matrix.shape, *(1,) * len(out_shape)))
    off = F.reshape(offset, (offset.shape[0], *(1,) * len(out_shape)))
    return F.sum(m * F.expand_dims(grid, 0), axis=1) + off

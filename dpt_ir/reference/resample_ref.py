"""NumPy reference of scipy.ndimage's interpolation maths, as constant sparse linear maps.

Assumes float64 coordinates. Guarantees, for spline orders 0 to 5 and every mode, the
(source index, weight) taps scipy's ``ni_interpolation.c`` reads for each output point:
how each mode maps an out-of-range coordinate (`map_coordinate`, with scipy's truncating
integer divisions), where the filter footprint starts, how footprint taps outside the
input are folded back (``mirror`` for ``constant`` and ``wrap``, as scipy's
``_get_spline_boundary_mode``), and the cval rules: under ``constant`` a point outside
``[0, n - 1]`` on any axis *is* ``cval``; under ``grid-constant`` each footprint tap
outside the input reads ``cval``.

An interpolation is affine in the image: ``out = A @ x + (cval terms)``. `SparseMap` holds
``A`` as a destination-sorted CSR (each row's columns ascending, duplicate taps merged,
zero weights kept: scipy reads every footprint tap, so NaN next to an integer coordinate
propagates) and the taps that read cval apart, so a row with none gets no cval term (a
non-finite cval stays where scipy puts it); `SparseMap.transpose` is ``Aᵀ`` sorted by its
own destination, so both directions are ordered gathers.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

import numpy as np

MODES = ("constant", "nearest", "reflect", "mirror", "wrap", "grid-constant", "grid-mirror", "grid-wrap")
PREPAD = 12  # scipy's _prepad_for_spline_filter width for nearest and grid-constant


def canonical_mode(mode: str) -> str:
    """scipy treats ``grid-mirror`` as ``reflect`` (``_extend_mode_to_code``)."""
    return "reflect" if mode == "grid-mirror" else mode


@dataclass(frozen=True)
class SparseMap:
    """``out = A @ x + cval terms`` for flat ``x`` of ``n_in`` elements; ``A`` in CSR. The
    taps that read ``cval`` are kept apart (``cval_rows``, ``cval_vals``: the output row and
    weight of each), so that a row without one gets no cval term at all: ``0 * nan`` never
    reaches a point inside the image."""

    n_out: int
    n_in: int
    rowptr: np.ndarray  # int64, n_out + 1
    cols: np.ndarray  # int64
    vals: np.ndarray  # float64
    cval_rows: np.ndarray  # int64: the row of each tap that reads cval
    cval_vals: np.ndarray  # float64: its weight (1 for a point that *is* cval)

    def bias(self, cval: float) -> np.ndarray | None:
        """Each row's cval term, ``sum(cval * w)`` over its cval taps as scipy sums them
        (a zero weight times a non-finite cval is NaN there too), 0 in a row without one;
        None where every term is exactly zero (no cval term to add)."""
        if cval == 0.0 or not len(self.cval_rows):
            return None
        with np.errstate(invalid="ignore"):  # inf * 0 is NaN on purpose, as in scipy
            term = np.bincount(self.cval_rows, weights=cval * self.cval_vals, minlength=self.n_out)
        return term if bool(np.any(term != 0.0)) else None

    def apply(self, x: np.ndarray, cval: float = 0.0) -> np.ndarray:
        """``A @ x`` plus the cval terms in float64; each row sums in CSR order."""
        flat = np.asarray(x, dtype=np.float64).reshape(-1)
        rows = np.repeat(np.arange(self.n_out), np.diff(self.rowptr))
        out = np.bincount(rows, weights=self.vals * flat[self.cols], minlength=self.n_out)
        bias = self.bias(cval)
        return out if bias is None else out + bias

    def transpose(self) -> SparseMap:
        """``Aᵀ`` as a CSR sorted by its destination (the input element), no cval taps."""
        rows = np.repeat(np.arange(self.n_out), np.diff(self.rowptr))
        order = np.lexsort((rows, self.cols))
        rowptr = np.searchsorted(self.cols[order], np.arange(self.n_in + 1))
        none = np.zeros(0, np.int64)
        return SparseMap(self.n_in, self.n_out, rowptr, rows[order], self.vals[order], none, np.zeros(0))

    def max_row(self) -> int:
        return int(np.diff(self.rowptr).max()) if self.n_out else 0


def from_triplets(
    n_out: int, n_in: int, rows: np.ndarray, cols: np.ndarray, vals: np.ndarray, keep_zeros: bool = False
) -> SparseMap:
    """A `SparseMap` (no cval taps) from unordered (row, col, weight) taps: sorted by (row,
    col), duplicate taps summed in their given order, zero weights dropped unless
    ``keep_zeros`` (scipy's interpolation reads every footprint tap, so a zero weight times
    a NaN neighbour is NaN there)."""
    keep = np.ones(len(vals), bool) if keep_zeros else vals != 0
    key = rows[keep].astype(np.int64) * max(n_in, 1) + cols[keep]
    uniq, inverse = np.unique(key, return_inverse=True)
    merged = np.bincount(inverse, weights=vals[keep], minlength=len(uniq))
    out_rows, out_cols = uniq // max(n_in, 1), uniq % max(n_in, 1)
    rowptr = np.searchsorted(out_rows, np.arange(n_out + 1))
    return SparseMap(n_out, n_in, rowptr, out_cols, merged, np.zeros(0, np.int64), np.zeros(0))


def _trunc(v: np.ndarray) -> np.ndarray:
    """C's ``(npy_intp)`` cast of a double: truncation toward zero."""
    return np.trunc(v)


def map_coordinate(c: np.ndarray, n: int, mode: str) -> np.ndarray:
    """scipy's ``map_coordinate``: an out-of-range coordinate mapped back per ``mode``
    (``constant`` gives -1: the point is cval). ``grid-constant`` is left unchanged."""
    mode = canonical_mode(mode)
    c = np.array(c, dtype=np.float64)
    lo, hi = c < 0, c > n - 1
    if mode in ("mirror", "reflect", "wrap", "grid-wrap") and n <= 1:
        c[lo | hi] = 0.0
        return c
    v, w = c[lo], c[hi]
    if mode == "mirror":
        sz2 = 2 * n - 2
        v = sz2 * _trunc(-v / sz2) + v
        v = np.where(v <= 1 - n, v + sz2, -v)
        w = w - sz2 * _trunc(w / sz2)
        w = np.where(w >= n, sz2 - w, w)
    elif mode == "reflect":
        sz2 = 2 * n
        v = np.where(v < -sz2, sz2 * _trunc(-v / sz2) + v, v)
        v = np.where(v < -n, v + sz2, np.where(v > -1e-15, 1e-15, -v) - 1)
        w = w - sz2 * _trunc(w / sz2)
        w = np.where(w >= n, sz2 - w - 1, w)
    elif mode == "wrap":
        sz = n - 1
        v = v + sz * (_trunc(-v / sz) + 1)
        w = w - sz * _trunc(w / sz)
    elif mode == "grid-wrap":
        v = v + n * (_trunc((-1 - v) / n) + 1)
        w = w - n * _trunc(w / n)
    elif mode == "nearest":
        v, w = np.zeros_like(v), np.full_like(w, n - 1)
    elif mode == "constant":
        v, w = np.full_like(v, -1.0), np.full_like(w, -1.0)
    c[lo], c[hi] = v, w
    return c


def knot_weights(x: Any, order: int) -> list[Any]:
    """scipy's ``get_spline_interpolation_weights`` for ``order`` >= 1, operation for operation:
    ``x`` the coordinate's delta to the middle knot (``c - floor(c)``, even orders
    ``c - floor(c + 0.5)``), an array or a graph tensor (the same arithmetic either way); the
    last weight is 1 minus the others, subtracted in order."""
    y, z = x, 1.0 - x
    if order == 1:
        w = [1.0 - x]
    elif order == 2:
        y = 0.5 - x
        w = [0.5 * y * y, 0.75 - x * x]
    elif order == 3:
        w = [z * z * z / 6.0, (y * y * (y - 2.0) * 3.0 + 4.0) / 6.0, (z * z * (z - 2.0) * 3.0 + 4.0) / 6.0]
    elif order == 4:
        t = x * x
        w2 = t * (t * 0.25 - 0.625) + 115.0 / 192.0
        y = 1.0 + x
        w1 = y * (y * (y * (5.0 - y) / 6.0 - 1.25) + 5.0 / 24.0) + 55.0 / 96.0
        w3 = z * (z * (z * (5.0 - z) / 6.0 - 1.25) + 5.0 / 24.0) + 55.0 / 96.0
        y = 0.5 - x
        t = y * y
        w = [t * t / 24.0, w1, w2, w3]
    elif order == 5:
        t = y * y
        w2 = t * (t * (0.25 - y / 12.0) - 0.5) + 0.55
        t = z * z
        w3 = t * (t * (0.25 - z / 12.0) - 0.5) + 0.55
        y = y + 1.0
        w1 = y * (y * (y * (y * (y / 24.0 - 0.375) + 1.25) - 1.75) + 0.625) + 0.425
        z = z + 1.0
        w4 = z * (z * (z * (z * (z / 24.0 - 0.375) + 1.25) - 1.75) + 0.625) + 0.425
        y = 1.0 - x
        t = y * y
        w = [y * t * t / 120.0, w1, w2, w3, w4]
    else:
        raise ValueError(f"no spline interpolation of order {order}")
    last = 1.0 - w[0]
    for v in w[1:]:
        last = last - v
    return [*w, last]


def spline_weights(cc: np.ndarray, order: int) -> np.ndarray:
    """scipy's ``get_spline_interpolation_weights`` for each coordinate: (len, order + 1)."""
    if order == 0:
        return np.ones((len(cc), 1))
    x = cc - np.floor(cc if order & 1 else cc + 0.5)
    return np.stack(knot_weights(x, order), axis=1)


def axis_taps(cc: np.ndarray, n: int, order: int, mode: str):
    """Taps along one axis for coordinates ``cc`` (already shifted by any prepadding):
    (inside (m,), index (m, order + 1), weight (m, order + 1), is_cval (m, order + 1))."""
    mode = canonical_mode(mode)
    if mode not in ("grid-constant", "nearest"):
        cc = map_coordinate(cc, n, mode)
    inside = np.ones(len(cc), bool) if mode in ("grid-constant", "nearest") else cc > -1.0
    cc = np.where(inside, cc, 0.0)
    start = np.floor(cc) - order // 2 if order & 1 else np.floor(cc + 0.5) - order // 2
    index = start[:, None] + np.arange(order + 1)
    if mode == "grid-constant":
        is_cval = (index < 0) | (index >= n)
        index = np.clip(index, 0, n - 1)
    else:
        is_cval = np.zeros(index.shape, bool)
        spline_mode = "mirror" if mode in ("constant", "wrap") else mode
        index = map_coordinate(index, n, spline_mode)
    return inside, index.astype(np.int64), spline_weights(cc, order), is_cval


def coordinate_map(coords: np.ndarray, in_shape: tuple[int, ...], order: int, mode: str, npad: int = 0) -> SparseMap:
    """The taps of interpolating an array of ``in_shape`` at ``coords`` (ndim, *out_shape),
    the coordinates counted in the unpadded array when ``npad`` elements pad each side.
    Every footprint tap is kept, zero weights included, as scipy reads them; an empty input
    makes every point ``cval`` (scipy's answer under ``constant`` and ``grid-constant``)."""
    coords = np.asarray(coords, dtype=np.float64)
    d, m, k = len(in_shape), math.prod(coords.shape[1:]), order + 1
    if math.prod(in_shape) == 0:
        none = np.zeros(0, np.int64)
        return SparseMap(m, 0, np.zeros(m + 1, np.int64), none, np.zeros(0), np.arange(m), np.ones(m))
    flat = coords.reshape(d, m)
    per_axis = [axis_taps(flat[h] + npad, in_shape[h], order, mode) for h in range(d)]
    inside = np.logical_and.reduce([t[0] for t in per_axis])
    cols = np.zeros((m,) + (k,) * d, np.int64)
    vals = np.ones((m,) + (k,) * d)
    cval_tap = np.zeros((m,) + (k,) * d, bool)
    strides = np.cumprod((1, *in_shape[::-1]))[:-1][::-1]
    for h, (_, index, weight, is_cval) in enumerate(per_axis):
        shape = [m] + [k if a == h else 1 for a in range(d)]
        cols = cols + (index * int(strides[h])).reshape(shape)
        vals = vals * weight.reshape(shape)
        cval_tap = cval_tap | is_cval.reshape(shape)
    vals, cval_tap = vals.reshape(m, k**d), cval_tap.reshape(m, k**d)
    rows = np.broadcast_to(np.arange(m)[:, None], vals.shape)
    live = inside[:, None] & ~cval_tap
    a = from_triplets(m, math.prod(in_shape), rows[live], cols.reshape(m, k**d)[live], vals[live], keep_zeros=True)
    # a point outside under constant is one cval tap of weight 1; grid-constant taps keep their weights
    outside = np.flatnonzero(~inside)
    taps = inside[:, None] & cval_tap
    cval_rows = np.concatenate([rows[taps], outside])
    cval_vals = np.concatenate([vals[taps], np.ones(len(outside))])
    return SparseMap(a.n_out, a.n_in, a.rowptr, a.cols, a.vals, cval_rows, cval_vals)


def affine_coordinates(matrix: np.ndarray, offset: np.ndarray, out_shape: tuple[int, ...]) -> np.ndarray:
    """``matrix @ o + offset`` for every output index ``o``, summed in scipy's order."""
    matrix = np.asarray(matrix, np.float64)
    grid = np.indices(out_shape, dtype=np.float64).reshape(len(out_shape), -1)
    out = np.empty((matrix.shape[0], grid.shape[1]))
    for h in range(matrix.shape[0]):
        tmp = np.full(grid.shape[1], float(offset[h]))
        for ll in range(len(out_shape)):
            tmp = tmp + grid[ll] * matrix[h, ll]
        out[h] = tmp
    return out.reshape(matrix.shape[0], *out_shape)


def zoom_shift_coordinates(
    out_shape: tuple[int, ...], zoom: list[float] | None, shift: list[float] | None, grid_mode: bool
) -> np.ndarray:
    """scipy's ``NI_ZoomShift`` coordinates: ``(k + shift) * zoom`` per axis (``grid_mode``:
    ``((k + shift) + 0.5) * zoom - 0.5``), broadcast to the output grid."""
    axes = []
    for j, n in enumerate(out_shape):
        cc = np.arange(n, dtype=np.float64)
        if shift is not None:
            cc = cc + shift[j]
        if zoom is not None:
            cc = ((cc + 0.5) * zoom[j] - 0.5) if grid_mode else cc * zoom[j]
        axes.append(cc)
    return np.stack(np.meshgrid(*axes, indexing="ij"))


def zoom_factors(in_shape: tuple[int, ...], out_shape: tuple[int, ...], grid_mode: bool) -> list[float]:
    """scipy.ndimage.zoom's per-axis factor from the shapes (1 where an axis has no span)."""
    num = np.array(in_shape) - (0 if grid_mode else 1)
    div = np.array(out_shape) - (0 if grid_mode else 1)
    return [float(a) / float(b) if b != 0 else 1.0 for a, b in zip(num, div, strict=True)]


def cos_sin_degrees(angle: float) -> tuple[float, float]:
    """cos and sin of an angle in degrees, exact at multiples of 90 (as scipy.special.cosdg)."""
    quarter = angle / 90.0
    if quarter == round(quarter):
        k = int(round(quarter)) % 4
        return ((1.0, 0.0), (0.0, 1.0), (-1.0, 0.0), (0.0, -1.0))[k]
    rad = np.deg2rad(angle)
    return float(np.cos(rad)), float(np.sin(rad))


def rotate_geometry(
    plane_shape: tuple[int, int], angle: float, reshape: bool
) -> tuple[np.ndarray, np.ndarray, tuple[int, int]]:
    """scipy.ndimage.rotate's (matrix, offset, output plane shape) for a 2-D plane."""
    c, s = cos_sin_degrees(angle)
    rot = np.array([[c, s], [-s, c]])
    in_plane = np.asarray(plane_shape)
    if reshape:
        iy, ix = plane_shape
        bounds = rot @ [[0, 0, iy, iy], [0, ix, 0, ix]]
        out_plane = (np.ptp(bounds, axis=1) + 0.5).astype(int)
    else:
        out_plane = in_plane
    offset = (in_plane - 1) / 2 - rot @ ((out_plane - 1) / 2)
    return rot, offset, (int(out_plane[0]), int(out_plane[1]))

"""NumPy references of scikit-image's parallel-beam Radon transform: as a constant sparse map
(`radon_map`, the tests' oracle) and matrix-free (`radon_apply` and its ordered-gather transpose
`radon_adjoint_apply`, what the interpreter evaluates: no table, memory O(N²); the C++ path runs
the same program, `dpt_ir.ir.projection`).

Assumes a 2-D image (`radon_apply` and its transpose also take stacks ``(..., H, W)``, slice by
slice). Guarantees ``skimage.transform.radon(image, theta, circle)``'s
conventions exactly: with ``circle`` the image is cropped to its centred square (the
``ceil(excess / 2)`` offset), otherwise zero-padded to ``ceil(sqrt(2) * max(shape))`` per axis
with skimage's centre bookkeeping; each angle rotates the square image about pixel
``N // 2`` by bilinear sampling with zeros outside (skimage's ``warp`` with the matrix
``[[cos, sin, -c (cos + sin - 1)], [-sin, cos, -c (cos - sin - 1)]]``, ``order=1``,
``mode='constant'``), and output ``[col, i]`` sums the rotated image's column ``col``.
`radon_map`'s result is a `SparseMap` from the flat image to the flat ``(N, len(theta))`` sinogram.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpt_ir.ir.projection import angle_table
from dpt_ir.reference.resample_ref import SparseMap, from_triplets


def square_frame(shape: tuple[int, int], circle: bool) -> tuple[int, tuple[int, int]]:
    """The side N of skimage's square working image and the original index of its pixel (0, 0)."""
    if circle:
        side = min(shape)
        return side, (int(np.ceil((shape[0] - side) / 2)), int(np.ceil((shape[1] - side) / 2)))
    diagonal = np.sqrt(2) * max(shape)
    pad = [int(np.ceil(diagonal - s)) for s in shape]
    before = [(s + p) // 2 - s // 2 for s, p in zip(shape, pad, strict=True)]
    sides = {s + p for s, p in zip(shape, pad, strict=True)}
    if len(sides) != 1:
        raise ValueError(f"padded image of {shape} is not square")
    return sides.pop(), (-before[0], -before[1])


def radon_map(shape: tuple[int, int], theta: list[float], circle: bool) -> SparseMap:
    """The taps of ``skimage.transform.radon`` for an image of ``shape``."""
    side, (r0, c0) = square_frame(shape, circle)
    center = side // 2
    n_theta = len(theta)
    rr, cc = np.meshgrid(np.arange(side, dtype=np.float64), np.arange(side, dtype=np.float64), indexing="ij")
    rows_all, cols_all, vals_all = [], [], []
    for i, angle in enumerate(np.deg2rad(np.asarray(theta, dtype=np.float64))):
        cos_a, sin_a = np.cos(angle), np.sin(angle)
        x = cos_a * cc + sin_a * rr + -center * (cos_a + sin_a - 1)  # source column
        y = -sin_a * cc + cos_a * rr + -center * (cos_a - sin_a - 1)  # source row
        fy, fx = np.floor(y), np.floor(x)
        dy, dx = y - fy, x - fx
        out_row = (cc.astype(np.int64) * n_theta + i).ravel()
        for oy, ox, w in ((0, 0, (1 - dy) * (1 - dx)), (0, 1, (1 - dy) * dx), (1, 0, dy * (1 - dx)), (1, 1, dy * dx)):
            src_r = (fy + oy).astype(np.int64).ravel() + r0
            src_c = (fx + ox).astype(np.int64).ravel() + c0
            ok = (fy + oy >= 0).ravel() & (fy + oy < side).ravel() & (fx + ox >= 0).ravel() & (fx + ox < side).ravel()
            ok &= (src_r >= 0) & (src_r < shape[0]) & (src_c >= 0) & (src_c < shape[1])
            rows_all.append(out_row[ok])
            cols_all.append(src_r[ok] * shape[1] + src_c[ok])
            vals_all.append(w.ravel()[ok])
    n_out = side * n_theta
    rows, cols, vals = (np.concatenate(a) for a in (rows_all, cols_all, vals_all))
    return from_triplets(n_out, math.prod(shape), rows, cols, vals)


def radon_shape(shape: tuple[int, int], theta: list[float], circle: bool) -> tuple[int, int]:
    return square_frame(shape, circle)[0], len(theta)


def _angle_affines(side: int, theta: list[float]) -> list[tuple[float, float, float, float]]:
    """Per angle ``(cos, sin, kx, ky)``: the sample at (row r, column c) of the rotated grid
    reads the square image at column ``x = cos c + sin r + kx`` and row ``y = -sin c + cos r + ky``
    (`dpt_ir.ir.projection.angle_table`: the float expressions of `radon_map`, so the forward,
    the adjoint and the compiled kernels weigh every tap with the same bits)."""
    return [tuple(float(v) for v in row) for row in angle_table(side, theta)]  # type: ignore[misc]


def _square(image: np.ndarray, side: int, r0: int, c0: int) -> np.ndarray:
    """The image placed in skimage's ``side``² working frame (cropped or zero-padded)."""
    h, w = image.shape
    out = np.zeros((side, side), dtype=np.float64)
    rs, cs = slice(max(r0, 0), min(r0 + side, h)), slice(max(c0, 0), min(c0 + side, w))
    out[rs.start - r0 : rs.stop - r0, cs.start - c0 : cs.stop - c0] = image[rs, cs]
    return out


def radon_apply(image: np.ndarray, theta: list[float], circle: bool) -> np.ndarray:
    """Matrix-free ``skimage.transform.radon`` of an image ``(..., H, W)``, each slice in turn
    (float64 sums): per angle, bilinear samples of the square frame (zeros outside) summed
    down each rotated column. Memory: the square frame and one rotated copy; no table."""
    if image.ndim != 2:
        return _per_slice(lambda a: radon_apply(a, theta, circle), image, 2)
    side, (r0, c0) = square_frame(image.shape, circle)  # type: ignore[arg-type]
    sq = _square(np.asarray(image, dtype=np.float64), side, r0, c0)
    # two zeros around the frame: a tap pair whose corner is clipped to -2 or side reads 0 0
    p = np.pad(sq, 2)
    rr, cc = np.meshgrid(np.arange(side, dtype=np.float64), np.arange(side, dtype=np.float64), indexing="ij")
    out = np.empty((side, len(theta)), dtype=np.float64)
    for i, (cos_a, sin_a, kx, ky) in enumerate(_angle_affines(side, theta)):
        x = cos_a * cc + sin_a * rr + kx
        y = -sin_a * cc + cos_a * rr + ky
        fy, fx = np.floor(y), np.floor(x)
        dy, dx = y - fy, x - fx
        # taps outside the frame read the zero border (clipped so far-away taps also read 0)
        iy = np.clip(fy, -2, side).astype(np.int64) + 2
        ix = np.clip(fx, -2, side).astype(np.int64) + 2
        rot = (
            (1 - dy) * (1 - dx) * p[iy, ix]
            + (1 - dy) * dx * p[iy, ix + 1]
            + dy * (1 - dx) * p[iy + 1, ix]
            + dy * dx * p[iy + 1, ix + 1]
        )
        out[:, i] = rot.sum(axis=0)
    return out


def radon_adjoint_apply(sino: np.ndarray, shape: tuple[int, int], theta: list[float], circle: bool) -> np.ndarray:
    """The exact transpose of `radon_apply` as an ordered gather (no scatter): for each pixel
    (pr, pc) of the square frame and each angle, the rotated-grid samples (r, c) whose
    bilinear footprint covers it are those with ``floor(x) in {pc - 1, pc}`` and
    ``floor(y) in {pr - 1, pr}``; by the inverse rotation they lie in a box of at most
    ``2 (|cos| + |sin|) + 1 < 4`` integers per axis around the pixel's preimage, so a fixed
    5 x 5 candidate box (one spare per axis for rounding of the preimage) enumerated in a
    fixed order, each candidate tested with the forward's own expressions, sums exactly the
    forward's taps, each with the forward's weight. A stack ``(..., side, n_angles)`` gives
    ``(..., *shape)``, slice by slice."""
    if sino.ndim != 2:
        return _per_slice(lambda g: radon_adjoint_apply(g, shape, theta, circle), sino, 2)
    side, (r0, c0) = square_frame(shape, circle)
    h, w = shape
    pr, pc = np.meshgrid(np.arange(h, dtype=np.float64) - r0, np.arange(w, dtype=np.float64) - c0, indexing="ij")
    inside = (pr >= 0) & (pr < side) & (pc >= 0) & (pc < side)
    g = np.asarray(sino, dtype=np.float64)
    out = np.zeros(shape, dtype=np.float64)
    for i, (cos_a, sin_a, kx, ky) in enumerate(_angle_affines(side, theta)):
        half = abs(cos_a) + abs(sin_a)
        # preimage of the footprint's centre (pc, pr): the inverse rotation
        c_mid = cos_a * (pc - kx) - sin_a * (pr - ky)
        r_mid = sin_a * (pc - kx) + cos_a * (pr - ky)
        c_lo, r_lo = np.floor(c_mid - half) - 1, np.floor(r_mid - half) - 1
        for a in range(5):
            r = r_lo + a
            for b in range(5):
                c = c_lo + b
                x = cos_a * c + sin_a * r + kx
                y = -sin_a * c + cos_a * r + ky
                fy, fx = np.floor(y), np.floor(x)
                dy, dx = y - fy, x - fx
                wy = np.where(fy == pr, 1 - dy, np.where(fy == pr - 1, dy, 0.0))
                wx = np.where(fx == pc, 1 - dx, np.where(fx == pc - 1, dx, 0.0))
                ok = inside & (r >= 0) & (r < side) & (c >= 0) & (c < side) & (wy != 0) & (wx != 0)
                col = np.clip(c, 0, side - 1).astype(np.int64)
                out += np.where(ok, wy * wx * g[col, i], 0.0)
    return out


def _per_slice(fn: Any, a: np.ndarray, core: int) -> np.ndarray:
    """``fn`` applied to each trailing ``core``-D slice of ``a``, stacked back."""
    lead = a.shape[: a.ndim - core]
    flat = np.asarray(a).reshape(-1, *a.shape[a.ndim - core :])
    parts = [fn(x) for x in flat]
    if not parts:  # an empty stack: the slice shape of one evaluation on zeros
        probe = fn(np.zeros(a.shape[a.ndim - core :], dtype=a.dtype))
        return np.zeros((*lead, *probe.shape), dtype=np.float64)
    return np.stack(parts).reshape(*lead, *parts[0].shape)

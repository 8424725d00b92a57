"""NumPy reference of scikit-image's parallel-beam Radon transform as a constant sparse map.

Assumes a 2-D image. Guarantees ``skimage.transform.radon(image, theta, circle)``'s
conventions exactly: with ``circle`` the image is cropped to its centred square (the
``ceil(excess / 2)`` offset), otherwise zero-padded to ``ceil(sqrt(2) * max(shape))`` per axis
with skimage's centre bookkeeping; each angle rotates the square image about pixel
``N // 2`` by bilinear sampling with zeros outside (skimage's ``warp`` with the matrix
``[[cos, sin, -c (cos + sin - 1)], [-sin, cos, -c (cos - sin - 1)]]``, ``order=1``,
``mode='constant'``), and output ``[col, i]`` sums the rotated image's column ``col``.
The result is a `SparseMap` from the flat image to the flat ``(N, len(theta))`` sinogram.
"""

from __future__ import annotations

import math

import numpy as np

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

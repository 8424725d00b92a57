"""Parallel-beam projections (kind ``projection``): the backend-neutral program of a
matrix-free Radon transform and of its exact transpose, such as scikit-image's ``radon``.

A `ParallelBeam` maps each of ``slices`` images ``(h, w)`` (row-major, one after another) to a
sinogram ``(side, n_angles)`` through skimage's square working frame of side ``side``, whose
pixel ``(fr, fc)`` is image pixel ``(fr + r0, fc + c0)`` (zero where that is outside the
image: the frame crops or pads). Per angle ``a`` the table holds ``(cos, sin, kx, ky)``; the
sample at row ``r`` and column ``c`` of the rotated grid reads the frame bilinearly at

    x = (cos * c + sin * r) + kx,   y = (-sin * c + cos * r) + ky      (float64, in this order)

with ``fx = floor(x)``, ``dx = x - fx`` (``fy``, ``dy`` likewise) and the taps
``(fy, fx) (1 - dy)(1 - dx)``, ``(fy, fx + 1) (1 - dy) dx``, ``(fy + 1, fx) dy (1 - dx)``,
``(fy + 1, fx + 1) dy dx``, each 0 outside the frame or the image; sinogram ``[c, a]`` sums
the samples of column ``c`` over ``r``. ``adjoint``: the transpose, sinogram to image, every
tap with the same weight (the same expressions). Nothing here names an op.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class ParallelBeam:
    """One projection program (module docstring). ``table``: float64 ``(n_angles, 4)``."""

    slices: int
    h: int
    w: int
    side: int
    r0: int
    c0: int
    table: np.ndarray
    adjoint: bool = False

    @property
    def n_angles(self) -> int:
        return int(self.table.shape[0])

    @property
    def image_size(self) -> int:
        return self.h * self.w

    @property
    def sinogram_size(self) -> int:
        return self.side * self.n_angles


def angle_table(side: int, theta: list[float]) -> np.ndarray:
    """Per angle ``(cos, sin, kx, ky)`` of a rotation about frame pixel ``side // 2`` (skimage's
    ``warp`` matrix ``[[cos, sin, -c (cos + sin - 1)], [-sin, cos, -c (cos - sin - 1)]]``)."""
    center = side // 2
    out = np.empty((len(theta), 4), dtype=np.float64)
    for k, angle in enumerate(np.deg2rad(np.asarray(theta, dtype=np.float64))):
        cos_a, sin_a = float(np.cos(angle)), float(np.sin(angle))
        out[k] = (cos_a, sin_a, -center * (cos_a + sin_a - 1), -center * (cos_a - sin_a - 1))
    return out

"""Fan-beam projections (kind ``projection``): the backend-neutral program of a matrix-free
2-D fan-beam transform with a flat detector, in ASTRA Toolbox's ``fanflat`` geometry, and of
its exact transpose.

Geometry (ASTRA's conventions, lengths in pixels): image pixel ``(i, j)`` of an ``(h, w)`` image
is the unit square centred at ``x = j - w/2 + 1/2``, ``y = h/2 - i - 1/2`` (row 0 on top). At
angle ``t`` (radians) the source is at ``so (sin t, -cos t)`` and detector ``d`` of ``n_det``
(spacing ``dw``) at ``od (-sin t, cos t) + (d - n_det/2 + 1/2) dw (cos t, sin t)``. Sinogram
``[angle, d]`` is the integral of the image along the whole line through the source and
detector ``d``'s centre: the sum over the pixels it crosses of the pixel's value times the
length of the line inside the pixel (ASTRA's ``line_fanflat`` weights).

Evaluation (Joseph's walk with exact lengths): a line with ``|ry| >= |rx|`` (direction ``r``) is
walked row by row (mode 0), else column by column (mode 1). Per line the table holds
``(mode, A, B, L)``: the line crosses the walk's edge ``e`` (row edge ``y = h/2 - e`` in mode 0,
column edge ``x = e - w/2`` in mode 1) at cross coordinate ``A + B e`` (column units in mode 0,
row units in mode 1; ``|B| <= 1``), and ``L`` is its length per step (``|r| / |r_walk|``). Sample
``k`` (row or column ``k``) spans ``[lo, hi]`` of the cross axis between ``e0 = A + B k`` and
``e1 = A + B (k + 1)``: with ``f = floor(lo)`` it has two taps, cross index ``f`` weighing
``L fr`` and ``f + 1`` weighing ``L (1 - fr)``, ``fr = (f + 1 - lo) / (hi - lo)`` if ``hi - lo``
exceeds ``f + 1 - lo``, else 1. A tap outside the image, or of weight 0, is not a tap. The
forward, the transpose and the NumPy reference use these float64 expressions (one operation
per C++ statement), so every tap weighs the same in both directions.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class FanBeam:
    """One fan-beam program (module docstring). ``table``: float64 ``(n_angles * n_det, 4)``,
    row ``angle * n_det + d``."""

    slices: int
    h: int
    w: int
    n_angles: int
    n_det: int
    table: np.ndarray
    adjoint: bool = False

    @property
    def image_size(self) -> int:
        return self.h * self.w

    @property
    def sinogram_size(self) -> int:
        return self.n_angles * self.n_det


def ray_table(
    shape: tuple[int, int], angles: list[float], source_origin: float, origin_det: float, n_det: int, det_width: float
) -> np.ndarray:
    """Per line ``(mode, A, B, L)`` (module docstring) of the image ``shape`` ``(h, w)``."""
    h, w = shape
    t = np.asarray(angles, dtype=np.float64)[:, None]
    u = (np.arange(n_det, dtype=np.float64) - n_det / 2 + 0.5)[None, :] * det_width
    sx, sy = np.sin(t) * source_origin, -np.cos(t) * source_origin
    dx = -np.sin(t) * origin_det + u * np.cos(t)
    dy = np.cos(t) * origin_det + u * np.sin(t)
    rx, ry = dx - sx, dy - sy
    rows = np.abs(ry) >= np.abs(rx)  # mode 0: walk the rows
    length = np.hypot(rx, ry)
    with np.errstate(divide="ignore", invalid="ignore"):
        b_row, a_row = -rx / ry, sx + (h / 2 - sy) * (rx / ry) + w / 2
        b_col, a_col = -ry / rx, h / 2 - sy + (w / 2 + sx) * (ry / rx)
        l_row, l_col = length / np.abs(ry), length / np.abs(rx)
    out = np.empty((len(angles), n_det, 4), dtype=np.float64)
    out[..., 0] = np.where(rows, 0.0, 1.0)
    out[..., 1] = np.where(rows, a_row, a_col)
    out[..., 2] = np.where(rows, b_row, b_col)
    out[..., 3] = np.where(rows, l_row, l_col)
    return out.reshape(-1, 4)


def covering_radius(shape: tuple[int, int]) -> float:
    """The radius of the smallest circle about the rotation centre holding the whole image: a
    source closer than this enters the image at some angle."""
    h, w = shape
    return math.hypot(h / 2, w / 2)

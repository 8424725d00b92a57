"""NumPy reference of the fan-beam projection (`dpt_ir.ir.fanbeam`): forward and exact
transpose, matrix-free (the taps of one angle at a time, never a whole table).

Assumes a `FanBeam` program. Guarantees the program's taps with its float64 expressions
(`dpt_ir.ir.fanbeam`'s module docstring); sums in float64. Stacks ``(..., h, w)`` and
``(..., n_angles, n_det)`` go slice by slice.
"""

from __future__ import annotations

import math
from collections.abc import Iterator

import numpy as np

from dpt_ir.ir.fanbeam import FanBeam


def _walk(a: np.ndarray, b: np.ndarray, ln: np.ndarray, n: int, cross: int) -> tuple[np.ndarray, ...]:
    """Samples ``k < n`` of lines ``(A, B, L)`` (columns): per line and sample, the tap's cross
    index ``f`` and the weights of ``f`` and ``f + 1``, and whether each is a tap."""
    k = np.arange(n, dtype=np.float64)[None, :]
    e0 = a[:, None] + b[:, None] * k
    e1 = a[:, None] + b[:, None] * (k + 1.0)
    lo, hi = np.minimum(e0, e1), np.maximum(e0, e1)
    f = np.floor(lo)
    sp, num = hi - lo, (f + 1.0) - lo
    with np.errstate(divide="ignore", invalid="ignore"):
        fr = np.where(sp > num, num / sp, 1.0)
    w0, w1 = ln[:, None] * fr, ln[:, None] * (1.0 - fr)
    ok0 = (f >= 0) & (f < cross) & (w0 != 0.0)
    ok1 = (f + 1 >= 0) & (f + 1 < cross) & (w1 != 0.0)
    return f, w0, w1, ok0, ok1


def taps(beam: FanBeam, angle: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray]]:
    """The taps of one angle's lines: ``(detector, flat pixel, weight)`` arrays, a batch per mode."""
    rows = beam.table[angle * beam.n_det : (angle + 1) * beam.n_det]
    h, w = beam.h, beam.w
    for mode, n, cross in ((0.0, h, w), (1.0, w, h)):
        (det,) = np.nonzero(rows[:, 0] == mode)
        if det.size == 0 or n == 0:
            continue
        f, w0, w1, ok0, ok1 = _walk(rows[det, 1], rows[det, 2], rows[det, 3], n, cross)
        k = np.broadcast_to(np.arange(n)[None, :], f.shape)
        for off, wt, ok in ((0, w0, ok0), (1, w1, ok1)):
            c = (f[ok] + off).astype(np.int64)
            pix = k[ok] * w + c if mode == 0.0 else c * w + k[ok]
            yield np.broadcast_to(det[:, None], f.shape)[ok], pix, wt[ok]


def _per_slice(fn: object, x: np.ndarray, shape: tuple[int, int], out: tuple[int, int]) -> np.ndarray:
    flat = np.asarray(x, dtype=np.float64).reshape(math.prod(x.shape[:-2]), *shape)
    if flat.shape[0] == 0:  # an empty stack
        return np.zeros((*x.shape[:-2], *out))
    return np.stack([fn(s) for s in flat]).reshape(*x.shape[:-2], *out)  # type: ignore[operator]


def fanbeam_apply(image: np.ndarray, beam: FanBeam) -> np.ndarray:
    """The sinograms ``(..., n_angles, n_det)`` of images ``(..., h, w)``."""

    def one(img: np.ndarray) -> np.ndarray:
        flat, out = img.reshape(-1), np.zeros((beam.n_angles, beam.n_det))
        for a in range(beam.n_angles):
            for det, pix, wt in taps(beam, a):
                out[a] += np.bincount(det, weights=wt * flat[pix], minlength=beam.n_det)
        return out

    return _per_slice(one, image, (beam.h, beam.w), (beam.n_angles, beam.n_det))


def fanbeam_adjoint_apply(sino: np.ndarray, beam: FanBeam) -> np.ndarray:
    """The transpose: images ``(..., h, w)`` of sinograms ``(..., n_angles, n_det)``."""

    def one(g: np.ndarray) -> np.ndarray:
        out = np.zeros(beam.image_size)
        for a in range(beam.n_angles):
            for det, pix, wt in taps(beam, a):
                out += np.bincount(pix, weights=wt * g[a, det], minlength=beam.image_size)
        return out.reshape(beam.h, beam.w)

    return _per_slice(one, sino, (beam.n_angles, beam.n_det), (beam.h, beam.w))

"""NumPy reference of a `Recurrence` (kind ``recurrence``): the line program run along its axis.

Assumes a `dpt_ir.ir.recurrence.Recurrence` built for ``x``'s shape. Guarantees: the
operations of the program's documented formulas, in their order, in float64, vectorised
across the lines (the loops run along the line only), each product and each sum rounded
once, the same operations the C++ kernels perform (`dpt_ir.backends.cxx.recurrence`): the
two agree bit for bit. The result has ``x``'s dtype (rounded once from float64).
"""

from __future__ import annotations

import numpy as np

from dpt_ir.ir.recurrence import RecStep, Recurrence


def _load(rec: Recurrence, lines: np.ndarray) -> np.ndarray:
    """The work lines: the input lines, extended by ``pad`` per side (edge values or ``fill``)."""
    w = np.empty((*lines.shape[:-1], rec.m))
    w[..., rec.pad : rec.pad + rec.n_in] = lines
    for j in [*range(rec.pad), *range(rec.pad + rec.n_in, rec.m)]:
        edge = lines[..., 0] if j < rec.pad else lines[..., rec.n_in - 1]
        w[..., j] = edge if rec.fill is None else rec.fill
    return w


def _step(s: RecStep, w: np.ndarray) -> None:
    """Step ``s`` applied to the work lines ``w`` in place (`dpt_ir.ir.recurrence`)."""
    m, z = w.shape[-1], s.z
    if s.kind == "scale":
        w *= z
    elif s.kind == "init":
        acc = np.zeros(w.shape[:-1])
        for j in range(s.lo, s.hi):
            acc = acc + s.weights[j] * w[..., j]
        w[..., s.at] = acc
    elif s.kind == "init_t":
        v = w[..., s.at].copy()
        for j in range(s.lo, s.hi):
            if j != s.at:
                w[..., j] = w[..., j] + s.weights[j] * v
        w[..., s.at] = s.weights[s.at] * v
    elif s.kind == "causal":
        for i in range(1, m):
            w[..., i] = w[..., i] + z * w[..., i - 1]
    elif s.kind == "causal_t":
        for i in range(m - 1, 0, -1):
            w[..., i - 1] = w[..., i - 1] + z * w[..., i]
    elif s.kind == "anticausal":
        for i in range(m - 2, -1, -1):
            w[..., i] = z * (w[..., i + 1] - w[..., i])
    elif s.kind == "anticausal_t":
        for i in range(m - 1):
            w[..., i + 1] = w[..., i + 1] + z * w[..., i]
            w[..., i] = -z * w[..., i]
    else:
        raise ValueError(f"unknown recurrence step {s.kind!r}")


def _store(rec: Recurrence, w: np.ndarray) -> np.ndarray:
    """The output lines: ``w[i + crop]``, the ends folded back under ``fold``."""
    out = w[..., rec.crop : rec.crop + rec.n_out].copy()
    if rec.fold and rec.crop and rec.n_out == 1:
        first = w[..., 0]
        for j in range(1, rec.m):
            first = first + w[..., j]
        out[..., 0] = first
    elif rec.fold and rec.crop:
        first = w[..., 0]
        for j in range(1, rec.crop + 1):
            first = first + w[..., j]
        last = w[..., rec.n_out - 1 + rec.crop]
        for j in range(rec.n_out + rec.crop, rec.m):
            last = last + w[..., j]
        out[..., 0], out[..., rec.n_out - 1] = first, last
    return out


def run(rec: Recurrence, x: np.ndarray) -> np.ndarray:
    """``rec`` applied along its axis of ``x`` (float64 work, result in ``x``'s dtype)."""
    lines = np.moveaxis(np.asarray(x, dtype=np.float64), rec.axis, -1)
    w = _load(rec, lines)
    for s in rec.steps:
        _step(s, w)
    return np.moveaxis(_store(rec, w), -1, rec.axis).astype(x.dtype)

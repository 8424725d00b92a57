"""Linear recurrences along one axis (kind ``recurrence``): the backend-neutral program of a
line filter, such as scipy.ndimage's B-spline prefilter and its transpose.

A `Recurrence` maps each line of the input along ``axis`` (length ``n_in``) to a line of the
output (length ``n_out``) through a float64 work line of length ``m``:

1. **load**: ``w[j] = line[j - pad]`` inside the line; outside it, the edge value
   (``fill`` None) or ``fill``;
2. the ``steps`` in order (`RecStep`), each a linear map of ``w`` applied in place;
3. **store**: ``out[i] = w[i + crop]``; with ``fold``, ``out[0]`` also adds ``w[0 .. crop - 1]``
   and ``out[n_out - 1]`` the entries past ``n_out - 1 + crop`` (the transpose of edge padding),
   every sum taken with ascending ``j``.

The arithmetic of every step is spelt out below, one rounding per product and per sum (no
fused multiply-add): the NumPy reference (`dpt_ir.reference.recurrence_ref`) and the
kernels (`dpt_ir.backends.cxx.recurrence`) run exactly these operations in this order, so
they agree bit for bit. Nothing here names an op.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import numpy as np

# scale:        w[j] = z * w[j], every j
# init:         w[at] = sum_{j = lo}^{hi - 1} weights[j] * w[j]  (s = 0; s = s + weights[j] * w[j])
# init_t:       its transpose: v = w[at]; w[j] = w[j] + weights[j] * v for j in [lo, hi), j != at
#               (ascending); then w[at] = weights[at] * v (0 outside [lo, hi))
# causal:       w[i] = w[i] + z * w[i - 1], i = 1 .. m - 1
# causal_t:     w[i - 1] = w[i - 1] + z * w[i], i = m - 1 .. 1
# anticausal:   w[i] = z * (w[i + 1] - w[i]), i = m - 2 .. 0
# anticausal_t: w[i + 1] = w[i + 1] + z * w[i]; w[i] = -z * w[i], i = 0 .. m - 2
StepKind = Literal["scale", "init", "init_t", "causal", "causal_t", "anticausal", "anticausal_t"]


@dataclass(frozen=True)
class RecStep:
    """One in-place step of a `Recurrence` (the formulas above). ``weights``: float64 of the
    work line's length (``init`` / ``init_t`` only), nonzero only in ``[lo, hi)``."""

    kind: StepKind
    z: float = 0.0
    at: int = 0
    weights: np.ndarray | None = None
    lo: int = 0
    hi: int = 0


@dataclass(frozen=True)
class Recurrence:
    """A line filter along ``axis`` of a row-major tensor (module docstring). ``outer`` and
    ``inner``: the products of the axes before and after ``axis`` (lines = outer * inner; the
    lines of one ``outer`` index are ``inner`` apart, neighbours in memory)."""

    axis: int
    outer: int
    inner: int
    n_in: int
    n_out: int
    m: int
    pad: int
    fill: float | None
    crop: int
    fold: bool
    steps: tuple[RecStep, ...]

    @property
    def lines(self) -> int:
        return self.outer * self.inner


def init_step(kind: Literal["init", "init_t"], at: int, weights: np.ndarray) -> RecStep:
    """An ``init`` / ``init_t`` step whose support ``[lo, hi)`` is that of ``weights`` (and ``at``)."""
    nz = np.flatnonzero(weights)
    lo = int(min(nz.min(initial=at), at))
    hi = int(max(nz.max(initial=at), at)) + 1
    return RecStep(kind, at=at, weights=np.asarray(weights, dtype=np.float64), lo=lo, hi=hi)

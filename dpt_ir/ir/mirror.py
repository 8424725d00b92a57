"""Mirror sums: the order in which ``scipy.ndimage.correlate1d`` sums a symmetric or
antisymmetric line of weights (its ``NI_Correlate1D``), shared by the reference interpreter
(`dpt_ir.ops.stencil`) and the C++ emitter, so that both sum such a stencil as SciPy does.

Assumes: a float64 weights array (a stencil's ``OpDef.weights``). Guarantees: `mirror_sum`
decides from the weights alone (shape and exact values), never from an op's name.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class MirrorSum:
    """A line of weights, odd along its one long axis, equal (``sign`` 1) or opposite
    (``sign`` -1, centre 0) at mirrored taps: summed as ``scipy.ndimage.correlate1d`` sums
    it, ``s = w[c] * x[c]`` (skipped when the centre weight is 0), then for ``k`` from the
    outermost pair in, ``s += (x[c - k] + sign * x[c + k]) * w[c - k]``: one product per
    pair, in double, each operation rounded (no FMA). ``centre``, ``pairs``: flat tap
    positions in the weights; ``pairs`` holds (left, right, weight) with non-zero weights;
    ``axis``: the line's axis."""

    centre: tuple[int, float] | None
    pairs: tuple[tuple[int, int, float], ...]
    sign: int
    axis: int


def mirror_sum(w: np.ndarray) -> MirrorSum | None:
    """The `MirrorSum` of weights ``w``, or None: not a line (more than one axis longer than
    1), of even length or shorter than 3, or neither symmetric nor antisymmetric (exact
    equality: scipy's test allows a difference up to DBL_EPSILON, and then uses the left
    weight for both taps)."""
    long = [d for d, n in enumerate(w.shape) if n > 1]
    if len(long) != 1 or w.shape[long[0]] % 2 == 0:
        return None
    line = w.reshape(-1)
    c = line.size // 2
    left, right = line[:c][::-1], line[c + 1 :]  # k = 1 .. c
    if np.array_equal(left, right):
        sign = 1
    elif line[c] == 0 and np.array_equal(left, -right):
        sign = -1
    else:
        return None
    centre = (c, float(line[c])) if line[c] != 0 else None
    pairs = tuple((c - k, c + k, float(line[c - k])) for k in range(c, 0, -1) if line[c - k] != 0)
    return MirrorSum(centre, pairs, sign, long[0])

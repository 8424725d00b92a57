"""A user's own Warp kernels, composed with a compiled program on one ``wp.Tape``.

They live in a real file because Warp refuses kernels defined by ``exec``, and keep
Warp's default module options, so Warp generates their adjoints: ``tape.backward``
runs them in reverse around the program's registered backward.
"""

from __future__ import annotations

import warp as wp


@wp.kernel
def affine(u: wp.array2d(dtype=wp.float32), y: wp.array2d(dtype=wp.float32)):
    """y = 2 u + 1, elementwise (runs before the program: y is the program's input x)."""
    i, j = wp.tid()
    y[i, j] = 2.0 * u[i, j] + 1.0


@wp.kernel
def weighted_sum(
    pred: wp.array2d(dtype=wp.float32), c: wp.array2d(dtype=wp.float32), final: wp.array(dtype=wp.float32)
):
    """final[0] += sum(pred * c) (runs after the program, reads its array output)."""
    i, j = wp.tid()
    wp.atomic_add(final, 0, pred[i, j] * c[i, j])


@wp.kernel
def scale_into(loss: wp.array(dtype=wp.float32), k: wp.float32, final: wp.array(dtype=wp.float32)):
    """final[0] += k * loss[0] (runs after the program, reads its scalar output)."""
    wp.atomic_add(final, 0, k * loss[0])

"""Hand-fused Warp reference kernels: the floor a Warp expert reaches by hand.

Used by `bench_backend.py` as diagnostic peers, not as goals: they show how much of
dpt_ir's time is the Warp CPU backend itself (one thread, scalar libm calls) and how
much is dpt_ir's generated code (index arithmetic, status checks, float64 accumulation).
"""

from __future__ import annotations

import warp as wp

wp.set_module_options({"enable_backward": False})  # forward-only references


@wp.kernel
def beer_value_and_grad(
    x: wp.array(dtype=float),
    obs: wp.array(dtype=float),
    w: wp.array(dtype=float),
    loss: wp.array(dtype=float),
    grad: wp.array(dtype=float),
):
    """beer forward + backward in one pass: loss += w r^2 (float32 atomic), grad = -1.82 w r e."""
    i = wp.tid()
    e = wp.exp(-0.7 * x[i])
    r = 1.3 * e - obs[i]
    wi = w[i]
    wp.atomic_add(loss, 0, wi * r * r)
    grad[i] = -1.82 * wi * r * e


@wp.kernel
def exp_only(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = exp(-0.7 x): the one transcendental of beer, alone (the scalar-exp floor)."""
    i = wp.tid()
    out[i] = wp.exp(-0.7 * x[i])


@wp.kernel
def copy_only(x: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = x: one read and one write per element (the memory floor of one pass)."""
    i = wp.tid()
    out[i] = x[i]

"""Unfused Warp baselines: the benchmark graphs written as one Warp kernel per op.

This is what a Warp user writes without dpt_ir: one hand-written kernel per operator,
recorded on a `wp.Tape`, and Warp's own adjoint kernels (default module options, so
``enable_backward`` is on) run by ``tape.backward``. The graphs are the same as
`benchmarks.graphs.beer` and `benchmarks.graphs.chain16`, op for op, with the same
numerically careful formulations of ``softplus`` and ``expm1`` as dpt_ir's generated code.

The kernels live in this real Python file because Warp refuses kernels made by ``exec``.
Intermediates (and their gradients) are allocated once per baseline and reused; one
call of `UnfusedTapeGraph.value_and_grad` is: zero the loss, record the forward launches
on a tape, ``tape.backward(loss)``, then ``tape.zero()`` / ``tape.reset()`` after the
gradient has been read, as a correct repeated Warp training step must.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import warp as wp

# -- device functions (same formulations as dpt_ir's generated helpers) --


@wp.func
def log1p_f(x: float):
    """log(1 + x), accurate near 0 (Goldberg)."""
    u = 1.0 + x
    d = u - 1.0
    if d == 0.0:
        return x
    return wp.log(u) * (x / d)


@wp.func
def expm1_f(x: float):
    """exp(x) - 1, accurate near 0 (Kahan)."""
    u = wp.exp(x)
    if u == 1.0:
        return x
    d = u - 1.0
    if d == -1.0:
        return d
    return d * x / wp.log(u)


@wp.func
def softplus_f(x: float):
    """log(1 + exp(x)) without overflow."""
    return wp.max(x, 0.0) + log1p_f(wp.exp(-wp.abs(x)))


# -- one kernel per op --


@wp.kernel
def k_mul_scalar(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    """out = s * a"""
    i = wp.tid()
    out[i] = s * a[i]


@wp.kernel
def k_add_scalar(a: wp.array(dtype=float), s: float, out: wp.array(dtype=float)):
    """out = a + s"""
    i = wp.tid()
    out[i] = a[i] + s


@wp.kernel
def k_sub(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = a - b"""
    i = wp.tid()
    out[i] = a[i] - b[i]


@wp.kernel
def k_mul(a: wp.array(dtype=float), b: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = a * b"""
    i = wp.tid()
    out[i] = a[i] * b[i]


@wp.kernel
def k_neg(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = -a"""
    i = wp.tid()
    out[i] = -a[i]


@wp.kernel
def k_square(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = a * a"""
    i = wp.tid()
    v = a[i]
    out[i] = v * v


@wp.kernel
def k_reciprocal(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = 1 / a"""
    i = wp.tid()
    out[i] = 1.0 / a[i]


@wp.kernel
def k_exp(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = exp(a)"""
    i = wp.tid()
    out[i] = wp.exp(a[i])


@wp.kernel
def k_log(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = log(a)"""
    i = wp.tid()
    out[i] = wp.log(a[i])


@wp.kernel
def k_sqrt(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = sqrt(a)"""
    i = wp.tid()
    out[i] = wp.sqrt(a[i])


@wp.kernel
def k_sin(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = sin(a)"""
    i = wp.tid()
    out[i] = wp.sin(a[i])


@wp.kernel
def k_cos(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = cos(a)"""
    i = wp.tid()
    out[i] = wp.cos(a[i])


@wp.kernel
def k_tanh(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = tanh(a)"""
    i = wp.tid()
    out[i] = wp.tanh(a[i])


@wp.kernel
def k_sigmoid(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = 1 / (1 + exp(-a))"""
    i = wp.tid()
    out[i] = 1.0 / (1.0 + wp.exp(-a[i]))


@wp.kernel
def k_softplus(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = log(1 + exp(a))"""
    i = wp.tid()
    out[i] = softplus_f(a[i])


@wp.kernel
def k_erf(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = erf(a)"""
    i = wp.tid()
    out[i] = wp.erf(a[i])


@wp.kernel
def k_expm1(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out = exp(a) - 1"""
    i = wp.tid()
    out[i] = expm1_f(a[i])


@wp.kernel
def k_sum(a: wp.array(dtype=float), out: wp.array(dtype=float)):
    """out[0] += sum(a), the usual Warp loss reduction."""
    i = wp.tid()
    wp.atomic_add(out, 0, a[i])


# -- the graphs --

# A step: (kernel, names of array inputs, scalar arguments, name of the output array).
Step = tuple[Any, tuple[str, ...], tuple[float, ...], str]

BEER_STEPS: list[Step] = [
    (k_mul_scalar, ("x",), (-0.7,), "t0"),
    (k_exp, ("t0",), (), "t1"),
    (k_mul_scalar, ("t1",), (1.3,), "t2"),
    (k_sub, ("t2", "obs"), (), "t3"),
    (k_square, ("t3",), (), "t4"),
    (k_mul, ("w", "t4"), (), "t5"),
    (k_sum, ("t5",), (), "loss"),
]
"""beer: sum(w * square(1.3 * exp(-0.7 * x) - obs))."""


def _chain16_steps() -> list[Step]:
    unary: list[tuple[Any, tuple[float, ...]]] = [
        (k_sin, ()),
        (k_mul_scalar, (0.5,)),
        (k_add_scalar, (1.25,)),
        (k_log, ()),
        (k_exp, ()),
        (k_sqrt, ()),
        (k_tanh, ()),
        (k_sigmoid, ()),
        (k_square, ()),
        (k_add_scalar, (-0.25,)),
        (k_cos, ()),
        (k_softplus, ()),
        (k_reciprocal, ()),
        (k_erf, ()),
        (k_neg, ()),
        (k_expm1, ()),
    ]
    steps: list[Step] = []
    prev = "x"
    for k, (kernel, scalars) in enumerate(unary):
        steps.append((kernel, (prev,), scalars, f"t{k}"))
        prev = f"t{k}"
    steps.append((k_sum, (prev,), (), "loss"))
    return steps


CHAIN16_STEPS: list[Step] = _chain16_steps()
"""chain16: the 16 elementwise ops of `benchmarks.graphs.chain16`, then a sum."""


class UnfusedTapeGraph:
    """One Warp kernel per op on a `wp.Tape`; buffers allocated once and reused."""

    def __init__(self, steps: list[Step], inputs: dict[str, np.ndarray], wrt: str = "x", device: str = "cpu") -> None:
        self.steps = steps
        self.device = device
        self.wrt = wrt
        n = next(iter(inputs.values())).size
        self.n = n
        self.arrays: dict[str, wp.array] = {
            name: wp.array(value.reshape(-1), dtype=float, device=device, requires_grad=name == wrt)
            for name, value in inputs.items()
        }
        for _, _, _, out in steps:
            size = 1 if out == "loss" else n
            self.arrays[out] = wp.zeros(size, dtype=float, device=device, requires_grad=True)
        self.tape = wp.Tape()
        self.forward_launches = len(steps)

    def _forward(self) -> None:
        for kernel, ins, scalars, out in self.steps:
            args = [self.arrays[a] for a in ins] + list(scalars) + [self.arrays[out]]
            wp.launch(kernel, dim=self.n, inputs=args, device=self.device)

    def value_and_grad(self, to_numpy: bool = False) -> tuple[Any, Any]:
        """Forward + backward; returns (loss, gradient wrt ``wrt``) as wp.arrays, or as
        numpy copies when ``to_numpy``. Leaves the tape reset and the adjoints zeroed."""
        loss = self.arrays["loss"]
        loss.zero_()
        with self.tape:
            self._forward()
        self.tape.backward(loss=loss)
        grad = self.arrays[self.wrt].grad
        result: tuple[Any, Any] = (loss.numpy().copy(), grad.numpy().copy()) if to_numpy else (loss, grad)
        self.backward_launches = len(self.tape.launches)
        self.tape.zero()
        self.tape.reset()
        return result

    def result_numpy(self) -> tuple[float, np.ndarray]:
        """One evaluation, as (loss, gradient) numpy values, for correctness checks."""
        loss, grad = self.value_and_grad(to_numpy=True)
        return float(loss[0]), grad


BASELINES: dict[str, list[Step]] = {"beer": BEER_STEPS, "chain16": CHAIN16_STEPS}


def make(name: str, inputs: dict[str, np.ndarray], device: str = "cpu") -> UnfusedTapeGraph:
    """The unfused baseline of benchmark graph ``name`` bound to ``inputs`` (flattened)."""
    return UnfusedTapeGraph(BASELINES[name], inputs, device=device)


def numpy_beer(x: np.ndarray, obs: np.ndarray, w: np.ndarray) -> tuple[np.float32, np.ndarray]:
    """beer forward + backward in plain vectorised float32 NumPy (the obvious code)."""
    e = np.exp(np.float32(-0.7) * x)
    r = np.float32(1.3) * e - obs
    loss = np.sum(w * np.square(r))
    grad = np.float32(-0.7 * 1.3 * 2.0) * (w * r * e)
    return loss, grad


def numpy_beer_inplace() -> Callable[[np.ndarray, np.ndarray, np.ndarray], tuple[np.float32, np.ndarray]]:
    """beer forward + backward in float32 NumPy with preallocated buffers and in-place
    ufuncs (a tuned peer: fewer temporaries, fewer passes over memory)."""
    bufs: dict[str, np.ndarray] = {}

    def run(x: np.ndarray, obs: np.ndarray, w: np.ndarray) -> tuple[np.float32, np.ndarray]:
        if not bufs:
            bufs.update(e=np.empty_like(x), r=np.empty_like(x), t=np.empty_like(x))
        e, r, t = bufs["e"], bufs["r"], bufs["t"]
        np.multiply(x, np.float32(-0.7), out=e)
        np.exp(e, out=e)
        np.multiply(e, np.float32(1.3), out=r)
        np.subtract(r, obs, out=r)
        np.multiply(w, r, out=t)  # t = w r
        grad = np.multiply(t, e)  # a fresh array, as value_and_grad returns
        np.multiply(grad, np.float32(-0.7 * 1.3 * 2.0), out=grad)
        np.multiply(r, t, out=r)  # w r^2
        loss = np.sum(r)  # float32 pairwise sum (no BLAS: np.dot would call sdot)
        return loss, grad

    return run

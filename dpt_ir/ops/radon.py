"""Projection family: scikit-image's parallel-beam Radon transform, matrix-free, and its
exact transpose (kind ``projection``).

- ``radon(x; theta, circle, in_shape, out_shape)``: each slice ``(H, W)`` of ``x``
  ``(..., H, W)`` to its sinogram ``(N, len(theta))`` (``skimage.transform.radon``);
- ``radon_adjoint(g; ...)``: the transpose, sinogram stack to image stack.

Each is the other's derivative and both are linear. Their lowering is a program, not a
table: `dpt_ir.ir.projection.ParallelBeam` (the square frame's placement and the angle table,
4 floats per angle), which the NumPy reference (`dpt_ir.reference.radon_ref`) and the C++
kernels (`dpt_ir.backends.cxx.projection`) both evaluate with the same float64 expressions
per tap. Adjoint form: an ordered sum per pixel (no scatter across tasks, no atomics), set-up
independent of the image size.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.projection import ParallelBeam, angle_table
from dpt_ir.ir.registry import Derivative, GradContext, Linear, OpDef, register_op
from dpt_ir.ir.rules import Attrs
from dpt_ir.ir.types import TensorType
from dpt_ir.ops.resample import check_float
from dpt_ir.reference import radon_ref

ADJOINT_FORM = "matrix-free transpose: per pixel row band, the taps of each angle in a fixed order (no atomics)"


class RadonAttrs(Attrs):
    """``in_shape``: the image stack's shape ``(..., H, W)``; ``out_shape``: the sinogram
    stack's ``(..., N, len(theta))``."""

    theta: list[float]
    circle: bool = True
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]


def beam(a: RadonAttrs, adjoint: bool) -> ParallelBeam:
    """The projection program of attributes ``a`` (``adjoint``: its transpose)."""
    h, w = a.in_shape[-2:]
    side, (r0, c0) = radon_ref.square_frame((h, w), a.circle)
    slices = math.prod(a.in_shape[:-2])
    return ParallelBeam(slices, h, w, side, r0, c0, angle_table(side, a.theta), adjoint)


def check_stack(t: TensorType, shape: tuple[int, ...], what: str, where: str) -> TensorType:
    """``t`` as a float stack of ``shape`` (``what`` names it), or ContractError naming ``where``."""
    check_float(t, where)
    if t.shape != tuple(shape):
        raise ContractError(f"{where}: expected {what} of shape {list(shape)}, found {list(t.shape)}")
    return t


def _infer(inputs: tuple[TensorType, ...], a: RadonAttrs, where: str) -> TensorType:
    (x,) = inputs
    check_stack(x, a.in_shape, "an image stack", where)
    return TensorType(shape=a.out_shape, dtype=x.dtype)


def _infer_adjoint(inputs: tuple[TensorType, ...], a: RadonAttrs, where: str) -> TensorType:
    (g,) = inputs
    check_stack(g, a.out_shape, "a sinogram stack", where)
    return TensorType(shape=a.in_shape, dtype=g.dtype)


def _reference(a: RadonAttrs, x: np.ndarray) -> np.ndarray:
    return radon_ref.radon_apply(x, a.theta, a.circle).astype(x.dtype)


def _reference_adjoint(a: RadonAttrs, g: np.ndarray) -> np.ndarray:
    shape = tuple(a.in_shape[-2:])
    return radon_ref.radon_adjoint_apply(g, shape, a.theta, a.circle).astype(g.dtype)  # type: ignore[arg-type]


def same_attrs(c: GradContext) -> dict[str, Any]:
    """The attributes of ``c``'s node, for its derivative (the transpose takes the same ones)."""
    return c.attrs.model_dump()


Infer = Callable[[tuple[TensorType, ...], Any, str], TensorType]
Reference = Callable[[Any, np.ndarray], np.ndarray]


def register_projection_pair(
    name: str,
    attrs: type[Attrs],
    infer: tuple[Infer, Infer],
    reference: tuple[Reference, Reference],
    program: Callable[[Any, bool], Any],
    doc: str,
    adjoint_form: str,
) -> None:
    """Register a matrix-free projection ``name`` and its transpose ``name_adjoint``: linear,
    of kind ``projection``, each the other's derivative with the same attributes; ``infer``,
    ``reference`` (forward, adjoint) and ``program(attrs, adjoint)`` (the op's
    ``OpDef.projection``) give what differs between them."""
    for k, (op, other) in enumerate(((name, f"{name}_adjoint"), (f"{name}_adjoint", name))):
        register_op(
            OpDef(
                name=op,
                kind="projection",
                arity=1,
                attrs=attrs,
                infer=infer[k],
                reference=reference[k],
                derivative=Derivative({0: lambda c, other=other: c.gy.builder.emit(other, [c.gy], same_attrs(c))}),
                linear=Linear(((0,),)),
                # an output element sums a whole line of samples (four taps each): a backward
                # that recomputed it would run the projection again
                cost="expensive",
                projection=lambda a, shape, adjoint=bool(k): program(a, adjoint),
                doc=doc if k == 0 else f"the transpose of {name}; adjoint form: {adjoint_form}",
            )
        )


register_projection_pair(
    "radon",
    RadonAttrs,
    (_infer, _infer_adjoint),
    (_reference, _reference_adjoint),
    beam,
    "skimage.transform.radon of each (H, W) slice, matrix-free (parallel beam, bilinear taps)",
    ADJOINT_FORM,
)

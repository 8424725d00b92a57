"""Shape and view ops: broadcast_to, reshape, expand_dims, squeeze, transpose, slice,
its adjoint embed_slice (places a tensor into zeros, written as a gather), and concat."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import ALL_INPUTS, Derivative, GradContext, Linear, OpDef, register_op
from dpt_ir.ir.rules import Attrs, check_axes
from dpt_ir.ir.types import TensorType, broadcast_shapes
from dpt_ir.ops import batch_rules

Shape = tuple[int, ...]
Coords = idx.Coords


class ShapeAttrs(Attrs):
    shape: tuple[int, ...]


class AxesAttrs(Attrs):
    axes: tuple[int, ...]


class SliceAttrs(Attrs):
    starts: tuple[int, ...]
    stops: tuple[int, ...]
    steps: tuple[int, ...]


class EmbedAttrs(SliceAttrs):
    shape: tuple[int, ...]


class ConcatAttrs(Attrs):
    axis: int


def _same_dtype(x: TensorType, shape: tuple[int, ...]) -> TensorType:
    return TensorType(shape=shape, dtype=x.dtype)


def _check_shape(shape: tuple[int, ...], where: str) -> None:
    if any(d < 0 for d in shape):
        raise ContractError(f"{where}: negative dimension in target shape {list(shape)}")


def _infer_broadcast(inputs: tuple[TensorType, ...], attrs: ShapeAttrs, where: str) -> TensorType:
    (x,) = inputs
    _check_shape(attrs.shape, where)
    if len(x.shape) > len(attrs.shape) or broadcast_shapes(x.shape, attrs.shape, where=where) != attrs.shape:
        raise ContractError(f"{where}: cannot broadcast shape {list(x.shape)} to {list(attrs.shape)}")
    return _same_dtype(x, attrs.shape)


def _infer_reshape(inputs: tuple[TensorType, ...], attrs: ShapeAttrs, where: str) -> TensorType:
    (x,) = inputs
    _check_shape(attrs.shape, where)
    if math.prod(attrs.shape) != x.size:
        raise ContractError(
            f"{where}: cannot reshape shape {list(x.shape)} ({x.size} elements) into "
            f"{list(attrs.shape)} ({math.prod(attrs.shape)} elements)"
        )
    return _same_dtype(x, attrs.shape)


def _infer_expand(inputs: tuple[TensorType, ...], attrs: AxesAttrs, where: str) -> TensorType:
    (x,) = inputs
    ndim = x.ndim + len(attrs.axes)
    check_axes(attrs.axes, ndim, where)
    dims = iter(x.shape)
    return _same_dtype(x, tuple(1 if i in attrs.axes else next(dims) for i in range(ndim)))


def _infer_squeeze(inputs: tuple[TensorType, ...], attrs: AxesAttrs, where: str) -> TensorType:
    (x,) = inputs
    check_axes(attrs.axes, x.ndim, where)
    for a in attrs.axes:
        if x.shape[a] != 1:
            raise ContractError(f"{where}: cannot squeeze axis {a} of size {x.shape[a]} (expected 1)")
    return _same_dtype(x, tuple(d for i, d in enumerate(x.shape) if i not in attrs.axes))


def _infer_transpose(inputs: tuple[TensorType, ...], attrs: AxesAttrs, where: str) -> TensorType:
    (x,) = inputs
    if sorted(attrs.axes) != list(range(x.ndim)):
        raise ContractError(f"{where}: axes {list(attrs.axes)} are not a permutation of the {x.ndim} axes")
    return _same_dtype(x, tuple(x.shape[a] for a in attrs.axes))


def slice_length(start: int, stop: int, step: int) -> int:
    return len(range(start, stop, step))


def _check_slice(shape: tuple[int, ...], attrs: SliceAttrs, where: str) -> tuple[int, ...]:
    n = len(shape)
    if not len(attrs.starts) == len(attrs.stops) == len(attrs.steps) == n:
        raise ContractError(f"{where}: starts, stops and steps need one entry per axis ({n})")
    out = []
    for ax, (size, a, b, s) in enumerate(zip(shape, attrs.starts, attrs.stops, attrs.steps, strict=True)):
        if s == 0:
            raise ContractError(f"{where}: step of axis {ax} is zero")
        # slice.indices gives stop -1 for a negative step running past index 0; as a
        # Python slice that stop is None (see _slices), not 'the last element'.
        if (a, b, s) != slice(a, None if b < 0 else b, s).indices(size):
            raise ContractError(
                f"{where}: slice {a}:{b}:{s} of axis {ax} (size {size}) is not canonical; "
                "expected the values of slice.indices(size)"
            )
        out.append(slice_length(a, b, s))
    return tuple(out)


def _infer_slice(inputs: tuple[TensorType, ...], attrs: SliceAttrs, where: str) -> TensorType:
    (x,) = inputs
    return _same_dtype(x, _check_slice(x.shape, attrs, where))


def _infer_embed(inputs: tuple[TensorType, ...], attrs: EmbedAttrs, where: str) -> TensorType:
    (x,) = inputs
    _check_shape(attrs.shape, where)
    if len(attrs.shape) != x.ndim or _check_slice(attrs.shape, attrs, where) != x.shape:
        raise ContractError(
            f"{where}: the slice of shape {list(attrs.shape)} does not have the input's shape {list(x.shape)}"
        )
    return _same_dtype(x, attrs.shape)


def _slices(attrs: SliceAttrs) -> tuple[slice, ...]:
    return tuple(
        slice(a, None if b < 0 else b, s) for a, b, s in zip(attrs.starts, attrs.stops, attrs.steps, strict=True)
    )


def _embed_ref(attrs: EmbedAttrs, x: np.ndarray) -> np.ndarray:
    out = np.zeros(attrs.shape, dtype=x.dtype)
    out[_slices(attrs)] = x
    return out


def _infer_concat(inputs: tuple[TensorType, ...], attrs: ConcatAttrs, where: str) -> TensorType:
    first = inputs[0]
    if not 0 <= attrs.axis < max(first.ndim, 1):
        raise ContractError(f"{where}: axis {attrs.axis} is out of range for rank {first.ndim}")
    if first.ndim == 0:
        raise ContractError(f"{where}: cannot concatenate rank-0 tensors")
    total = 0
    for k, t in enumerate(inputs):
        same = t.ndim == first.ndim and all(
            d == e for i, (d, e) in enumerate(zip(t.shape, first.shape, strict=False)) if i != attrs.axis
        )
        if not same or t.dtype != first.dtype:
            raise ContractError(
                f"{where}: input {k} has type {t} but input 0 has {first}; all inputs need one "
                f"dtype and equal sizes except along axis {attrs.axis}"
            )
        total += t.shape[attrs.axis]
    shape = list(first.shape)
    shape[attrs.axis] = total
    return _same_dtype(first, tuple(shape))


def _concat_grad(c: GradContext) -> Any:
    axis = c.attrs.axis
    offset = sum(c.sig.inputs[k].shape[axis] for k in range(c.index))
    size = c.input_type(c.index).shape[axis]
    index = tuple(slice(offset, offset + size) if i == axis else slice(None) for i in range(c.gy.ndim))
    return c.gy[index]


def _slice_grad(c: GradContext) -> Any:
    a = c.attrs
    attrs = {
        "starts": list(a.starts),
        "stops": list(a.stops),
        "steps": list(a.steps),
        "shape": list(c.input_type(0).shape),
    }
    return c.gy.builder.emit("embed_slice", [c.gy], attrs)


def _embed_grad(c: GradContext) -> Any:
    a = c.attrs
    attrs = {"starts": list(a.starts), "stops": list(a.stops), "steps": list(a.steps)}
    return c.gy.builder.emit("slice", [c.gy], attrs)


def _inverse(perm: tuple[int, ...]) -> list[int]:
    inv = [0] * len(perm)
    for i, p in enumerate(perm):
        inv[p] = i
    return inv


def _shape_op(
    name: str,
    attrs: type,
    infer: Any,
    ref: Any,
    grad: Any,
    doc: str,
    arity: int | None = 1,
    preserves_layout: bool = False,
    affine: Any = None,
    images: Any = None,
    join: Any = None,
    batch: Any = None,
) -> None:
    register_op(
        OpDef(
            name=name,
            kind="shape",
            arity=arity,
            attrs=attrs,
            infer=infer,
            reference=ref,
            derivative=Derivative({0 if arity else "*": grad}),
            linear=Linear(((0,),) if arity else ALL_INPUTS),  # every view and join is linear
            view_affine=affine,
            axis_images=images,
            join_axis=join,
            batch_attrs=batch,
            preserves_layout=preserves_layout,
            doc=doc,
        )
    )


# -- Affine index maps (`OpDef.view_affine`): the input coordinates as forms of the output's --
def _broadcast_affine(attrs: Any, in_shape: Shape, out_shape: Shape, out: Coords, ext: Shape) -> Coords:
    return idx.aligned_coords(out, out_shape, in_shape)


def _reshape_affine(attrs: Any, in_shape: Shape, out_shape: Shape, out: Coords, ext: Shape) -> Coords | None:
    # Where the offset does not split into coordinates in range (3x4 read as 2x6), the
    # element is the input's at the same flat offset: flat coordinates (`idx.flat_coords`).
    offset = idx.flat(out, out_shape, len(ext))
    coords = idx.split(offset, in_shape, ext)
    return idx.flat_coords(offset) if coords is None else coords


def _expand_affine(attrs: AxesAttrs, in_shape: Shape, out_shape: Shape, out: Coords, ext: Shape) -> Coords:
    return tuple(c for k, c in enumerate(out) if k not in attrs.axes)


def _squeeze_affine(attrs: AxesAttrs, in_shape: Shape, out_shape: Shape, out: Coords, ext: Shape) -> Coords:
    rest = iter(out)
    return tuple(idx.zero(len(ext)) if k in attrs.axes else next(rest) for k in range(len(in_shape)))


def _transpose_affine(attrs: AxesAttrs, in_shape: Shape, out_shape: Shape, out: Coords, ext: Shape) -> Coords:
    coords = [idx.zero(len(ext))] * len(out)
    for k, p in enumerate(attrs.axes):
        coords[p] = out[k]
    return tuple(coords)


def _slice_affine(attrs: SliceAttrs, in_shape: Shape, out_shape: Shape, out: Coords, ext: Shape) -> Coords:
    return tuple(c.scaled(step).shifted(start) for c, start, step in zip(out, attrs.starts, attrs.steps, strict=True))


def _embed_images(attrs: EmbedAttrs, in_shape: Shape, out_shape: Shape) -> idx.ImageMap:
    """Per axis, output index k holds input element (k - start) / step where that is an
    integer in range (`OpDef.axis_images`); elsewhere 0."""
    axes = []
    for n, d, start, step in zip(in_shape, out_shape, attrs.starts, attrs.steps, strict=True):
        if step == 1:  # the indices [start, start + n) of the output, each its one image: built
            # as runs, not index by index (a gradient's embed of a flat axis has 10⁵-10⁶ indices)
            first = min(max(start, 0), d)
            last = max(min(start + n, d), first)
            images: list[tuple[int, ...]] = [()] * first
            images += [(m,) for m in range(first - start, last - start)]
            images += [()] * (d - len(images))
            lo, hi = (first, last - 1) if first < last else (0, -1)
        else:
            images = []
            for k in range(d):
                m, r = divmod(k - start, step)
                images.append((m,) if r == 0 and 0 <= m < n else ())
            run = [im == (k - start,) for k, im in enumerate(images)]
            lo = run.index(True) if any(run) else 0
            hi = lo - 1 + int(any(run))
        axes.append(idx.AxisImages(tuple(images), -start, lo, hi))
    return idx.ImageMap(tuple(axes))


def _back_to_input(c: GradContext) -> Any:
    return F.reshape(c.gy, c.input_type(0).shape)


_shape_op(
    "broadcast_to",
    ShapeAttrs,
    _infer_broadcast,
    lambda attrs, x: np.broadcast_to(x, attrs.shape).copy(),
    lambda c: F.sum_to(c.gy, c.input_type(0).shape),
    "NumPy broadcast to a shape",
    affine=_broadcast_affine,
    batch=batch_rules.leading_shape,
)
_shape_op(
    "reshape",
    ShapeAttrs,
    _infer_reshape,
    lambda attrs, x: x.reshape(attrs.shape),
    _back_to_input,
    "row-major reshape",
    preserves_layout=True,
    affine=_reshape_affine,
    batch=batch_rules.leading_shape,
)
_shape_op(
    "expand_dims",
    AxesAttrs,
    _infer_expand,
    lambda attrs, x: np.expand_dims(x, attrs.axes),
    _back_to_input,
    "insert size-1 axes",
    preserves_layout=True,
    affine=_expand_affine,
    batch=batch_rules.first_kept,
)
_shape_op(
    "squeeze",
    AxesAttrs,
    _infer_squeeze,
    lambda attrs, x: np.squeeze(x, attrs.axes),
    _back_to_input,
    "remove size-1 axes",
    preserves_layout=True,
    affine=_squeeze_affine,
    batch=batch_rules.first_kept,
)
_shape_op(
    "transpose",
    AxesAttrs,
    _infer_transpose,
    lambda attrs, x: np.transpose(x, attrs.axes),
    lambda c: F.transpose(c.gy, _inverse(c.attrs.axes)),
    "permute axes",
    affine=_transpose_affine,
    batch=batch_rules.first_in_place,
)
_shape_op(
    "slice",
    SliceAttrs,
    _infer_slice,
    lambda attrs, x: x[_slices(attrs)].copy(),
    _slice_grad,
    "basic strided slice, one start:stop:step per axis",
    affine=_slice_affine,
    batch=batch_rules.whole_first_axis,
)
_shape_op(
    "embed_slice",
    EmbedAttrs,
    _infer_embed,
    _embed_ref,
    _embed_grad,
    "zeros of `shape` with the input placed at a slice (the adjoint of slice)",
    images=_embed_images,
)
_shape_op(
    "concat",
    ConcatAttrs,
    _infer_concat,
    lambda attrs, *xs: np.concatenate(xs, axis=attrs.axis),
    _concat_grad,
    "join along an existing axis",
    arity=None,
    join=lambda attrs: attrs.axis,
    batch=batch_rules.other_axis,
)

"""Gather and scatter ops: ``take`` (NumPy's take, take_along_axis and integer-array
indexing), ``add_at`` (a functional ``np.add.at``) and ``index_array`` (a constant
integer table: index arrays given as NumPy arrays).

Assumes: positions are int32 tensors (graph inputs, constants or computed), never
differentiated. ``take`` reads, for each output element, one input element at a position
read from ``indices`` along ``axis``; with ``along`` the positions have the input's rank
and address each lane (take_along_axis), otherwise they replace the axis by their own
shape (take). ``add_at`` is the transpose: it returns ``base`` with every value added at
its position, repeated positions accumulating in the order of the position elements.

Guarantees: the NumPy references normalise positions by ``mode`` exactly as NumPy does
(``raise``: -n <= p < n, negatives count from the end; ``wrap``: p mod n; ``clip``: p
limited to [0, n - 1]); a position out of range under ``raise`` is a NumericalError.
``add_at`` accumulates float32 in float64 and rounds once (exact for float64, the
order of ``np.add.at``), the order the compiled scatter kernels sum in, so compiled and
interpreted results are bit-identical. Each op's derivative is the other: take's input
gradient is an add_at of the cotangent into zeros; add_at's gradient is the cotangent
for ``base`` and a take of it for ``values``. The lowerings are data: `GatherCoords`
for take, `ScatterLayout` for add_at, ``table`` for index_array; see docs/gather-scatter.md.
"""

from __future__ import annotations

import base64
import math
from typing import Any, Literal

import numpy as np

from dpt_ir.ir import indexing as idx
from dpt_ir.ir.errors import ContractError, NumericalError
from dpt_ir.ir.indexing import Coords
from dpt_ir.ir.registry import (
    Derivative,
    GatherCoords,
    GradContext,
    Linear,
    OpDef,
    ScatterLayout,
    register_op,
)
from dpt_ir.ir.rules import Attrs
from dpt_ir.ir.types import TensorType

Mode = Literal["raise", "wrap", "clip"]
INDEX_DTYPE = "int32"
INT32_RANGE = (-(2**31), 2**31 - 1)


class GatherAttrs(Attrs):
    axis: int
    mode: Mode = "raise"
    along: bool = False  # take_along_axis: positions of the input's rank, one per lane


class TableAttrs(Attrs):
    """A constant int32 table: ``data`` is its little-endian bytes in base64 (one string:
    validating, hashing and printing a graph stays cheap for millions of positions)."""

    data: str
    shape: tuple[int, ...]


def table_attrs(values: np.ndarray) -> dict[str, Any]:
    """The attributes of an ``index_array`` node holding ``values`` (integers that fit int32)."""
    data = base64.b64encode(np.ascontiguousarray(values, dtype="<i4").tobytes()).decode("ascii")
    return {"data": data, "shape": list(np.shape(values))}


def normalise(positions: np.ndarray, size: int, mode: str, where: str) -> np.ndarray:
    """Positions along an axis of length ``size`` as in-range int64 offsets, NumPy's way."""
    p = np.asarray(positions).astype(np.int64)
    if p.size == 0:
        return p
    if mode == "wrap":
        return np.mod(p, size)
    if mode == "clip":
        return np.clip(p, 0, size - 1)
    bad = (p < -size) | (p >= size)
    if bad.any():
        first = int(p[bad].reshape(-1)[0])
        raise NumericalError(
            f"{where}: index {first} is out of range for an axis of size {size} "
            f"(mode 'raise': expected {-size} <= index < {size}; {int(bad.sum())} such index(es))"
        )
    return np.where(p < 0, p + size, p)


def _check_indices(indices: TensorType, size: int, where: str) -> None:
    if indices.dtype != INDEX_DTYPE:
        raise ContractError(
            f"{where}: indices must be an int32 tensor (a graph input, a constant or an integer NumPy array), "
            f"found {indices.dtype}"
        )
    if size == 0 and indices.size > 0:
        raise ContractError(f"{where}: cannot take {indices.size} element(s) from an axis of size 0")


def _check_axis(axis: int, ndim: int, where: str) -> None:
    if not 0 <= axis < ndim:
        raise ContractError(
            f"{where}: axis {axis} is out of range for a source of rank {ndim} (expected 0..{ndim - 1})"
        )


def gathered_shape(a: tuple[int, ...], indices: tuple[int, ...], axis: int, along: bool) -> tuple[int, ...]:
    """The shape of ``take``'s output (and of ``add_at``'s values)."""
    if along:
        return indices
    return a[:axis] + indices + a[axis + 1 :]


def _check_along(a: TensorType, indices: TensorType, axis: int, what: str, where: str) -> None:
    same = indices.ndim == a.ndim and all(
        d == e for k, (d, e) in enumerate(zip(a.shape, indices.shape, strict=True)) if k != axis
    )
    if not same:
        raise ContractError(
            f"{where}: {what} shape {list(a.shape)} and indices shape {list(indices.shape)} must agree on every "
            f"axis but {axis} (take_along_axis: broadcast them first)"
        )


def _infer_take(inputs: tuple[TensorType, ...], attrs: GatherAttrs, where: str) -> TensorType:
    a, indices = inputs
    _check_axis(attrs.axis, a.ndim, where)
    _check_indices(indices, a.shape[attrs.axis], where)
    if attrs.along:
        _check_along(a, indices, attrs.axis, "source", where)
    return TensorType(shape=gathered_shape(a.shape, indices.shape, attrs.axis, attrs.along), dtype=a.dtype)


def _take_ref(attrs: GatherAttrs, a: np.ndarray, indices: np.ndarray) -> np.ndarray:
    p = normalise(indices, a.shape[attrs.axis], attrs.mode, "op 'take'")
    if attrs.along:
        return np.take_along_axis(a, p, axis=attrs.axis)
    return np.take(a, p, axis=attrs.axis)


def _take_coords(
    attrs: GatherAttrs, in_shapes: tuple[tuple[int, ...], ...], out_shape: tuple[int, ...], out: Coords, ext: Any
) -> GatherCoords:
    """Where a take reads for the output element at coordinate forms ``out`` (`GatherCoords`)."""
    a, indices = in_shapes
    axis, k = attrs.axis, len(indices)
    if attrs.along:
        at, source = out, out
    else:
        at = out[axis : axis + k]
        source = (*out[:axis], idx.zero(len(ext)), *out[axis + k :])
    return GatherCoords(1, tuple(at), 0, tuple(source), axis, a[axis], attrs.mode)


def _take_grad(c: GradContext) -> Any:
    """Input gradient of take: the cotangent added at the positions into zeros (add_at)."""
    a = c.input_type(0)
    zeros = c.gy.builder.constant(0.0, c.gy.dtype, a.shape)
    return c.gy.builder.emit("add_at", [zeros, c.input(1), c.gy], c.attrs.model_dump())


def _infer_add_at(inputs: tuple[TensorType, ...], attrs: GatherAttrs, where: str) -> TensorType:
    base, indices, values = inputs
    _check_axis(attrs.axis, base.ndim, where)
    _check_indices(indices, base.shape[attrs.axis], where)
    if base.dtype == "bool" or values.dtype != base.dtype:
        raise ContractError(f"{where}: base and values need one numeric dtype, found {base.dtype} and {values.dtype}")
    if attrs.along:
        _check_along(base, indices, attrs.axis, "base", where)
    want = gathered_shape(base.shape, indices.shape, attrs.axis, attrs.along)
    if values.shape != want:
        raise ContractError(
            f"{where}: values must have shape {list(want)} (base {list(base.shape)} with axis {attrs.axis} "
            f"indexed by indices {list(indices.shape)}), found {list(values.shape)}"
        )
    return base


def accumulator_dtype(dtype: str) -> np.dtype:
    """What a scatter sums in: float64 for float32 (rounded once at the end), else the dtype."""
    return np.dtype("float64") if dtype == "float32" else np.dtype(dtype)


def _add_at_ref(attrs: GatherAttrs, base: np.ndarray, indices: np.ndarray, values: np.ndarray) -> np.ndarray:
    p = normalise(indices, base.shape[attrs.axis], attrs.mode, "op 'add_at'")
    acc = base.astype(accumulator_dtype(base.dtype.name))
    vals = values.astype(acc.dtype)
    if attrs.along:
        lanes = list(np.indices(p.shape, sparse=True))
        lanes[attrs.axis] = p
        np.add.at(acc, tuple(lanes), vals)
    else:
        k = p.ndim
        moved = np.moveaxis(vals, list(range(attrs.axis, attrs.axis + k)), list(range(k)))
        np.add.at(np.moveaxis(acc, attrs.axis, 0), p, moved)
    return acc.astype(base.dtype)


def _add_at_layout(attrs: GatherAttrs, shape: tuple[int, ...], indices: tuple[int, ...]) -> ScatterLayout:
    axis = attrs.axis
    common = {"base": 0, "indices": 1, "values": 2, "axis": axis, "size": shape[axis], "mode": attrs.mode}
    if attrs.along:
        return ScatterLayout(
            **common,
            rows=math.prod(shape),
            source_at=lambda dest, j: j,
            key_form=lambda j, p: idx.flat(j[:axis] + (p,) + j[axis + 1 :], shape, 0),
            row_form=lambda dest: idx.flat(dest, shape, 0),
        )
    return ScatterLayout(
        **common,
        rows=shape[axis],
        source_at=lambda dest, j: dest[:axis] + j + dest[axis + 1 :],
        key_form=lambda j, p: p,
        row_form=lambda dest: dest[axis],
    )


def _add_at_values_grad(c: GradContext) -> Any:
    """Values gradient of add_at: the cotangent read at the positions (take)."""
    return c.gy.builder.emit("take", [c.gy, c.input(1)], c.attrs.model_dump())


def _table(attrs: TableAttrs) -> np.ndarray:
    try:
        raw = base64.b64decode(attrs.data.encode("ascii"), validate=True)
    except (ValueError, UnicodeEncodeError):
        raise ContractError("index_array: data must be base64 text (little-endian int32 bytes)") from None
    if any(d < 0 for d in attrs.shape) or len(raw) != 4 * math.prod(attrs.shape):
        raise ContractError(
            f"index_array: {len(raw)} byte(s) of data do not fill shape {list(attrs.shape)} "
            f"(expected {4 * max(math.prod(attrs.shape), 0)}: 4 per int32 element)"
        )
    return np.frombuffer(raw, dtype="<i4").astype(np.int32).reshape(attrs.shape)


def _infer_table(inputs: tuple[TensorType, ...], attrs: TableAttrs, where: str) -> TensorType:
    try:
        _table(attrs)
    except ContractError as exc:
        raise ContractError(f"{where}: {exc}") from None
    return TensorType(shape=attrs.shape, dtype=INDEX_DTYPE)


register_op(
    OpDef(
        name="take",
        kind="shape",
        arity=2,
        attrs=GatherAttrs,
        infer=_infer_take,
        reference=_take_ref,
        gather_affine=_take_coords,
        data_dependent_reads=True,
        derivative=Derivative(formulas={0: _take_grad}, saved_inputs=(1,), nondifferentiable=(1,)),
        linear=Linear(((0,),)),
        doc="gather along an axis at int32 positions (np.take; along: np.take_along_axis)",
    )
)
register_op(
    OpDef(
        name="add_at",
        kind="scatter",
        arity=3,
        attrs=GatherAttrs,
        infer=_infer_add_at,
        reference=_add_at_ref,
        scatter=_add_at_layout,
        derivative=Derivative(
            formulas={0: lambda c: c.gy, 2: _add_at_values_grad}, saved_inputs=(1,), nondifferentiable=(1,)
        ),
        linear=Linear(((0, 2),)),
        cost="expensive",
        doc="base with values added at int32 positions along an axis, repeats accumulating (np.add.at)",
    )
)
register_op(
    OpDef(
        name="index_array",
        kind="elementwise",
        arity=0,
        attrs=TableAttrs,
        infer=_infer_table,
        reference=lambda attrs: _table(attrs),
        table=_table,
        doc="a constant int32 table (index arrays given as NumPy arrays)",
    )
)

__all__ = ["GatherAttrs", "accumulator_dtype", "table_attrs", "gathered_shape", "normalise"]

"""The gather and scatter functions, with NumPy's names and signatures: `take`,
`take_along_axis`, `add_at` (a functional ``np.add.at``) and integer-array indexing
``x[idx]``, ``x[i, :, j]`` (`index_with_array`, reached through ``Tensor.__getitem__``).

Assumes: positions are int32 graph tensors or integer NumPy arrays (any integer dtype
whose values fit int32; they become ``index_array`` constants). They are never
differentiated. Guarantees: each call emits ``take`` / ``add_at`` nodes of the op table
(`dpt_ir.ops.gather`) after NumPy's argument handling (``axis=None`` flattens,
take_along_axis broadcasts, values broadcast to the indexed shape); a float or bool
index array, an unknown mode, or a constant position out of range under ``mode="raise"``
is a ContractError naming the op, what was expected and what was found.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.ir.builder import Tensor, op_site, records_origin
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import broadcast_shapes, normalize_axis
from dpt_ir.ops.gather import INDEX_DTYPE, INT32_RANGE, gathered_shape, table_attrs

MODES = ("raise", "wrap", "clip")


def _check_mode(mode: object, where: str) -> str:
    if mode not in MODES:
        raise ContractError(f"{where}: unknown mode {mode!r}; expected one of {', '.join(map(repr, MODES))}")
    return str(mode)


def positions(x: Tensor, indices: Any, size: int, mode: str, where: str) -> Tensor:
    """``indices`` as an int32 tensor of ``x``'s graph: an int32 tensor as it is, an integer
    array-like as an ``index_array`` constant, checked against an axis of length ``size``
    under ``mode="raise"``. A tensor's dtype is checked here, before ``x`` may be
    flattened, so that the error names the user's operand, not an internal reshape."""
    if isinstance(indices, Tensor):
        p = x.builder.own(indices, where)
        if p.dtype != INDEX_DTYPE:
            raise ContractError(
                f"{where}, %{p.name}: indices must be an int32 tensor (a graph input, a constant or an integer "
                f"NumPy array), found {p.dtype}"
            )
        return p
    arr = np.asarray(indices)
    if arr.dtype.kind not in "iu":
        what = "a boolean mask" if arr.dtype.kind == "b" else f"a {arr.dtype.name} array"
        raise ContractError(
            f"{where}: indices must be integers (an int32 tensor or an integer NumPy array), found {what}"
        )
    lo, hi = INT32_RANGE
    if arr.size and not (lo <= int(arr.min()) and int(arr.max()) <= hi):
        raise ContractError(f"{where}: index values must fit int32, found {int(arr.min())}..{int(arr.max())}")
    if mode == "raise" and arr.size:
        bad = (arr < -size) | (arr >= size)
        if bad.any():
            raise ContractError(
                f"{where}: index {int(arr[bad].reshape(-1)[0])} is out of bounds for an axis of size {size} "
                f"(expected {-size} <= index < {size}; mode 'raise')"
            )
    return x.builder.emit("index_array", [], table_attrs(arr))


def _source(a: Any, op: str) -> Tensor:
    if not isinstance(a, Tensor):
        raise ContractError(f"op {op!r}: expected a dp tensor to index, found {type(a).__name__}")
    return a


@records_origin
def take(a: Tensor, indices: Any, axis: int | None = None, mode: str = "raise") -> Tensor:
    """Elements of ``a`` at ``indices`` along ``axis`` (None: of the flattened tensor), as
    ``np.take``: the output replaces that axis by the indices' shape. ``mode``: ``raise``
    (negative positions count from the end; a runtime position out of range is a
    NumericalError at the checkpoint), ``wrap`` or ``clip``. The gradient wrt ``a`` is an
    ``add_at`` of the cotangent (deterministic, no float atomics)."""
    a = _source(a, "take")
    where = op_site("take", [a])
    mode = _check_mode(mode, where)
    if axis is None:
        a, axis = F.reshape(a, (-1,)), 0
    ax = normalize_axis(axis, a.ndim, where)
    p = positions(a, indices, a.shape[ax], mode, where)
    return a.builder.emit("take", [a, p], {"axis": ax, "mode": mode})


@records_origin
def take_along_axis(arr: Tensor, indices: Any, axis: int | None) -> Tensor:
    """``np.take_along_axis``: ``indices`` has ``arr``'s rank and picks, in each lane along
    ``axis``, the elements at its positions (the other axes broadcast); ``axis=None``
    works on the flattened tensor with 1-D indices."""
    arr = _source(arr, "take_along_axis")
    where = op_site("take", [arr])
    if axis is None:
        arr, axis = F.reshape(arr, (-1,)), 0
    ax = normalize_axis(axis, arr.ndim, where)
    p = positions(arr, indices, arr.shape[ax], "raise", where)
    if p.ndim != arr.ndim:
        raise ContractError(
            f"{where}: indices must have the source's rank {arr.ndim} (take_along_axis), found rank {p.ndim}"
        )
    lanes = broadcast_shapes(_without(arr.shape, ax), _without(p.shape, ax), where=where)
    a_shape = lanes[:ax] + (arr.shape[ax],) + lanes[ax + 1 :]
    p_shape = lanes[:ax] + (p.shape[ax],) + lanes[ax + 1 :]
    arr, p = F.broadcast_to(arr, a_shape), F.broadcast_to(p, p_shape)
    return arr.builder.emit("take", [arr, p], {"axis": ax, "mode": "raise", "along": True})


def _without(shape: tuple[int, ...], axis: int) -> tuple[int, ...]:
    return shape[:axis] + (1,) + shape[axis + 1 :]


@records_origin
def add_at(a: Tensor, indices: Any, values: Any, mode: str = "raise") -> Tensor:
    """A functional ``np.add.at(a, indices, values)``: a new tensor, ``a`` with ``values``
    added at ``indices``, repeated positions accumulating. ``indices`` index axis 0 (an
    int32 tensor or integer array), or the axis of the one array in a tuple of full
    slices (``(slice(None), idx)``); ``values`` broadcast to the indexed shape. Sums run
    in a fixed order (float32 in float64), so results are deterministic; ``mode`` as in
    `take` (NumPy's add.at raises)."""
    a = _source(a, "add_at")
    where = op_site("add_at", [a])
    mode = _check_mode(mode, where)
    axis, indices = _scatter_axis(a, indices, where)
    p = positions(a, indices, a.shape[axis], mode, where)
    shape = gathered_shape(a.shape, p.shape, axis, False)
    v = F.lift([a, values], where, dtype=a.dtype)[1]
    try:
        fits = np.broadcast_shapes(v.shape, shape) == shape
    except ValueError:
        fits = False
    if not fits:
        raise ContractError(
            f"{where}: expected values that broadcast to the indexed shape {list(shape)} (the shape of %{a.name} "
            f"with axis {axis} replaced by the indices' shape), found %{v.name} of shape {list(v.shape)}"
        )
    v = F.broadcast_to(v, shape)
    return a.builder.emit("add_at", [a, p, v], {"axis": axis, "mode": mode})


def _scatter_axis(a: Tensor, indices: Any, where: str) -> tuple[int, Any]:
    if not isinstance(indices, tuple):
        if a.ndim == 0:
            raise ContractError(f"{where}: cannot index a rank-0 tensor")
        return 0, indices
    arrays = [k for k, it in enumerate(indices) if not (isinstance(it, slice) and it == slice(None))]
    if len(arrays) != 1 or len(indices) > a.ndim:
        raise ContractError(
            f"{where}: expected an index array, or a tuple of full slices and one index array, found {indices!r}"
        )
    return arrays[0], indices[arrays[0]]


def is_index_array(item: object) -> bool:
    """Does a ``__getitem__`` item ask for integer-array (advanced) indexing?"""
    return isinstance(item, Tensor | np.ndarray | list)


def getitem(x: Tensor, index: Any) -> Tensor:
    """``x[index]`` (``Tensor.__getitem__``): NumPy indexing; an index with integer index
    arrays goes to `index_with_array`, any other to basic indexing (`core.getitem`)."""
    items = list(index) if isinstance(index, tuple) else [index]
    if any(is_index_array(it) for it in items):
        return index_with_array(x, items)
    return F.getitem(x, index)


Tensor.__getitem__ = getitem  # type: ignore[method-assign]  (basic indexing lives below, in core)


def index_with_array(x: Tensor, items: Sequence[Any]) -> Tensor:
    """``x[items]`` where some items are index arrays (tensors, integer arrays or lists)
    and the others are slices, ints or one Ellipsis, with NumPy's rules: the arrays
    broadcast together; their shape replaces their axes when the advanced indices (arrays
    and ints) are adjacent, and comes first otherwise. Several arrays index the combined
    axes at flat positions, each array checked against its own axis (mode ``raise``)."""
    where = f"indexing %{x.name}"
    items = list(items)
    if any(it is None for it in items):
        raise ContractError(f"{where}: None (a new axis) cannot be mixed with an index array; expand_dims after")
    dots = [k for k, it in enumerate(items) if it is Ellipsis]  # by identity: items hold arrays
    if len(dots) > 1:
        raise ContractError(f"{where}: an index can only have a single ellipsis ('...')")
    if dots:
        k = dots[0]
        items[k : k + 1] = [slice(None)] * (x.ndim - len(items) + 1)
    if len(items) > x.ndim:
        raise ContractError(f"{where}: too many indices ({len(items)}) for a tensor of rank {x.ndim}")
    at = [k for k, it in enumerate(items) if is_index_array(it)]
    sources = [items[k] for k in at]
    for k in at:
        items[k] = slice(None)
    y = F.getitem(x, tuple(items))
    axes = [len([it for it in items[:k] if isinstance(it, slice)]) for k in at]  # the arrays' axes in y
    advanced = [k for k, it in enumerate(items) if k in at or not isinstance(it, slice)]
    in_place = advanced == list(range(advanced[0], advanced[-1] + 1))
    if len(at) == 1:
        p = positions(y, sources[0], x.shape[at[0]], "raise", where)
        out = y.builder.emit("take", [y, p], {"axis": axes[0], "mode": "raise"})
        block = list(range(axes[0], axes[0] + p.ndim))
        if not in_place:  # NumPy: split advanced indices go first
            out = F.transpose(out, block + [d for d in range(out.ndim) if d not in block])
        return out
    flat = _flat_positions(y, sources, [x.shape[k] for k in at], where)
    combined = F.transpose(y, axes + [d for d in range(y.ndim) if d not in axes])  # the arrays' axes first
    rest = combined.shape[len(axes) :]
    out = y.builder.emit(
        "take", [F.reshape(combined, (math.prod(combined.shape[: len(axes)]), *rest)), flat], {"axis": 0}
    )
    if in_place:  # back where the arrays were
        block = list(range(flat.ndim))
        tail = [d for d in range(out.ndim) if d not in block]
        out = F.transpose(out, tail[: axes[0]] + block + tail[axes[0] :])
    return out


def _flat_positions(y: Tensor, sources: Sequence[Any], sizes: Sequence[int], where: str) -> Tensor:
    """Row-major flat positions into the product of axes of ``sizes``, one per element of
    the broadcast index arrays ``sources``. Each array is normalised by a take from the
    table 0..n-1 of its own axis, so an out-of-range position is caught on its own axis
    (ContractError for a constant, NumericalError at run time), never hidden in the sum."""
    if math.prod(sizes) > INT32_RANGE[1]:
        raise ContractError(f"{where}: the indexed axes {list(sizes)} hold more than 2**31 - 1 elements")
    normalised = []
    for src, n in zip(sources, sizes, strict=True):
        p = positions(y, src, n, "raise", where)
        table = y.builder.emit("index_array", [], table_attrs(np.arange(n)))
        normalised.append(y.builder.emit("take", [table, p], {"axis": 0}))
    shape = broadcast_shapes(*(q.shape for q in normalised), where=where)
    flat: Tensor | None = None
    for q, stride in zip(normalised, _strides(sizes), strict=True):
        term = F.broadcast_to(q, shape) * stride if stride != 1 else F.broadcast_to(q, shape)
        flat = term if flat is None else flat + term
    assert flat is not None
    return flat


def _strides(sizes: Sequence[int]) -> list[int]:
    out, acc = [], 1
    for n in reversed(sizes):
        out.append(acc)
        acc *= n
    return out[::-1]

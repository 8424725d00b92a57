"""The gather and scatter functions, with NumPy's names and signatures: `take`,
`take_along_axis`, `add_at` (a functional ``np.add.at``) and integer-array indexing
``x[idx]`` (`index_with_array`, reached through ``Tensor.__getitem__``).

Assumes: positions are int32 graph tensors or integer NumPy arrays (any integer dtype
whose values fit int32; they become ``index_array`` constants). They are never
differentiated. Guarantees: each call emits ``take`` / ``add_at`` nodes of the op table
(`dpt_ir.ops.gather`) after NumPy's argument handling (``axis=None`` flattens,
take_along_axis broadcasts, values broadcast to the indexed shape); a float or bool
index array, an unknown mode, or a constant position out of range under ``mode="raise"``
is a ContractError naming the op, what was expected and what was found.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np

from dpt_ir import functions as F
from dpt_ir.builder import Tensor, op_site, records_origin
from dpt_ir.errors import ContractError
from dpt_ir.ops.gather import INT32_RANGE, gathered_shape, table_attrs
from dpt_ir.types import broadcast_shapes, normalize_axis

MODES = ("raise", "wrap", "clip")


def _check_mode(mode: object, where: str) -> str:
    if mode not in MODES:
        raise ContractError(f"{where}: unknown mode {mode!r}; expected one of {', '.join(map(repr, MODES))}")
    return str(mode)


def positions(x: Tensor, indices: Any, size: int, mode: str, where: str) -> Tensor:
    """``indices`` as an int32 tensor of ``x``'s graph: a tensor as it is (its dtype is
    checked by the op's type rule), an integer array-like as an ``index_array`` constant,
    checked against an axis of length ``size`` under ``mode="raise"``."""
    if isinstance(indices, Tensor):
        return x.builder.own(indices, where)
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
    v = F.broadcast_to(F.lift([a, values], where, dtype=a.dtype)[1], shape)
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


@records_origin
def index_with_array(x: Tensor, items: Sequence[Any]) -> Tensor:
    """``x[items]`` where one item is an index array (a tensor, an integer array or a
    list) and the others are slices, ints or one Ellipsis, with NumPy's rules: the array's
    shape replaces its axis, or, when ints and the array are not adjacent, comes first."""
    where = f"indexing %{x.name}"
    items = list(items)
    if any(it is None for it in items):
        raise ContractError(f"{where}: None (a new axis) cannot be mixed with an index array; expand_dims after")
    arrays = [k for k, it in enumerate(items) if is_index_array(it)]
    if len(arrays) != 1:
        raise ContractError(
            f"{where}: expected one index array, found {len(arrays)} (index one axis at a time, or dp.take "
            "on a reshaped tensor with combined flat positions)"
        )
    dots = [k for k, it in enumerate(items) if it is Ellipsis]  # by identity: items hold arrays
    if len(dots) > 1:
        raise ContractError(f"{where}: an index can only have a single ellipsis ('...')")
    if dots:
        k = dots[0]
        items[k : k + 1] = [slice(None)] * (x.ndim - len(items) + 1)
        arrays = [k for k, it in enumerate(items) if is_index_array(it)]
    if len(items) > x.ndim:
        raise ContractError(f"{where}: too many indices ({len(items)}) for a tensor of rank {x.ndim}")
    (at,) = arrays
    array = items[at]
    items[at] = slice(None)
    y = F.getitem(x, tuple(items))
    axis = len([it for it in items[:at] if isinstance(it, slice)])
    p = positions(y, array, x.shape[at], "raise", where)
    out = y.builder.emit("take", [y, p], {"axis": axis, "mode": "raise"})
    advanced = [k for k, it in enumerate(items) if k == at or not isinstance(it, slice)]
    if advanced != list(range(advanced[0], advanced[-1] + 1)):  # NumPy: split advanced indices go first
        moved = list(range(axis, axis + p.ndim))
        out = F.transpose(out, moved + [d for d in range(out.ndim) if d not in moved])
    return out

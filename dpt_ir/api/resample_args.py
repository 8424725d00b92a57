"""Argument handling of the resampling functions (`dpt_ir.api.resample`): scipy.ndimage's
readings of orders, modes, per-axis numbers and affine matrices, as ContractErrors.

Assumes nothing about the graph beyond the builder. Guarantees: each check either returns
the normalised argument or raises a ContractError naming the function and its input, what
was expected and what was found; constants are finite float64 arrays.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.api import resample_dynamic
from dpt_ir.ir.builder import Tensor
from dpt_ir.ir.errors import ContractError
from dpt_ir.ops.resample import Affine, ZoomShift
from dpt_ir.reference import resample_ref as R

ORDERS = (0, 1, 2, 3, 4, 5)  # every order scipy has


def where_of(fn: str, x: Any) -> str:
    return f"dp.{fn} on %{x.name}" if isinstance(x, Tensor) else f"dp.{fn}"


def image(x: Any, where: str) -> Tensor:
    if not isinstance(x, Tensor):
        raise ContractError(f"{where}: expected a dp tensor as the input, found {type(x).__name__}")
    if x.ndim < 1:
        raise ContractError(f"{where}: expected an input of rank >= 1, found a scalar")
    if x.dtype not in ("float32", "float64"):
        (x,) = F.lift([x], where, dtype="float64")
    return x


def check(order: Any, mode: Any, where: str, cval: Any = 0.0) -> None:
    """``order`` one of 0 to 5 (not a bool), ``mode`` one of scipy's, ``cval`` a real scalar
    (NaN and infinities included, as scipy takes them), not a graph tensor."""
    if isinstance(order, bool) or order not in ORDERS:
        raise ContractError(f"{where}: order must be one of {', '.join(map(str, ORDERS))}, found {order!r}")
    if mode not in R.MODES:
        raise ContractError(f"{where}: unknown mode {mode!r}; expected one of {', '.join(R.MODES)}")
    if isinstance(cval, Tensor):
        raise ContractError(f"{where}: expected cval as a constant number, found the graph tensor %{cval.name}")
    kind = np.asarray(cval).dtype.kind if not isinstance(cval, (str, bytes)) else "U"
    if kind not in "biuf" or np.ndim(cval) != 0:
        raise ContractError(f"{where}: expected cval as a real number, found {cval!r}")


def check_empty(x: Tensor, mode: str, out_shape: Any, where: str) -> None:
    """An empty input sampled at some point has only ``cval`` to give: scipy returns it
    under ``constant`` and ``grid-constant`` and uninitialised memory (or a ValueError)
    under the other modes, which are refused."""
    if math.prod(x.shape) == 0 and math.prod(out_shape) > 0 and mode not in ("constant", "grid-constant"):
        raise ContractError(
            f"{where}: expected a non-empty input, or mode 'constant' or 'grid-constant' (where every point is "
            f"cval), to sample an input of shape {list(x.shape)} at {math.prod(out_shape)} points; "
            f"found mode {mode!r}"
        )


def constant(value: Any, what: str, where: str) -> np.ndarray:
    if isinstance(value, Tensor):
        raise ContractError(
            f"{where}: expected {what} as a constant array (the geometry is built at compile time), "
            f"found the graph tensor %{value.name}"
        )
    try:
        arr = np.asarray(value, dtype=np.float64)
    except (TypeError, ValueError):
        raise ContractError(f"{where}: expected {what} as an array of numbers, found {value!r}") from None
    if not np.all(np.isfinite(arr)):
        raise ContractError(f"{where}: expected finite {what}, found non-finite values")
    return arr


def per_axis(value: Any, rank: int, what: str, where: str) -> list[float]:
    arr = constant(value, what, where)
    if arr.ndim == 0:
        return [float(arr)] * rank
    if arr.shape != (rank,):
        raise ContractError(f"{where}: expected {what} as a number or {rank} numbers, found shape {list(arr.shape)}")
    return [float(v) for v in arr]


def affine_geometry(matrix: np.ndarray, offset: Any, rank: int, out_rank: int, where: str) -> Any:
    """scipy's reading of ``matrix``: (ndim,) diagonal, (ndim, out ndim), or homogeneous."""
    if matrix.ndim == 1:
        if matrix.shape != (rank,) or np.any(matrix == 0):
            raise ContractError(f"{where}: expected a diagonal of {rank} non-zero numbers, found {matrix.tolist()}")
        off = np.asarray(per_axis(offset, rank, "offset", where))
        return ZoomShift(zoom=matrix.tolist(), shift=(off / matrix).tolist())
    if matrix.ndim == 2 and matrix.shape[1] == rank + 1 and matrix.shape[0] in (rank, rank + 1):
        if matrix.shape[0] == rank + 1 and not np.all(matrix[rank] == [0] * rank + [1]):
            raise ContractError(f"{where}: expected a homogeneous matrix with last row [0, ..., 0, 1]")
        offset, matrix = matrix[:rank, rank], matrix[:rank, :rank]
    if matrix.ndim != 2 or matrix.shape != (rank, out_rank):
        raise ContractError(
            f"{where}: expected a matrix of shape ({rank},), ({rank}, {out_rank}) or homogeneous, "
            f"found shape {list(matrix.shape)}"
        )
    return Affine(matrix=matrix.tolist(), offset=per_axis(offset, rank, "offset", where))


def affine_tensor(x: Tensor, matrix: Any, offset: Any, out_shape: tuple[int, ...], where: str) -> Tensor:
    """The coordinates of an affine map whose matrix or offset is a graph tensor."""
    b = x.builder
    shape = (x.ndim, len(out_shape))
    m = b.own(matrix, where) if isinstance(matrix, Tensor) else None
    if m is None:
        arr = constant(matrix, "matrix", where)
        if arr.shape != shape:
            raise ContractError(f"{where}: expected a matrix of shape {shape}, found shape {list(arr.shape)}")
        m = _constant_tensor(b, arr, x.dtype)
    elif m.shape != shape:
        raise ContractError(f"{where}: expected a matrix of shape {shape}, found %{m.name} of shape {list(m.shape)}")
    if isinstance(offset, Tensor):
        off = b.own(offset, where)
        if off.shape != (x.ndim,):
            raise ContractError(f"{where}: expected an offset of shape ({x.ndim},), found shape {list(off.shape)}")
    else:
        off = _constant_tensor(b, np.asarray(per_axis(offset, x.ndim, "offset", where)), x.dtype)
    return resample_dynamic.affine_coordinates(F.cast(m, x.dtype), F.cast(off, x.dtype), out_shape)


def _constant_tensor(b: Any, arr: np.ndarray, dtype: str) -> Tensor:
    """A small constant array as a tensor (a concatenation of scalar constants)."""
    flat = [F.reshape(b.constant(float(v), dtype), (1,)) for v in arr.reshape(-1)]
    return F.reshape(F.concatenate(flat, axis=0), arr.shape)

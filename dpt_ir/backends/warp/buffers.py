"""Warp arrays of the flat buffers C++ launches take, past Warp's per-axis limit too.

A kernel reads only a buffer's data pointer (`units.Unit.casts`), so the array's shape is
bookkeeping for Warp's argument checks: ``(size,)``, or, past `spelling.AXIS_LIMIT` elements,
rows of `spelling.WIDE_ROW` (`spelling.array_shape`; the launch kernel annotates such a
parameter as a 2-D array). Assumes: C-contiguous data of ``size`` elements. Guarantees: an
allocation holds at least ``size`` elements (the last row padded, zeroed); a view of memory
it does not own (`flat_view`) claims no element past ``size`` (its rows are rounded down).
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.backends.warp.spelling import AXIS_LIMIT, WIDE_ROW, array_shape


def flat_zeros(size: int, dtype: Any, device: Any, requires_grad: bool = False) -> wp.array:
    """A zeroed flat buffer of ``size`` elements of Warp ``dtype`` (`array_shape`)."""
    return wp.zeros(array_shape(size), dtype=dtype, device=device, requires_grad=requires_grad)


def flat_view(value: Any, size: int) -> wp.array:
    """The flat kernel view of a C-contiguous NumPy or Warp array of ``size`` elements, sharing
    its memory. Past `AXIS_LIMIT` elements a descriptor of its first ``size // WIDE_ROW`` rows:
    only its pointer reaches a kernel, so nothing reads past the data through it."""
    if isinstance(value, np.ndarray):
        dtype = wp.dtype_from_numpy(value.dtype)
        if size <= AXIS_LIMIT:
            return wp.array(value.reshape(-1), dtype=dtype, device="cpu", copy=False)
        return wp.array(ptr=value.ctypes.data, shape=(size // WIDE_ROW, WIDE_ROW), dtype=dtype, device="cpu")
    if size <= AXIS_LIMIT:
        return value.reshape((size,)) if value.ndim != 1 or value.shape[0] != size else value
    return wp.array(ptr=value.ptr, shape=(size // WIDE_ROW, WIDE_ROW), dtype=value.dtype, device=value.device)


def shaped_view(flat: wp.array, shape: tuple[int, ...]) -> wp.array:
    """``flat`` (a `flat_zeros` buffer) in ``shape``: itself reshaped, or, past `AXIS_LIMIT`
    elements, a view of its first elements when every axis fits a Warp array (the caller
    keeps ``flat``: the view does not own the memory), else ``flat`` itself."""
    size = math.prod(shape)
    if size <= AXIS_LIMIT:
        return flat.reshape(shape)
    if max(shape) > AXIS_LIMIT:
        return flat
    return wp.array(ptr=flat.ptr, shape=shape, dtype=flat.dtype, device=flat.device)


def host_view(flat: wp.array, shape: tuple[int, ...]) -> np.ndarray:
    """The NumPy view of a CPU `flat_zeros` buffer in ``shape`` (its padding cut off)."""
    return flat.numpy().reshape(-1)[: math.prod(shape)].reshape(shape)


def copy_into(dst: wp.array, src: Any, size: int) -> None:
    """Copy the ``size`` elements of ``src`` (a C-contiguous NumPy array, or a `wp.array`)
    into the flat buffer ``dst``; past `AXIS_LIMIT` elements in 1-D pieces of at most that
    many (Warp copies a range of 1-D arrays only)."""
    if size <= AXIS_LIMIT:
        wp.copy(dst, flat_view(src, size))
        return
    host = isinstance(src, np.ndarray)
    device = "cpu" if host else src.device
    step = wp._src.types.type_size_in_bytes(dst.dtype)
    base = src.ctypes.data if host else src.ptr
    for start in range(0, size, AXIS_LIMIT):
        n = min(AXIS_LIMIT, size - start)
        piece = wp.array(ptr=base + start * step, shape=(n,), dtype=dst.dtype, device=device)
        wp.copy(wp.array(ptr=dst.ptr + start * step, shape=(n,), dtype=dst.dtype, device=dst.device), piece)

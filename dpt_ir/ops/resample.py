"""Resampling family: interpolation / projection with a compile-time constant geometry
and its adjoint (the spline prefilter ops are in `dpt_ir.ops.spline_filter`).

- ``resample(x; geometry, ...)``: ``A @ x`` plus, in the rows with taps that read cval,
  their ``cval * weight`` terms (a select, not ``cval * 0``), the taps of interpolating ``x`` at
  constant coordinates (map_coordinates, an affine map, zoom/shift;
  `dpt_ir.reference.resample_ref`); ``resample_adjoint`` is ``Aᵀ``. Each is the other's derivative
  (cval only shifts the value). skimage's radon is matrix-free, its own family (`dpt_ir.ops.radon`).

Adjoint form: both lower through ``sparse_rows``, a destination-sorted CSR built from the
attributes at compile time; the adjoint's CSR is the forward's transpose sorted by its
own destination (Halide's scatter -> gather conversion), so every output sums its row in
a fixed order: no scatter, no float atomics, bit-identical run to run. The interpreter
sums the same rows in the same order.

The geometry is stored (coordinates, matrix and offset, zoom and shift), not
the CSR: the IR stays small and the CSR is rebuilt deterministically, once per process
and attributes (`_map`).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import Derivative, Linear, OpDef, SparseRows, register_op, without_cval
from dpt_ir.ir.rules import Attrs
from dpt_ir.ir.types import FLOAT_DTYPES, TensorType
from dpt_ir.reference import resample_ref

Mode = Literal["constant", "nearest", "reflect", "mirror", "wrap", "grid-constant", "grid-mirror", "grid-wrap"]
ADJOINT_FORM = "compile-time transposed CSR (an ordered gather; the geometry is constant)"


class Coordinates(Attrs):
    kind: Literal["coordinates"] = "coordinates"
    coordinates: list[Any]  # nested lists: (input ndim, *output shape)


class Affine(Attrs):
    kind: Literal["affine"] = "affine"
    matrix: list[list[float]]  # (input ndim, output ndim)
    offset: list[float]


class ZoomShift(Attrs):
    kind: Literal["zoom_shift"] = "zoom_shift"
    zoom: list[float] | None = None
    shift: list[float] | None = None
    grid_mode: bool = False


Geometry = Annotated[Coordinates | Affine | ZoomShift, Field(discriminator="kind")]


class ResampleAttrs(Attrs):
    """``in_shape``: the interpolated array's shape (padded by ``npad`` per side when the
    prefilter needed scipy's prepadding); ``out_shape``: the result's."""

    geometry: Geometry
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    order: Literal[0, 1, 2, 3, 4, 5] = 3
    mode: Mode = "constant"
    cval: float = 0.0
    npad: int = 0


def check_float(t: TensorType, where: str) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise ContractError(f"{where}: expected a float32 or float64 input, found {t.dtype}")


def coordinates_of(a: ResampleAttrs) -> np.ndarray:
    """The coordinates (input ndim, *out_shape) the geometry samples, in the unpadded input."""
    g = a.geometry
    if isinstance(g, Coordinates):
        return np.asarray(g.coordinates, dtype=np.float64)
    if isinstance(g, Affine):
        return resample_ref.affine_coordinates(np.asarray(g.matrix), np.asarray(g.offset), a.out_shape)
    return resample_ref.zoom_shift_coordinates(a.out_shape, g.zoom, g.shift, g.grid_mode)


@functools.lru_cache(maxsize=32)
def _map(key: str, transpose: bool) -> resample_ref.SparseMap:
    if transpose:
        return _map(key, False).transpose()
    a = ResampleAttrs.model_validate_json(key)
    return resample_ref.coordinate_map(coordinates_of(a), a.in_shape, a.order, a.mode, a.npad)


def sparse_map(a: ResampleAttrs, transpose: bool = False) -> resample_ref.SparseMap:
    """The (cached) CSR of ``resample`` with attributes ``a``, or of its adjoint (cval is
    not part of the linear map, so it is left out of the cache key)."""
    return _map(ResampleAttrs.model_validate(_linear_part(a)).model_dump_json(), transpose)


def _linear_part(a: ResampleAttrs) -> dict[str, Any]:
    return {**a.model_dump(), "cval": 0.0}


def _check_shape(t: TensorType, shape: tuple[int, ...], what: str, where: str) -> None:
    if t.shape != tuple(shape):
        raise ContractError(f"{where}: expected {what} of shape {list(shape)}, found {list(t.shape)}")


def _infer_resample(inputs: tuple[TensorType, ...], a: ResampleAttrs, where: str) -> TensorType:
    (x,) = inputs
    check_float(x, where)
    _check_shape(x, a.in_shape, "an input", where)
    return TensorType(shape=a.out_shape, dtype=x.dtype)


def _infer_resample_adjoint(inputs: tuple[TensorType, ...], a: ResampleAttrs, where: str) -> TensorType:
    (g,) = inputs
    check_float(g, where)
    _check_shape(g, a.out_shape, "a cotangent", where)
    return TensorType(shape=a.in_shape, dtype=g.dtype)


def _resample_ref(a: ResampleAttrs, x: np.ndarray) -> np.ndarray:
    return sparse_map(a).apply(x, a.cval).reshape(a.out_shape).astype(x.dtype)


def _resample_adjoint_ref(a: ResampleAttrs, g: np.ndarray) -> np.ndarray:
    return sparse_map(a, transpose=True).apply(g).reshape(a.in_shape).astype(g.dtype)


def _resample_rows(a: ResampleAttrs, shape: tuple[int, ...]) -> SparseRows:
    m = sparse_map(a)
    return SparseRows(m.rowptr, m.cols, m.vals, m.bias(a.cval))


def _resample_adjoint_rows(a: ResampleAttrs, shape: tuple[int, ...]) -> SparseRows:
    m = sparse_map(a, transpose=True)
    return SparseRows(m.rowptr, m.cols, m.vals, None)


register_op(
    OpDef(
        name="resample",
        kind="stencil",
        arity=1,
        attrs=ResampleAttrs,
        infer=_infer_resample,
        reference=_resample_ref,
        derivative=Derivative({0: lambda c: c.gy.builder.emit("resample_adjoint", [c.gy], _linear_part(c.attrs))}),
        linear=Linear(((0,),), without_cval),
        sparse_rows=_resample_rows,
        reads_per_element=lambda a, shape: max(sparse_map(a).max_row(), 1),
        doc="interpolation / projection with a constant geometry: A @ x + cval terms (a destination-sorted CSR)",
    )
)
register_op(
    OpDef(
        name="resample_adjoint",
        kind="stencil",
        arity=1,
        attrs=ResampleAttrs,
        infer=_infer_resample_adjoint,
        reference=_resample_adjoint_ref,
        derivative=Derivative({0: lambda c: c.gy.builder.emit("resample", [c.gy], _linear_part(c.attrs))}),
        linear=Linear(((0,),), without_cval),
        sparse_rows=_resample_adjoint_rows,
        reads_per_element=lambda a, shape: max(sparse_map(a, transpose=True).max_row(), 1),
        doc=f"the transpose of resample's linear part; adjoint form: {ADJOINT_FORM}",
    )
)

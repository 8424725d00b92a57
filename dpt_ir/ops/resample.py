"""Resampling family: the cubic spline prefilter along one axis and its adjoint, and
interpolation / projection with a compile-time constant geometry and its adjoint.

- ``spline_filter1d(x; axis, mode)``: scipy.ndimage's cubic B-spline prefilter along
  ``axis`` (`dpt_ir.spline_ref`); ``spline_filter1d_adjoint`` is its transpose (the
  recursion's steps transposed in reverse order). Each is the other's derivative.
- ``resample(x; geometry, ...)``: ``A @ x + cval * b``, the taps of interpolating ``x`` at
  constant coordinates (map_coordinates, an affine map, zoom/shift) or of skimage's radon
  (`dpt_ir.resample_ref`, `dpt_ir.radon_ref`); ``resample_adjoint`` is ``Aᵀ``. Each is the
  other's derivative (cval only shifts the value).

Adjoint form: all four lower through ``warp_sparse``, a destination-sorted CSR built
from the attributes at compile time; the adjoint's CSR is the forward's transpose sorted
by its own destination (Halide's scatter -> gather conversion), so every output sums its
row in a fixed order: no scatter, no float atomics, bit-identical run to run. The
filters lower as their line matrix (the exact transposed-recursion matrix for the
adjoint), without the entries below `FILTER_DROP` of the row's largest (they are below
float64 resolution); the interpreter runs the recursions themselves.

The geometry is stored (coordinates, matrix and offset, zoom and shift, or angles), not
the CSR: the IR stays small and the CSR is rebuilt deterministically, once per process
and attributes (`_map`).
"""

from __future__ import annotations

import functools
from typing import Annotated, Any, Literal

import numpy as np
from pydantic import Field

from dpt_ir import radon_ref, resample_ref
from dpt_ir import spline_ref as spline
from dpt_ir.errors import ContractError
from dpt_ir.ops.registry import Derivative, GradContext, OpDef, SparseRows, register_op
from dpt_ir.ops.rules import Attrs
from dpt_ir.types import FLOAT_DTYPES, TensorType

Mode = Literal["constant", "nearest", "reflect", "mirror", "wrap", "grid-constant", "grid-mirror", "grid-wrap"]
FILTER_DROP = 2.0**-60
ADJOINT_FORM = "compile-time transposed CSR (an ordered gather; the geometry is constant)"


class FilterAttrs(Attrs):
    """``npad`` > 0 first extends the axis by ``npad`` per side (``nearest``: edge values;
    ``grid-constant``: ``cval``), scipy's prepadding before the filter."""

    axis: int
    mode: Mode = "mirror"
    npad: int = 0
    cval: float = 0.0


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


class Radon(Attrs):
    kind: Literal["radon"] = "radon"
    theta: list[float]
    circle: bool = True


Geometry = Annotated[Coordinates | Affine | ZoomShift | Radon, Field(discriminator="kind")]


class ResampleAttrs(Attrs):
    """``in_shape``: the interpolated array's shape (padded by ``npad`` per side when the
    prefilter needed scipy's prepadding); ``out_shape``: the result's."""

    geometry: Geometry
    in_shape: tuple[int, ...]
    out_shape: tuple[int, ...]
    order: Literal[0, 1, 3] = 3
    mode: Mode = "constant"
    cval: float = 0.0
    npad: int = 0


def _check_float(t: TensorType, where: str) -> None:
    if t.dtype not in FLOAT_DTYPES:
        raise ContractError(f"{where}: expected a float32 or float64 input, found {t.dtype}")


def _infer_filter(inputs: tuple[TensorType, ...], a: FilterAttrs, where: str, sign: int = 1) -> TensorType:
    (x,) = inputs
    _check_float(x, where)
    if not 0 <= a.axis < x.ndim:
        raise ContractError(f"{where}: axis must be in [0, {x.ndim}), found {a.axis}")
    if a.npad < 0 or (a.npad and a.mode not in ("nearest", "grid-constant")):
        raise ContractError(f"{where}: npad must be 0, or > 0 under nearest / grid-constant, found {a.npad}")
    shape = list(x.shape)
    shape[a.axis] += sign * 2 * a.npad
    if shape[a.axis] < 1:
        raise ContractError(f"{where}: a cotangent axis of {x.shape[a.axis]} cannot lose 2 x {a.npad} padding")
    return TensorType(shape=tuple(shape), dtype=x.dtype)


def _embedding(n: int, npad: int, mode: str) -> np.ndarray:
    """The (n + 2 npad, n) matrix of the prepadding (edge copies under nearest, zeros else)."""
    e = np.zeros((n + 2 * npad, n))
    e[npad : npad + n] = np.eye(n)
    if npad and mode == "nearest":
        e[:npad, 0] = 1.0
        e[npad + n :, n - 1] = 1.0
    return e


@functools.lru_cache(maxsize=64)
def _filter_matrix(n: int, mode: str, npad: int, adjoint: bool) -> tuple[np.ndarray, np.ndarray]:
    """The line matrix of pad-then-filter (its transpose when ``adjoint``, built from the
    transposed recursion), and the forward's response to ``cval = 1``."""
    e = _embedding(n, npad, mode)
    forward = spline.filter_matrix(n + 2 * npad, mode)
    m = e.T @ spline.filter_matrix(n + 2 * npad, mode, adjoint=True) if adjoint else forward @ e
    unit = forward @ (1.0 - e.sum(axis=1)) if mode == "grid-constant" else np.zeros(n + 2 * npad)
    return m, unit


def _filter_rows(a: FilterAttrs, n: int, adjoint: bool) -> SparseRows:
    m, unit = _filter_matrix(n, a.mode, a.npad, adjoint)
    keep = np.abs(m) >= FILTER_DROP * np.abs(m).max(axis=1, keepdims=True)
    rows, cols = np.nonzero(keep)
    rowptr = np.searchsorted(rows, np.arange(m.shape[0] + 1))
    bias = a.cval * unit if not adjoint and a.cval != 0.0 and bool(unit.any()) else None
    return SparseRows(rowptr, cols, m[rows, cols], bias, a.axis)


def _pad_line(x: np.ndarray, a: FilterAttrs) -> np.ndarray:
    widths = [(a.npad, a.npad) if k == a.axis else (0, 0) for k in range(x.ndim)]
    if a.mode == "nearest":
        return np.pad(x, widths, mode="edge")
    return np.pad(x, widths, constant_values=a.cval)


def _fold_line(g: np.ndarray, a: FilterAttrs) -> np.ndarray:
    """The transpose of `_pad_line`'s linear part: edge copies summed back, zeros dropped."""
    g = np.moveaxis(g, a.axis, -1)
    n = g.shape[-1] - 2 * a.npad
    out = g[..., a.npad : a.npad + n].copy()
    if a.mode == "nearest":
        out[..., 0] += g[..., : a.npad].sum(axis=-1)
        out[..., n - 1] += g[..., a.npad + n :].sum(axis=-1)
    return np.moveaxis(out, -1, a.axis)


def _filter_op(name: str, adjoint: bool, partner: str, doc: str) -> OpDef:
    def reference(a: FilterAttrs, x: np.ndarray) -> np.ndarray:
        if adjoint:
            out = spline.spline_filter1d_adjoint(x, a.axis, a.mode)
            return (_fold_line(out, a) if a.npad else out).astype(x.dtype)
        padded = _pad_line(np.asarray(x, np.float64), a) if a.npad else x
        return spline.spline_filter1d(padded, a.axis, a.mode).astype(x.dtype)

    def grad(c: GradContext) -> Any:
        return c.gy.builder.emit(partner, [c.gy], {**c.attrs.model_dump(), "cval": 0.0})

    def rows(a: FilterAttrs, shape: tuple[int, ...]) -> SparseRows:
        # the unpadded line length: the adjoint's output, the forward's output less the padding
        return _filter_rows(a, shape[a.axis] if adjoint else shape[a.axis] - 2 * a.npad, adjoint)

    def infer(inputs: tuple[TensorType, ...], a: FilterAttrs, where: str) -> TensorType:
        return _infer_filter(inputs, a, where, -1 if adjoint else 1)

    return OpDef(
        name=name,
        kind="stencil",
        arity=1,
        attrs=FilterAttrs,
        infer=infer,
        reference=reference,
        derivative=Derivative({0: grad}),
        warp_sparse=rows,
        reads_per_element=lambda a, shape: int(np.diff(rows(a, shape).rowptr).max()),
        doc=doc,
    )


register_op(
    _filter_op(
        "spline_filter1d",
        False,
        "spline_filter1d_adjoint",
        "scipy.ndimage's cubic spline prefilter along axis (causal + anti-causal recursion, per-mode "
        "initialisation), after npad elements of prepadding per side",
    )
)
register_op(
    _filter_op(
        "spline_filter1d_adjoint",
        True,
        "spline_filter1d",
        f"the transpose of spline_filter1d (the transposed recursion, then the prepadding folded back); "
        f"adjoint form: {ADJOINT_FORM}",
    )
)


def coordinates_of(a: ResampleAttrs) -> np.ndarray:
    """The coordinates (input ndim, *out_shape) the geometry samples, in the unpadded input."""
    g = a.geometry
    if isinstance(g, Coordinates):
        return np.asarray(g.coordinates, dtype=np.float64)
    if isinstance(g, Affine):
        return resample_ref.affine_coordinates(np.asarray(g.matrix), np.asarray(g.offset), a.out_shape)
    if isinstance(g, ZoomShift):
        return resample_ref.zoom_shift_coordinates(a.out_shape, g.zoom, g.shift, g.grid_mode)
    raise TypeError(f"no coordinates for geometry {g.kind!r}")


@functools.lru_cache(maxsize=32)
def _map(key: str, transpose: bool) -> resample_ref.SparseMap:
    if transpose:
        return _map(key, False).transpose()
    a = ResampleAttrs.model_validate_json(key)
    if isinstance(a.geometry, Radon):
        return radon_ref.radon_map(a.in_shape, a.geometry.theta, a.geometry.circle)  # type: ignore[arg-type]
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
    _check_float(x, where)
    _check_shape(x, a.in_shape, "an input", where)
    return TensorType(shape=a.out_shape, dtype=x.dtype)


def _infer_resample_adjoint(inputs: tuple[TensorType, ...], a: ResampleAttrs, where: str) -> TensorType:
    (g,) = inputs
    _check_float(g, where)
    _check_shape(g, a.out_shape, "a cotangent", where)
    return TensorType(shape=a.in_shape, dtype=g.dtype)


def _resample_ref(a: ResampleAttrs, x: np.ndarray) -> np.ndarray:
    return sparse_map(a).apply(x, a.cval).reshape(a.out_shape).astype(x.dtype)


def _resample_adjoint_ref(a: ResampleAttrs, g: np.ndarray) -> np.ndarray:
    return sparse_map(a, transpose=True).apply(g).reshape(a.in_shape).astype(g.dtype)


def _resample_rows(a: ResampleAttrs, shape: tuple[int, ...]) -> SparseRows:
    m = sparse_map(a)
    bias = a.cval * m.bias if a.cval != 0.0 and bool(m.bias.any()) else None
    return SparseRows(m.rowptr, m.cols, m.vals, bias, None)


def _resample_adjoint_rows(a: ResampleAttrs, shape: tuple[int, ...]) -> SparseRows:
    m = sparse_map(a, transpose=True)
    return SparseRows(m.rowptr, m.cols, m.vals, None, None)


register_op(
    OpDef(
        name="resample",
        kind="stencil",
        arity=1,
        attrs=ResampleAttrs,
        infer=_infer_resample,
        reference=_resample_ref,
        derivative=Derivative({0: lambda c: c.gy.builder.emit("resample_adjoint", [c.gy], _linear_part(c.attrs))}),
        warp_sparse=_resample_rows,
        reads_per_element=lambda a, shape: max(sparse_map(a).max_row(), 1),
        doc="interpolation / projection with a constant geometry: A @ x + cval * b (a destination-sorted CSR)",
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
        warp_sparse=_resample_adjoint_rows,
        reads_per_element=lambda a, shape: max(sparse_map(a, transpose=True).max_row(), 1),
        doc=f"the transpose of resample's linear part; adjoint form: {ADJOINT_FORM}",
    )
)

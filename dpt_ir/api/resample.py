"""Interpolation and projection with scipy.ndimage / scikit-image names, signatures and defaults.

``dp.map_coordinates``, ``dp.affine_transform``, ``dp.shift``, ``dp.zoom``, ``dp.rotate``,
``dp.spline_filter1d``, ``dp.spline_filter`` and ``dp.radon`` build nodes of the resampling
family (`dpt_ir.ops.resample`) exactly as scipy composes them: for ``order=3`` with
``prefilter``, the input is first extended by 12 elements per side under ``nearest`` and
``grid-constant`` (scipy's ``_prepad_for_spline_filter``), then spline-filtered along every
axis, then interpolated. Orders 0 to 5; every mode; ``cval``.

Assumes the geometry is a compile-time constant (coordinates as an array, not a graph
tensor; a constant matrix, offset, shift, zoom, angle or theta): it is stored in the node
and becomes a constant sparse map whose adjoint is its compile-time transpose. scipy's
``output=`` argument does not apply (results are new tensors); ``rotate`` takes 2-D inputs.
Every mistake is a `ContractError` naming the function, its input, what was expected and
what was found.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.api import resample_args as A
from dpt_ir.api import resample_dynamic
from dpt_ir.ir.builder import Tensor, records_origin
from dpt_ir.ir.errors import ContractError
from dpt_ir.ops.resample import Affine, Coordinates, ZoomShift
from dpt_ir.reference import resample_ref as R
from dpt_ir.reference.radon_ref import radon_shape


def _interpolate(
    x: Tensor, geometry: Any, out_shape: Sequence[int], order: int, mode: str, cval: float, prefilter: bool
) -> Tensor:
    """prepad (nearest, grid-constant) -> spline filter per axis -> resample, as scipy does;
    ``geometry`` a coordinate tensor: the data-dependent composite (`resample_dynamic`).
    An empty input has nothing to filter: every output point is ``cval``."""
    npad = 0
    if prefilter and order > 1 and math.prod(x.shape) > 0:
        # Padding axis by axis, each just before its own filter, equals scipy's padding of
        # every axis first: the filter along one axis maps the edge copies (nearest) and the
        # constant lines (grid-constant, whose filter reproduces constants) of the others to
        # the same copies and constants.
        npad = R.PREPAD if mode in ("nearest", "grid-constant") else 0
        # scipy's recursive filter carries a NaN or an infinity through every line it
        # crosses, axis after axis, so every interpolated point reads NaN; the filter's
        # rows stop ~30 samples out. sum(0 * x) is 0, or NaN where any value is not
        # finite; grid-constant pads with cval, so a non-finite cval does the same.
        poison = F.sum(x * 0.0)
        if mode == "grid-constant" and not math.isfinite(cval):
            poison = poison + math.nan
        x = x + poison
        for axis in range(x.ndim):
            attrs = {"axis": axis, "mode": mode, "npad": npad, "cval": float(cval), "order": order}
            x = x.builder.emit("spline_filter1d", [x], attrs)
    if isinstance(geometry, Tensor):
        if math.prod(x.shape) == 0:  # nothing to read: every point is cval (`A.check_empty`)
            return x.builder.constant(float(cval), x.dtype, tuple(out_shape))
        return resample_dynamic.interpolate_at(x, geometry, order, mode, cval, npad)
    attrs = {
        "geometry": geometry.model_dump(),
        "in_shape": list(x.shape),
        "out_shape": [int(n) for n in out_shape],
        "order": order,
        "mode": mode,
        "cval": float(cval),
        "npad": npad,
    }
    return x.builder.emit("resample", [x], attrs)


@records_origin
def map_coordinates(
    input: Tensor, coordinates: Any, order: int = 3, mode: str = "constant", cval: float = 0.0, prefilter: bool = True
) -> Tensor:
    """``scipy.ndimage.map_coordinates``: ``input`` sampled at ``coordinates`` (shape
    ``(input.ndim, *output_shape)``): a constant array (a constant sparse map), or a float
    graph tensor (differentiable wrt the coordinates too)."""
    where = A.where_of("map_coordinates", input)
    x = A.image(input, where)
    A.check(order, mode, where, cval)
    if isinstance(coordinates, Tensor):
        c = x.builder.own(coordinates, where)
        if c.ndim < 2 or c.shape[0] != x.ndim or c.dtype not in ("float32", "float64"):
            raise ContractError(
                f"{where}: expected float coordinates of shape ({x.ndim}, *output_shape), "
                f"found %{c.name} of shape {list(c.shape)} and dtype {c.dtype}"
            )
        A.check_empty(x, mode, c.shape[1:], where)
        return _interpolate(x, F.cast(c, x.dtype), c.shape[1:], order, mode, cval, prefilter)
    c = A.constant(coordinates, "coordinates", where)
    if c.ndim < 2 or c.shape[0] != x.ndim:
        raise ContractError(
            f"{where}: expected coordinates of shape ({x.ndim}, *output_shape) for an input of rank {x.ndim}, "
            f"found shape {list(c.shape)}"
        )
    A.check_empty(x, mode, c.shape[1:], where)
    return _interpolate(x, Coordinates(coordinates=c.tolist()), c.shape[1:], order, mode, cval, prefilter)


@records_origin
def affine_transform(
    input: Tensor,
    matrix: Any,
    offset: Any = 0.0,
    output_shape: Sequence[int] | None = None,
    order: int = 3,
    mode: str = "constant",
    cval: float = 0.0,
    prefilter: bool = True,
) -> Tensor:
    """``scipy.ndimage.affine_transform``: output ``o`` samples ``input`` at ``matrix @ o + offset``.
    ``matrix`` (shape ``(ndim, ndim)``) and ``offset`` may be graph tensors (differentiable)."""
    where = A.where_of("affine_transform", input)
    x = A.image(input, where)
    A.check(order, mode, where, cval)
    out_shape = tuple(int(n) for n in (x.shape if output_shape is None else output_shape))
    A.check_empty(x, mode, out_shape, where)
    if isinstance(matrix, Tensor) or isinstance(offset, Tensor):
        coords = A.affine_tensor(x, matrix, offset, out_shape, where)
        return _interpolate(x, coords, out_shape, order, mode, cval, prefilter)
    geometry = A.affine_geometry(A.constant(matrix, "matrix", where), offset, x.ndim, len(out_shape), where)
    return _interpolate(x, geometry, out_shape, order, mode, cval, prefilter)


@records_origin
def shift(
    input: Tensor, shift: Any, order: int = 3, mode: str = "constant", cval: float = 0.0, prefilter: bool = True
) -> Tensor:
    """``scipy.ndimage.shift``: output ``o`` samples ``input`` at ``o - shift``."""
    where = A.where_of("shift", input)
    x = A.image(input, where)
    A.check(order, mode, where, cval)
    s = A.per_axis(shift, x.ndim, "shift", where)
    return _interpolate(x, ZoomShift(shift=[-v for v in s]), x.shape, order, mode, cval, prefilter)


@records_origin
def zoom(
    input: Tensor,
    zoom: Any,
    order: int = 3,
    mode: str = "constant",
    cval: float = 0.0,
    prefilter: bool = True,
    *,
    grid_mode: bool = False,
) -> Tensor:
    """``scipy.ndimage.zoom``: output shape ``round(shape * zoom)``, factors from the shapes.
    A zoom of exactly 1 on every axis (with ``prefilter``) is the input, bit for bit, as
    scipy's early exit; with ``prefilter=False`` it interpolates, as scipy does."""
    where = A.where_of("zoom", input)
    x = A.image(input, where)
    A.check(order, mode, where, cval)
    factors = A.per_axis(zoom, x.ndim, "zoom", where)
    out_shape = tuple(int(round(n * z)) for n, z in zip(x.shape, factors, strict=True))
    A.check_empty(x, mode, out_shape, where)
    if prefilter and all(z == 1.0 for z in factors):
        return x  # scipy returns the input itself (gh-20999): no filter, no interpolation
    geometry = ZoomShift(zoom=R.zoom_factors(x.shape, out_shape, grid_mode), grid_mode=bool(grid_mode))
    return _interpolate(x, geometry, out_shape, order, mode, cval, prefilter)


@records_origin
def rotate(
    input: Tensor,
    angle: float,
    axes: Sequence[int] = (1, 0),
    reshape: bool = True,
    order: int = 3,
    mode: str = "constant",
    cval: float = 0.0,
    prefilter: bool = True,
) -> Tensor:
    """``scipy.ndimage.rotate`` of a 2-D input by ``angle`` degrees (about its centre)."""
    where = A.where_of("rotate", input)
    x = A.image(input, where)
    A.check(order, mode, where, cval)
    if x.ndim != 2:
        raise ContractError(f"{where}: expected a 2-D input, found rank {x.ndim}")
    if len(axes) != 2 or sorted(int(a) + 2 if int(a) < 0 else int(a) for a in axes) != [0, 1]:
        raise ContractError(f"{where}: expected axes naming both axes of a 2-D input, found {list(axes)}")
    a = float(A.constant(angle, "angle", where))
    matrix, offset, plane = R.rotate_geometry(x.shape, a, bool(reshape))  # type: ignore[arg-type]
    A.check_empty(x, mode, plane, where)
    geometry = Affine(matrix=matrix.tolist(), offset=offset.tolist())
    return _interpolate(x, geometry, plane, order, mode, cval, prefilter)


@records_origin
def spline_filter1d(input: Tensor, order: int = 3, axis: int = -1, mode: str = "mirror") -> Tensor:
    """``scipy.ndimage.spline_filter1d``, orders 0 to 5 (orders 0 and 1 return the input unchanged)."""
    where = A.where_of("spline_filter1d", input)
    x = A.image(input, where)
    A.check(order, mode, where)
    if not -x.ndim <= axis < x.ndim:
        raise ContractError(f"{where}: axis must be in [-{x.ndim}, {x.ndim}), found {axis}")
    if order < 2:
        return x
    return x.builder.emit("spline_filter1d", [x], {"axis": axis % x.ndim, "mode": mode, "order": order})


@records_origin
def spline_filter(input: Tensor, order: int = 3, mode: str = "mirror") -> Tensor:
    """``scipy.ndimage.spline_filter``, orders 0 to 5: the 1-D filter along every axis in turn."""
    x = A.image(input, A.where_of("spline_filter", input))
    for axis in range(x.ndim):
        x = spline_filter1d(x, order, axis, mode)
    return x


@records_origin
def radon(image: Tensor, theta: Any = None, circle: bool = True) -> Tensor:
    """``skimage.transform.radon``: the parallel-beam projections of each 2-D slice of ``image``
    ``(..., H, W)`` at the angles ``theta`` (degrees; default ``arange(180)``), shape
    ``(..., N, len(theta))``; matrix-free, with an exact transpose as gradient."""
    where = A.where_of("radon", image)
    x = A.image(image, where)
    if x.ndim < 2:
        raise ContractError(f"{where}: expected an image of rank >= 2 (..., H, W), found rank {x.ndim}")
    angles = np.arange(180.0) if theta is None else A.constant(theta, "theta", where).reshape(-1)
    if angles.size == 0:
        raise ContractError(f"{where}: expected at least one angle in theta, found none")
    if not isinstance(circle, (bool, np.bool_)):
        raise ContractError(f"{where}: expected circle as a bool, found {circle!r}")
    frame = tuple(x.shape[-2:])
    out_shape = (*x.shape[:-2], *radon_shape(frame, angles.tolist(), bool(circle)))  # type: ignore[arg-type]
    attrs = {"theta": angles.tolist(), "circle": bool(circle), "in_shape": list(x.shape), "out_shape": list(out_shape)}
    return x.builder.emit("radon", [x], attrs)

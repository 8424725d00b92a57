"""Fan-beam projection family: a 2-D fan-beam transform with a flat detector in ASTRA Toolbox's
``fanflat`` geometry, matrix-free, and its exact transpose (kind ``projection``).

- ``fanbeam(x; angles, source_origin, origin_det, det_count, det_width, in_shape)``: each slice
  ``(H, W)`` of ``x`` ``(..., H, W)`` to its sinogram ``(len(angles), det_count)``: line
  integrals with exact pixel lengths (ASTRA's ``line_fanflat`` weights);
- ``fanbeam_adjoint(g; ...)``: the transpose, sinogram stack to image stack.

Each is the other's derivative and both are linear. Their lowering is a program, not a
table: `dpt_ir.ir.fanbeam.FanBeam` (4 floats per line), which the NumPy reference
(`dpt_ir.reference.fanbeam_ref`) and the C++ kernels (`dpt_ir.backends.cxx.fanbeam`) evaluate
with the same float64 expressions per tap. Adjoint form: an ordered sum per pixel (no scatter
across tasks, no atomics), set-up independent of the image size.
"""

from __future__ import annotations

import math

import numpy as np

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.fanbeam import FanBeam, covering_radius, ray_table
from dpt_ir.ir.rules import Attrs
from dpt_ir.ir.types import TensorType
from dpt_ir.ops.radon import check_stack, register_projection_pair
from dpt_ir.reference import fanbeam_ref

ADJOINT_FORM = "matrix-free transpose: per pixel row band, the taps of each line in a fixed order (no atomics)"


class FanBeamAttrs(Attrs):
    """ASTRA's ``fanflat`` geometry (angles in radians, lengths in pixels) and the image stack's
    shape ``in_shape`` ``(..., H, W)``."""

    angles: list[float]
    source_origin: float
    origin_det: float
    det_count: int
    det_width: float = 1.0
    in_shape: tuple[int, ...]


def check_geometry(a: FanBeamAttrs, where: str) -> None:
    """ContractError naming the argument of a geometry the projector cannot take."""
    if len(a.in_shape) < 2:
        raise ContractError(f"{where}: expected an image of rank >= 2 (..., H, W), found shape {list(a.in_shape)}")
    if not a.angles or not all(math.isfinite(t) for t in a.angles):
        raise ContractError(f"{where}: expected at least one finite angle in angles, found {a.angles[:4]}")
    if a.det_count < 1:
        raise ContractError(f"{where}: expected det_count >= 1 detectors, found {a.det_count}")
    if not (math.isfinite(a.det_width) and a.det_width > 0):
        raise ContractError(f"{where}: expected a positive finite det_width (detector spacing), found {a.det_width}")
    radius = covering_radius(a.in_shape[-2:])  # type: ignore[arg-type]
    if not (math.isfinite(a.source_origin) and a.source_origin > radius):
        raise ContractError(
            f"{where}: expected source_origin > {radius:.6g} (the source outside the image's covering circle, "
            f"the image being {a.in_shape[-2]} x {a.in_shape[-1]} pixels), found {a.source_origin}"
        )
    if not (math.isfinite(a.origin_det) and a.origin_det >= 0):
        raise ContractError(f"{where}: expected a finite origin_det >= 0, found {a.origin_det}")


def out_shape(a: FanBeamAttrs) -> tuple[int, ...]:
    return (*a.in_shape[:-2], len(a.angles), a.det_count)


def program(a: FanBeamAttrs, adjoint: bool) -> FanBeam:
    """The projection program of attributes ``a`` (``adjoint``: its transpose)."""
    h, w = a.in_shape[-2:]
    table = ray_table((h, w), a.angles, a.source_origin, a.origin_det, a.det_count, a.det_width)
    return FanBeam(math.prod(a.in_shape[:-2]), h, w, len(a.angles), a.det_count, table, adjoint)


def _infer(inputs: tuple[TensorType, ...], a: FanBeamAttrs, where: str) -> TensorType:
    check_geometry(a, where)
    (x,) = inputs
    check_stack(x, a.in_shape, "an image stack", where)
    return TensorType(shape=out_shape(a), dtype=x.dtype)


def _infer_adjoint(inputs: tuple[TensorType, ...], a: FanBeamAttrs, where: str) -> TensorType:
    check_geometry(a, where)
    (g,) = inputs
    check_stack(g, out_shape(a), "a sinogram stack", where)
    return TensorType(shape=a.in_shape, dtype=g.dtype)


def _reference(a: FanBeamAttrs, x: np.ndarray) -> np.ndarray:
    return fanbeam_ref.fanbeam_apply(x, program(a, False)).astype(x.dtype)


def _reference_adjoint(a: FanBeamAttrs, g: np.ndarray) -> np.ndarray:
    return fanbeam_ref.fanbeam_adjoint_apply(g, program(a, True)).astype(g.dtype)


register_projection_pair(
    "fanbeam",
    FanBeamAttrs,
    (_infer, _infer_adjoint),
    (_reference, _reference_adjoint),
    program,
    "fan-beam line integrals of each (H, W) slice (ASTRA fanflat geometry, exact pixel lengths), matrix-free",
    ADJOINT_FORM,
)

"""``dp.fanbeam``: 2-D fan-beam projections with a flat detector, in ASTRA Toolbox's ``fanflat``
geometry (`dpt_ir.ops.fanbeam`).

Assumes the geometry is a compile-time constant (angles as an array, not a graph tensor).
Every mistake is a `ContractError` naming the argument, what was expected and what was found.
"""

from __future__ import annotations

import operator
from typing import Any

from dpt_ir.api import resample_args as A
from dpt_ir.ir.builder import Tensor, records_origin
from dpt_ir.ir.errors import ContractError
from dpt_ir.ops.fanbeam import FanBeamAttrs, check_geometry


def _number(value: Any, what: str, where: str) -> float:
    try:
        out = float(value)
    except (TypeError, ValueError):
        raise ContractError(f"{where}: expected {what} as a number, found {value!r}") from None
    return out


@records_origin
def fanbeam(
    image: Tensor, angles: Any, source_origin: float, origin_det: float, det_count: int, det_width: float = 1.0
) -> Tensor:
    """Fan-beam projections of each 2-D slice of ``image`` ``(..., H, W)``, shape
    ``(..., len(angles), det_count)``: ASTRA's ``create_proj_geom('fanflat', det_width, det_count,
    angles, source_origin, origin_det)`` with a volume of ``H`` rows and ``W`` columns of unit
    pixels (angles in radians; lengths in pixels). Each value is the line integral from the
    source through a detector's centre with exact pixel lengths (ASTRA's ``line_fanflat``
    weights), matrix-free, with its exact transpose as gradient. The source must lie outside
    the image's covering circle; the detector may cross the image (a virtual detector)."""
    where = A.where_of("fanbeam", image)
    x = A.image(image, where)
    if x.ndim < 2:
        raise ContractError(f"{where}: expected an image of rank >= 2 (..., H, W), found rank {x.ndim}")
    theta = A.constant(angles, "angles", where).reshape(-1)
    try:
        count = operator.index(det_count)
    except TypeError:
        raise ContractError(f"{where}: expected det_count as an int, found {det_count!r}") from None
    attrs = FanBeamAttrs(
        angles=theta.tolist(),
        source_origin=_number(source_origin, "source_origin", where),
        origin_det=_number(origin_det, "origin_det", where),
        det_count=count,
        det_width=_number(det_width, "det_width", where),
        in_shape=tuple(x.shape),
    )
    check_geometry(attrs, where)
    return x.builder.emit("fanbeam", [x], attrs.model_dump())

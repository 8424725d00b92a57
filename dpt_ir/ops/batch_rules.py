"""Batch rules of the op table (`OpDef.batch_attrs`): an op's attributes applied to one element
of a leading batch axis.

Assumes: the caller (`dpt_ir.passes.loop_batches`) asks only for a node whose input 0 (or, for a
source, whose output) holds a leading batch axis of extent ``B`` = ``out_shape[0]``, in the
shapes the node has now. Guarantees: each rule returns the attributes (a JSON-able mapping) under
which the op, given batch-1 inputs, computes the output's batch-1 slice, and reads nothing at
another batch index to do so; None where an output element would read another batch index (a
sum over the batch axis, a slice or pad or stencil tap along it, a reshape that merges it). Every
other axis is left as it is.
"""

from __future__ import annotations

from typing import Any

import numpy as np

Shapes = tuple[tuple[int, ...], ...]


def first_kept(attrs: Any, in_shapes: Shapes, out_shape: tuple[int, ...]) -> dict[str, Any] | None:
    """Views and reductions whose attributes list axes (squeeze, expand_dims, reductions): the
    batch axis stays axis 0 when it is not among them (a negative axis that may name it counts
    as naming it); the attributes are unchanged."""
    first = {0, -len(in_shapes[0]), -len(out_shape)}
    return None if first & set(attrs.axes) else attrs.model_dump(mode="json")


def first_in_place(attrs: Any, in_shapes: Shapes, out_shape: tuple[int, ...]) -> dict[str, Any] | None:
    """transpose: the batch axis must stay first."""
    return attrs.model_dump(mode="json") if attrs.axes and attrs.axes[0] % len(out_shape) == 0 else None


def leading_shape(attrs: Any, in_shapes: Shapes, out_shape: tuple[int, ...]) -> dict[str, Any] | None:
    """broadcast_to and reshape: the target shape's leading extent becomes 1. A reshape must keep
    its input's leading axis as its own (row-major: each batch element's block is then reshaped
    on its own); a broadcast reads each batch element's own input, or one input shared by all."""
    if not attrs.shape or attrs.shape[0] != out_shape[0]:
        return None
    (x,) = in_shapes
    shared = len(x) < len(attrs.shape) or x[0] == 1
    if not shared and x[0] != attrs.shape[0]:
        return None
    return {**attrs.model_dump(mode="json"), "shape": [1, *attrs.shape[1:]]}


def whole_first_axis(attrs: Any, in_shapes: Shapes, out_shape: tuple[int, ...]) -> dict[str, Any] | None:
    """slice: the batch axis must be taken whole, in order."""
    (x,) = in_shapes
    if attrs.starts[0] != 0 or attrs.steps[0] != 1 or attrs.stops[0] < x[0]:
        return None
    doc = attrs.model_dump(mode="json")
    return {**doc, "stops": [1, *doc["stops"][1:]]}


def unpadded_first_axis(attrs: Any, in_shapes: Shapes, out_shape: tuple[int, ...]) -> dict[str, Any] | None:
    """pad and pad_adjoint: nothing added or folded along the batch axis."""
    return attrs.model_dump(mode="json") if attrs.before[0] == 0 and attrs.after[0] == 0 else None


def flat_first_tap(weights: Any) -> Any:
    """correlate_valid: the rule for weights given by ``weights(attrs)``: one tap along the batch axis."""

    def rule(attrs: Any, in_shapes: Shapes, out_shape: tuple[int, ...]) -> dict[str, Any] | None:
        return attrs.model_dump(mode="json") if np.shape(weights(attrs))[0] == 1 else None

    return rule


def other_axis(attrs: Any, in_shapes: Shapes, out_shape: tuple[int, ...]) -> dict[str, Any] | None:
    """concat: joined along another axis than the batch axis."""
    return attrs.model_dump(mode="json") if attrs.axis % len(out_shape) != 0 else None

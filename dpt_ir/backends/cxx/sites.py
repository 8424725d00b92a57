"""Where the members of a covered group are evaluated: coordinate maps through layout views.

Assumes: a loop space (the group's iteration space, or an epilogue's output shape) whose
element has coordinates ``c``; elementwise members read their inputs NumPy-aligned, layout
views (``OpDef.view_affine``) map their output coordinates to their input's as `Affine`
forms. Guarantees: `walk` visits every (value, coordinates) a set of seeds needs,
iteratively, and returns the memory reads as (value, flat offset form); a value is
identified by its flat offset (two maps with one offset are the same element: a
layout-preserving reshape of a member is an alias, not a second evaluation). A walk fails
(None) when a view is not affine there or a member is needed where it cannot be computed.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpt_ir.graph import Graph, Node
from dpt_ir.ops import indexing as idx
from dpt_ir.ops.indexing import Affine, Coords

Site = tuple[str, Affine]  # a value and the flat offset of the element read


def identity(shape: Sequence[int], space: Sequence[int]) -> Coords | None:
    """The coordinates at which a value of ``shape`` is read when it NumPy-broadcasts to the
    space's element; None when it does not broadcast to ``space``."""
    n, lead = len(space), len(space) - len(shape)
    if lead < 0 or any(d not in (1, space[lead + k]) for k, d in enumerate(shape)):
        return None
    return tuple(idx.zero(n) if d == 1 else idx.axis(lead + k, n) for k, d in enumerate(shape))


def _canonical(form: Affine, space: Sequence[int]) -> Affine:
    """``form`` with no weight on axes of extent 1 (their coordinate is always 0), so equal
    offsets compare equal."""
    return Affine(form.b, tuple(0 if n == 1 else x for x, n in zip(form.w, space, strict=True)))


def offset(coords: Coords, shape: Sequence[int], space: Sequence[int]) -> Affine:
    """The flat row-major offset of ``coords`` in a value of ``shape``, canonical."""
    return _canonical(idx.flat(coords, shape, len(space)), space)


def flat_index(space: Sequence[int]) -> Affine:
    """The offset of the space's own element (``i`` in a loop, ``o`` in an epilogue)."""
    return _canonical(Affine(0, tuple(idx.strides(space))), space)


def input_coords(graph: Graph, node: Node, k: int, coords: Coords, space: Sequence[int]) -> Coords | None:
    """Coordinates of input ``k`` of ``node`` when ``node`` is evaluated at ``coords``."""
    op, out_shape = node.opdef, tuple(node.type.shape)
    in_shape = tuple(graph.types[node.inputs[k]].shape)
    if op.kind == "elementwise":
        return idx.aligned_coords(coords, out_shape, in_shape)
    if op.kind == "shape" and op.arity == 1 and op.view_affine is not None:
        attrs = op.parse_attrs(node.attrs, node.name)
        return op.view_affine(attrs, in_shape, out_shape, coords, tuple(space))
    return None


def walk(
    graph: Graph,
    members: set[str],
    seeds: Sequence[str],
    space: Sequence[int],
    terminals: frozenset[str] = frozenset(),
) -> list[Site] | None:
    """The memory reads of evaluating ``seeds`` at the space's element, in first-visit order:
    values outside ``members`` are read; ``terminals`` (finished reductions in an epilogue)
    must be needed at the space's own element only. None when some member cannot be
    evaluated where it is needed."""
    reads: list[Site] = []
    seen: set[Site] = set()
    stack: list[tuple[str, Coords]] = []
    for s in reversed(seeds):
        coords = identity(tuple(graph.types[s].shape), space)
        if coords is None:
            return None
        stack.append((s, coords))
    while stack:
        name, coords = stack.pop()
        shape = tuple(graph.types[name].shape)
        site = (name, offset(coords, shape, space))
        if site in seen:
            continue
        seen.add(site)
        if name in terminals:
            if site[1] != flat_index(space):
                return None
            continue
        if name not in members:
            reads.append(site)
            continue
        node = graph.node_map[name]
        children = []
        for k, i in enumerate(node.inputs):
            c = input_coords(graph, node, k, coords, space)
            if c is None:
                return None
            children.append((i, c))
        stack += reversed(children)
    return reads

"""Where the members of a covered group are evaluated: coordinate maps through layout views.

Assumes: a loop space (the group's iteration space, or an epilogue's output shape) whose
element has coordinates ``c``; elementwise members read their inputs NumPy-aligned, layout
views (``OpDef.view_affine``) map their output coordinates to their input's as `Affine`
forms, constant-weight stencils read their input at the taps' shifted coordinates, and
per-axis views (pad, pad_adjoint: ``OpDef.axis_images``) read it at their interior shift
under a guard (the interior's condition, for the driver's interior/edge loop split).
Guarantees: `walk` visits every (value, coordinates) a set of seeds needs,
iteratively, and returns the memory reads as (value, flat offset form); a value is
identified by its flat offset (two maps with one offset are the same element: a
layout-preserving reshape of a member is an alias, not a second evaluation). A walk fails
(None) when a view is not affine there or a member is needed where it cannot be computed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from dpt_ir.backends.cxx import scatter, sparse
from dpt_ir.graph import Graph, Node
from dpt_ir.ops import indexing as idx
from dpt_ir.ops.indexing import Affine, Coords, ImageMap

Site = tuple[str, Affine]  # a value and the flat offset of the element read
Guard = tuple[Affine, int, int]  # lo <= form <= hi: where a per-axis view is its interior shift


def identity(shape: Sequence[int], space: Sequence[int]) -> Coords | None:
    """The coordinates at which a value of ``shape`` is read when it NumPy-broadcasts to the
    space's element; None when it does not broadcast to ``space``."""
    n, lead = len(space), len(space) - len(shape)
    if lead < 0 or any(d not in (1, space[lead + k]) for k, d in enumerate(shape)):
        return None
    return tuple(idx.zero(n) if d == 1 else idx.axis(lead + k, n) for k, d in enumerate(shape))


def _canonical(form: Affine, space: Sequence[int]) -> Affine:
    """``form`` with no weight on axes of extent 1 (their coordinate is always 0) and no
    trailing zero weights, so equal offsets compare equal."""
    w = [0 if n == 1 else x for x, n in zip(form.padded(len(space)).w, space, strict=True)]
    while w and w[-1] == 0:
        w.pop()
    return Affine(form.b, tuple(w))


def offset(coords: Coords, shape: Sequence[int], space: Sequence[int]) -> Affine:
    """The flat row-major offset of ``coords`` in a value of ``shape``, canonical."""
    return _canonical(idx.flat(coords, shape, len(space)), space)


def flat_index(space: Sequence[int]) -> Affine:
    """The offset of the space's own element (``i`` in a loop, ``o`` in an epilogue)."""
    return _canonical(Affine(0, tuple(idx.strides(space))), space)


def taps(graph: Graph, node: Node) -> list[tuple[tuple[int, ...], float]]:
    """The non-zero weights of a constant-weight stencil (``OpDef.warp_weights``), in
    row-major tap order: (tap position, weight)."""
    w = node.opdef.warp_weights(node.opdef.parse_attrs(node.attrs, node.name))  # type: ignore[misc]
    return [(tuple(int(k) for k in t), float(w[tuple(t)])) for t in np.argwhere(w != 0)]


def image_map(node: Node, in_shape: tuple[int, ...]) -> ImageMap:
    op = node.opdef
    attrs = op.parse_attrs(node.attrs, node.name)
    return op.axis_images(attrs, in_shape, tuple(node.type.shape))  # type: ignore[misc]


# A new coordinate clamp(form - lo, 0, n - 1), in [0, n): (form, lo, n) -> its form.
Variable = Callable[[Affine, int, int], Affine]


def _joined(graph: Graph, node: Node, coords: Coords, variable: Variable) -> list[tuple[str, Coords]]:
    """A join (concat) reads each non-empty input at its local index, clamped into range (a
    new coordinate each); the element selects the input whose range holds it."""
    axis = join_axis(node)
    out = []
    for i, lo, n in join_ranges(graph, node):
        q = variable(coords[axis], lo, n)
        out.append((i, tuple(q if a == axis else c for a, c in enumerate(coords))))
    return out


def join_axis(node: Node) -> int:
    return node.opdef.join_axis(node.opdef.parse_attrs(node.attrs, node.name))  # type: ignore[misc]


def join_ranges(graph: Graph, node: Node) -> list[tuple[str, int, int]]:
    """(input, offset, length) of each non-empty input of a join along its axis."""
    axis, out, offset = join_axis(node), [], 0
    for i in node.inputs:
        n = graph.types[i].shape[axis]
        if n:
            out.append((i, offset, n))
        offset += n
    return out


def children(
    graph: Graph,
    node: Node,
    coords: Coords,
    space: Sequence[int],
    guards: list[Guard] | None = None,
    variable: Variable | None = None,
) -> list[tuple[str, Coords]] | None:
    """The (input, coordinates) that ``node`` at ``coords`` reads, in order: one per input for
    elementwise ops and views, one per non-zero tap for stencils, the interior shift for
    per-axis views (``OpDef.axis_images``: the condition of the interior goes to ``guards``).
    None when the node cannot be evaluated there."""
    op, out_shape = node.opdef, tuple(node.type.shape)
    shapes = [tuple(graph.types[i].shape) for i in node.inputs]
    if op.kind == "elementwise":
        return [(i, idx.aligned_coords(coords, out_shape, s)) for i, s in zip(node.inputs, shapes, strict=True)]
    if op.join_axis is not None and variable is not None:
        return _joined(graph, node, coords, variable)
    if sparse.is_sparse(op) and variable is not None:  # a constant sparse map: a row loop (`sparse`)
        return sparse.children(graph, node, coords, variable)
    if scatter.is_scatter(op) and variable is not None:  # a scatter's root: base plus its row (`scatter`)
        return scatter.children(graph, node, coords, variable)
    if op.arity != 1:
        return None
    if op.view_affine is not None:
        c = op.view_affine(op.parse_attrs(node.attrs, node.name), shapes[0], out_shape, coords, tuple(space))
        return None if c is None else [(node.inputs[0], c)]
    if op.kind == "stencil" and op.warp_weights is not None:
        shifted = [tuple(c.shifted(d) for c, d in zip(coords, t, strict=True)) for t, _ in taps(graph, node)]
        return [(node.inputs[0], c) for c in shifted]
    if op.axis_images is not None and guards is not None:
        m = image_map(node, shapes[0])
        for c, ax in zip(coords, m.axes, strict=True):
            if not ax.plain:
                guards.append((_canonical(c, space), ax.lo, ax.hi))
        # An input axis of length 1 is read at 0 (the guard holds the coordinate there).
        axes = zip(coords, m.axes, shapes[0], strict=True)
        shifted = [idx.zero(len(space)) if n == 1 else c.shifted(ax.shift) for c, ax, n in axes]
        return [(node.inputs[0], tuple(shifted))]
    return None


def walk(
    graph: Graph,
    members: set[str],
    seeds: Sequence[str],
    space: Sequence[int],
    terminals: frozenset[str] = frozenset(),
    guards: list[Guard] | None = None,
) -> list[Site] | None:
    """The memory reads of evaluating ``seeds`` at the space's element, in first-visit order:
    values outside ``members`` are read; ``terminals`` (finished reductions in an epilogue)
    must be needed at the space's own element only. Per-axis views are walked in their
    interior, whose conditions go to ``guards`` (None: such views are refused). None when
    some member cannot be evaluated where it is needed."""
    reads: list[Site] = []
    seen: set[Site] = set()
    stack: list[tuple[str, Coords]] = []
    extra: list[int] = []  # extents of the joins' clamped coordinates

    def variable(form: Affine, lo: int, n: int) -> Affine:
        extra.append(n)
        return idx.axis(len(space) + len(extra) - 1, len(space) + len(extra))

    for s in reversed(seeds):
        coords = identity(tuple(graph.types[s].shape), space)
        if coords is None:
            return None
        stack.append((s, coords))
    while stack:
        name, coords = stack.pop()
        shape, ext = tuple(graph.types[name].shape), (*space, *extra)
        site = (name, offset(coords, shape, ext))
        if site in seen:
            continue
        seen.add(site)
        if name in terminals:
            if site[1] != flat_index(ext):
                return None
            continue
        if name not in members:
            reads.append(site)
            continue
        found = children(graph, graph.node_map[name], coords, ext, guards, variable)
        if found is None:
            return None
        stack += reversed(found)
    return reads

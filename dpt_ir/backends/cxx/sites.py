"""Where the members of a covered group are evaluated: coordinate maps through layout views.

Assumes: a loop space (the group's iteration space, or an epilogue's output shape) whose
element has coordinates ``c``; elementwise members read their inputs NumPy-aligned, layout
views (``OpDef.view_affine``) map their output coordinates to their input's as `Affine`
forms, constant-weight stencils read their input at the taps' shifted coordinates, and
per-axis views (pad, pad_adjoint: ``OpDef.axis_images``) read it at their interior shift
under a guard (the interior's condition, for the driver's interior/edge loop split),
joins and gathers read at new coordinates (a clamped local index, a loaded position:
`gathers`), and constant tables are read like memory.
Guarantees: `walk` visits every (value, coordinates) a set of seeds needs,
iteratively, and returns the memory reads as (value, flat offset form); a value is
identified by its flat offset (two maps with one offset are the same element: a
layout-preserving reshape of a member is an alias, not a second evaluation). A reshape
whose offset does not split into coordinates in range reads its input at flat coordinates
(`indexing.flat_coords`): a value read from memory there is a load at that offset, a
layout-preserving view passes them on, an elementwise member reads its operands of its own
shape there (and of one element at 0), any other member there fails the walk. A walk fails
(None) when a view is not affine there or a member is needed where it cannot be computed.
"""

from __future__ import annotations

import itertools
import math
import threading
from collections.abc import Callable, Collection, Iterator, Sequence
from contextlib import contextmanager

import numpy as np

from dpt_ir.backends.cxx import gathers, scatter, sparse
from dpt_ir.backends.cxx.common import flat_index, offset
from dpt_ir.backends.cxx.row_images import RowImages
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.indexing import Affine, Coords, ImageMap
from dpt_ir.ir.mirror import MirrorSum, mirror_sum

Site = tuple[str, Affine]  # a value and the flat offset of the element read
Shape = tuple[int, ...]
Reads = list[tuple[str, Coords]]  # (input, coordinates it is read at)
Guard = tuple[Affine, int, int]  # lo <= form <= hi: where a per-axis view is its interior shift


def identity(shape: Sequence[int], space: Sequence[int]) -> Coords | None:
    """The coordinates at which a value of ``shape`` is read when it NumPy-broadcasts to the
    space's element, or, for a value of the space's size that does not (the space refines its
    shape: `refine`), at the space's flat index split into its shape; None otherwise."""
    n, lead = len(space), len(space) - len(shape)
    if lead < 0 or any(d not in (1, space[lead + k]) for k, d in enumerate(shape)):
        if math.prod(shape) != math.prod(space):
            return None
        return idx.split(Affine(0, tuple(idx.strides(space))), shape, space)
    return tuple(idx.zero(n) if d == 1 else idx.axis(lead + k, n) for k, d in enumerate(shape))


def refine(graph: Graph, members: set[str], space: Shape) -> Shape | None:
    """The coarsest factorisation of the space's elements (row-major, the same flat order)
    that refines the space and the shapes on both sides of every layout-preserving view
    among ``members`` with the space's size (a flatten of 3x4 to 12 iterates 12 as 3x4, so a
    transpose or slice below it stays affine); None when there is none other than the space
    (3x4 and 2x6: no common refinement) or it is the space itself."""
    size = math.prod(space)
    marks = set(_prefix_products(space))
    for name in members:
        node = graph.node_map[name]
        if node.opdef.preserves_layout:
            for shape in (tuple(graph.types[node.inputs[0]].shape), tuple(node.type.shape)):
                marks |= set(_prefix_products(shape)) if math.prod(shape) == size else set()
    chain = sorted(marks)
    if not chain or any(b % a for a, b in zip(chain, chain[1:], strict=False)):
        return None
    refined = tuple([chain[0], *(b // a for a, b in zip(chain, chain[1:], strict=False))])
    return None if refined == tuple(d for d in space if d != 1) else refined


def _prefix_products(shape: Sequence[int]) -> list[int]:
    out, p = [], 1
    for d in shape:
        p *= d
        if d != 1:
            out.append(p)
    return out


def taps(graph: Graph, node: Node) -> list[tuple[tuple[int, ...], float]]:
    """The non-zero weights of a constant-weight stencil (``OpDef.weights``), in
    row-major tap order: (tap position, weight)."""
    w = _weights(node)
    return [(tuple(int(k) for k in t), float(w[tuple(t)])) for t in np.argwhere(w != 0)]


def mirrored(node: Node) -> tuple[MirrorSum, dict[int, int]] | None:
    """A constant-weight stencil whose weights are a symmetric or antisymmetric line
    (`dpt_ir.ir.mirror.mirror_sum`), with each non-zero tap's flat position -> its index in
    `taps`' order; None for any other stencil."""
    w = _weights(node)
    m = mirror_sum(w)
    return None if m is None else (m, {int(p): k for k, p in enumerate(np.flatnonzero(w))})


def _weights(node: Node) -> np.ndarray:
    """A constant-weight stencil's weights (``OpDef.weights``)."""
    return node.opdef.weights(node.opdef.parse_attrs(node.attrs, node.name))  # type: ignore[misc]


def tap_accumulation(node: Node) -> str:
    """Where a constant-weight stencil sums float32 taps (``OpDef.tap_accumulation``):
    ``float64`` or ``dtype``."""
    rule = node.opdef.tap_accumulation
    return "float64" if rule is None else rule(node.opdef.parse_attrs(node.attrs, node.name))


def image_map(node: Node, in_shape: tuple[int, ...]) -> ImageMap:
    """The per-axis images of view ``node`` (`OpDef.axis_images`); inside `image_maps`, made
    once per op, attributes and shapes: the lowering asks for them at every read of the view,
    and a gradient's embed of a flat axis holds 10⁵-10⁶ images."""
    kept: dict[tuple[object, ...], ImageMap] | None = getattr(_maps, "kept", None)
    key = (node.op, repr(sorted(node.attrs.items())), in_shape, tuple(node.type.shape))
    found = kept.get(key) if kept is not None else None
    if found is None:
        op = node.opdef
        attrs = op.parse_attrs(node.attrs, node.name)
        found = op.axis_images(attrs, in_shape, tuple(node.type.shape))  # type: ignore[misc]
        if kept is not None:
            kept[key] = found
    return found


@contextmanager
def image_maps() -> Iterator[None]:
    """A block (one module's code generation, `codegen.generate`) whose `image_map` calls in
    this thread share their maps; they are dropped at its end, so no map outlives the
    compilation that made it (one can hold 10⁶ images)."""
    outer = getattr(_maps, "kept", None)
    _maps.kept = {} if outer is None else outer
    try:
        yield
    finally:
        _maps.kept = outer


_maps = threading.local()  # .kept: the maps of the thread's current `image_maps` block, if any


def selected(ax: idx.AxisImages, n: int) -> bool:
    """Whether a per-axis view's bounded axis is evaluated as a select, not split by a guard:
    its input axis has length 1, so the interior read (at index 0) is in bounds at every
    element, and every output index outside the interior reads nothing (the fill), so
    ``lo <= k <= hi ? x : fill`` is the view everywhere. (A gradient's embed of one row, as
    a receiver line's: without this, every other row of the field ran the scalar edge path.)"""
    return n == 1 and all(not im for k, im in enumerate(ax.images) if not ax.lo <= k <= ax.hi)


def per_axis(node: Node, coords: Coords) -> Coords:
    """A view's output coordinates per axis (flat ones of a value with one long axis unflattened,
    as `children` reads them)."""
    out_shape = tuple(node.type.shape)
    return (_unflattened(coords, out_shape) or ()) if idx.is_flat(coords, out_shape) else coords


def selects(node: Node, coords: Coords, in_shape: Shape) -> list[tuple[Affine, int, int]]:
    """The selected axes (`selected`) of a per-axis view read at ``coords``: per axis, its
    coordinate and the interior ``[lo, hi]`` where the view reads its input."""
    m = image_map(node, in_shape)
    axes = zip(per_axis(node, coords), m.axes, in_shape, strict=False)
    return [(c, ax.lo, ax.hi) for c, ax, n in axes if not ax.plain and selected(ax, n)]


# A new coordinate in [0, n): (form, n, its C++ from the C++ of form) -> its form.
Variable = Callable[[Affine, int, Callable[[str], str]], Affine]
# A per-axis view's bounded axis read per row (`row_images`): (view, axis, form, its images,
# input length) -> the coordinates of its per-row input indices (one per slot, summed in
# order), or None (a guard instead).
RowImageCoordinate = Callable[[str, int, Affine, idx.AxisImages, int], tuple[Affine, ...] | None]


def _joined(graph: Graph, node: Node, coords: Coords, variable: Variable) -> list[tuple[str, Coords]]:
    """A join (concat) reads each non-empty input at its local index, clamped into range (a
    new coordinate each); the element selects the input whose range holds it."""
    axis = join_axis(node)
    out = []
    for i, lo, n in join_ranges(graph, node):
        q = variable(coords[axis], n, lambda f, lo=lo, n=n: f"dp_clampi({f} - {lo}, 0, {n - 1})")
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


def _identity_view(node: Node, out_shape: Shape, shapes: list[Shape]) -> bool:
    """Whether ``node`` is a layout view that reads each element of its input of the same
    shape at the same index (a slice taking a whole axis, or a reversed axis of length 1)."""
    op = node.opdef
    if op.view_affine is None or op.arity != 1 or shapes != [out_shape]:
        return False
    n = len(out_shape)
    ident = tuple(idx.zero(n) if d == 1 else idx.axis(k, n) for k, d in enumerate(out_shape))
    got = op.view_affine(op.parse_attrs(node.attrs, node.name), out_shape, out_shape, ident, out_shape)
    if got is None:
        return False
    return all(d == 1 or g == e for g, e, d in zip(got, ident, out_shape, strict=True))


def _unflattened(coords: Coords, shape: Shape) -> Coords | None:
    """Per-axis coordinates equal to flat coordinates ``coords`` of a value of ``shape`` with
    at most one axis longer than 1 (its coordinate is the flat offset; the others are 0);
    None for other shapes."""
    if len(coords) != 1 or sum(d > 1 for d in shape) > 1:
        return None
    (flat,) = coords
    return tuple(flat if d > 1 else idx.zero(len(flat.w)) for d in shape)


def _flat_children(node: Node, coords: Coords, out_shape: Shape, shapes: list[Shape]) -> Reads | None:
    """The reads of ``node`` at flat coordinates: a layout-preserving view reads its input at
    the same offset; an elementwise op (with inputs) reads each input of its own shape there;
    both, and a layout view, read an input of one element at 0; anything else (a source, a
    broadcast operand, a transpose) cannot be evaluated there."""
    op = node.opdef
    if op.preserves_layout or _identity_view(node, out_shape, shapes):
        return [(node.inputs[0], coords)]
    if not node.inputs or (op.kind != "elementwise" and op.view_affine is None):
        return None
    out = []
    for i, s in zip(node.inputs, shapes, strict=True):
        if s == out_shape and op.kind == "elementwise":
            out.append((i, coords))
        elif math.prod(s) == 1:
            out.append((i, tuple(idx.zero(len(coords[0].w)) for _ in s)))
        else:
            return None
    return out


def reads_memory(graph: Graph, members: Collection[str], name: str) -> bool:
    """Whether a group of ``members`` reads value ``name`` from memory (not a member, or a
    member table, read from its array) instead of evaluating it."""
    return name not in members or gathers.is_table(graph, name)


def children(
    graph: Graph,
    node: Node,
    coords: Coords,
    space: Sequence[int],
    guards: list[Guard] | None = None,
    variable: Variable | None = None,
    fresh_from: int | None = None,
    digits: bool = False,
    rows: RowImageCoordinate | None = None,
    members: Collection[str] | None = None,
) -> list[tuple[str, Coords]] | None:
    """The (input, coordinates) that ``node`` at ``coords`` reads, in order: one per input for
    elementwise ops and views, one per non-zero tap for stencils, the interior shift for
    per-axis views (``OpDef.axis_images``: the condition of the interior goes to ``guards``;
    a bounded axis that ``rows`` makes a row image is read at its coordinate instead), the
    indices and the source of a gather (`gathers`). New coordinates come from ``variable``;
    ``fresh_from``: the first of them (the loop space's rank); ``members``: the group's nodes (a
    view whose input is not one reads memory). None when the node cannot be evaluated there."""
    op, out_shape = node.opdef, tuple(node.type.shape)
    shapes = [tuple(graph.types[i].shape) for i in node.inputs]
    if idx.is_flat(coords, out_shape):
        per_axis = _unflattened(coords, out_shape)
        if per_axis is None:
            return _flat_children(node, coords, out_shape, shapes)
        coords = per_axis
    if op.kind == "elementwise":
        return [(i, idx.aligned_coords(coords, out_shape, s)) for i, s in zip(node.inputs, shapes, strict=True)]
    if op.join_axis is not None and variable is not None:
        return _joined(graph, node, coords, variable)
    if op.gather_affine is not None and variable is not None:
        return gathers.children(graph, node, coords, space, variable)
    if sparse.is_sparse(op) and variable is not None:  # a constant sparse map: a row loop (`sparse`)
        return sparse.children(graph, node, coords, variable)
    if scatter.is_scatter(op) and variable is not None:  # a scatter's root: base plus its row (`scatter`)
        return scatter.children(graph, node, coords, variable)
    if op.arity != 1:
        return None
    if op.view_affine is not None:
        c = op.view_affine(op.parse_attrs(node.attrs, node.name), shapes[0], out_shape, coords, tuple(space))
        # Through a gather's position: its digits (per-axis, so views below the reshape stay
        # walkable), but for a read of memory at flat coordinates, whose offset is the flat one: the
        # digits' div/mod only to multiply them back (a 256² order-3 registration kernel: 16 taps,
        # each a division by a non-power of two and a remainder, 0.363 -> 0.349 ms).
        memory = members is not None and reads_memory(graph, members, node.inputs[0])
        if c is None or (idx.is_flat(c, shapes[0]) and not memory):
            c = gathers.digits(op, shapes[0], out_shape, coords, space, fresh_from, variable, digits) or c
        return None if c is None else [(node.inputs[0], c)]
    if op.kind == "stencil" and op.weights is not None:
        shifted = [tuple(c.shifted(d) for c, d in zip(coords, t, strict=True)) for t, _ in taps(graph, node)]
        return [(node.inputs[0], c) for c in shifted]
    if op.axis_images is not None:
        m = image_map(node, shapes[0])
        bounded = [(c, ax) for c, ax in zip(coords, m.axes, strict=True) if not ax.plain]
        if bounded and guards is None:  # an epilogue: its images are read per element (`_images`)
            if variable is None:
                return None
            axes = zip(coords, m.axes, shapes[0], strict=True)
            at = [idx.zero(len(space)) if n == 1 else c.shifted(ax.shift) if ax.plain else variable(c, n, str)
                  for c, ax, n in axes]  # fmt: skip
            return [(node.inputs[0], tuple(at))]
        at: list[tuple[Affine, ...]] = []  # per axis, where it is read (a row image's slots: several)
        for d, (c, ax, n) in enumerate(zip(coords, m.axes, shapes[0], strict=True)):
            # An input axis of length 1 is read at 0 (a guard, if any, holds the coordinate there).
            plain = idx.zero(len(space)) if n == 1 else c.shifted(ax.shift)
            lo, hi = c.bounds(space)
            if ax.plain or ax.lo <= lo <= hi <= ax.hi:  # every element read is in the interior
                at.append((plain,))
                continue
            q = None if n == 1 or rows is None else rows(node.name, d, c, ax, n)
            if q is None and not selected(ax, n):  # selected: the element function's select
                guards.append((idx.canonical(c, space), ax.lo, ax.hi))  # type: ignore[union-attr]
            at.append((plain,) if q is None else q)
        # Every combination of the axes' slots, in the edge function's order (`emit._images`).
        return [(node.inputs[0], combo) for combo in itertools.product(*at)]
    return None


def walk(
    graph: Graph,
    members: set[str],
    seeds: Sequence[str],
    space: Sequence[int],
    terminals: frozenset[str] = frozenset(),
    guards: list[Guard] | None = None,
    digits: bool = False,
    images: RowImages | None = None,
    columns: dict[Site, Affine | None] | None = None,
) -> list[Site] | None:
    """The memory reads of evaluating ``seeds`` at the space's element, in first-visit order:
    values outside ``members`` are read; ``terminals`` (finished reductions in an epilogue)
    must be needed at the space's own element only. Per-axis views are walked in their
    interior, whose conditions go to ``guards`` (None: such views are refused), but for the
    bounded axes ``images`` takes as row images (`row_images`). ``columns`` receives each
    read's coordinate along its value's last axis (None: read at flat coordinates). None when
    some member cannot be evaluated where it is needed."""
    reads: list[Site] = []
    seen: set[Site] = set()
    stack: list[tuple[str, Coords]] = []
    # extents of the new coordinates (joins, gathers, row images); with `RowImages.reserve`,
    # the first ones are kept for the row images (1 until one takes it)
    extra: list[int] = [1] * (images.reserve if images is not None and not digits else 0)

    def variable(form: Affine, n: int, cxx: Callable[[str], str]) -> Affine:
        extra.append(n)
        if images is not None and images.first_other is None:
            images.first_other = len(space) + len(extra) - 1
        return idx.axis(len(space) + len(extra) - 1, len(space) + len(extra))

    rows: RowImageCoordinate | None = None
    if images is not None and not digits:
        table = images

        def row_image(node: str, axis: int, form: Affine, ax: idx.AxisImages, n: int) -> tuple[Affine, ...] | None:
            before = table.count
            kept = before < table.reserve  # the next kept coordinate, else the next free one
            q = table.coordinates(node, axis, form, ax, n, len(space) + (before if kept else len(extra)))
            added = table.count - before
            if kept:
                extra[before : before + added] = [n] * added  # a kept run too short: numbered_first fails
            else:
                extra.extend([n] * added)  # new coordinates: their extents
            return q

        rows = row_image

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
        if name in terminals:  # at the space's own element (new coordinates, if any, unused)
            if site[1].padded(len(ext)) != flat_index(space).padded(len(ext)):
                return None
            continue
        if reads_memory(graph, members, name):  # a table: read from its array
            reads.append(site)
            if columns is not None:
                columns[site] = coords[-1] if shape and not idx.is_flat(coords, shape) else None
            continue
        found = children(graph, graph.node_map[name], coords, ext, guards, variable, len(space), digits, rows, members)
        if found is None:
            return None
        stack += reversed(found)
    return reads

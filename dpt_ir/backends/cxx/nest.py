"""Which fusion groups the C++ path covers, and how their loop nest reads.

Assumes: a scheduled graph whose kernel plan holds fusion's groups (``kind``, ``space``,
``axes``, ``nodes`` in topological order, ``roots``, ``outputs``, ``epilogue``), and the op
table's ``cxx`` / ``cxx_domain`` / ``cxx_reduce`` / ``view_affine`` fields. Guarantees: `cover`
accepts a group only when every member is an elementwise op with a C++ expression, a layout
view with affine index maps (`OpDef.view_affine`: no op is special-cased by name), a gather
(`OpDef.gather_affine`) or a constant table (`OpDef.table`, see `gathers`), or a
reduction with a C++ lane template over one contiguous block of axes (trailing axes: rows
reduced along the inner counter; a leading or middle block: per-column accumulation over
the rows, `Nest.columns`) or over non-adjacent axes (the same nests, with the rows an output
reduces found through `Nest.row_map`: `rowmap`), a constant sparse map (`OpDef.sparse_rows`:
a row loop, `sparse`), or a scatter group's root (`scatter`: base plus its CSR row); every
value is float32, float64,
int32, uint8 or bool; an epilogue (if any) has one output shape; and every read from memory (through
views: `sites.walk`) is at the iteration index, a scalar, or a per-row base plus (or not) the
inner counter (or, with one inner axis, a multiple of it), over the group's space or, where
a reshape does not split there, over the finer factorisation of it that every
layout-preserving view refines (`sites.refine`, `_refined`), or, where neither exists, with
such reshapes read at per-element digits (`Nest.digits`). Anything else is refused
(`missing_lowering` says why; `codegen.generate` raises it). The loop nest is rows x inner,
the inner axes contiguous and innermost, and no read divides or takes the modulus of the
inner counter (but the digits of a `Nest.digits` read).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dpt_ir.backends.cxx import gathers, row_ends, scatter, sites, sparse
from dpt_ir.backends.cxx.common import C_TYPES, INDEX_LIMIT, WIDE_INDEX, WIDE_LIMIT, flat_index
from dpt_ir.backends.cxx.row_images import RowImage, RowImages
from dpt_ir.backends.cxx.rowmap import RowMap
from dpt_ir.backends.cxx.sites import Guard, Site
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.indexing import Affine
from dpt_ir.ir.kernel_ir import KernelGroup
from dpt_ir.ir.records import origin_of
from dpt_ir.ir.registry import CxxReduce
from dpt_ir.ir.types import FLOAT_DTYPES, INT_DTYPES


@dataclass(frozen=True)
class Read:
    """A value read from memory at one flat offset form (`sites.Site`): ``mode`` ``full`` (at
    the iteration index ``i``), ``scalar`` (element ``offset``), ``row`` (``rb[k] + j *
    step``: a base per row, ``offset`` plus ``strides[a]`` times each outer coordinate, plus
    the inner counter times ``step``: 1 contiguous, 0 broadcast, other strided) or
    ``gather`` (through a join's clamped coordinate: the index is computed per element). A
    ``row`` read below a row image (`row_images`) adds its per-row index times a weight."""

    value: str
    mode: str
    offset: int = 0
    strides: tuple[int, ...] = ()
    step: int = 0
    images: tuple[int, ...] = ()  # ``row``: the weight of each row image's index (`row_images`)


@dataclass
class Nest:
    """A covered group's loop nest: ``rows`` x ``inner`` elements over the outer shape
    ``outer``; reduction groups reduce the inner axes (one row per output element)."""

    group: KernelGroup
    space: tuple[int, ...]
    outer: tuple[int, ...]
    inner: int
    reads: dict[Site, Read]
    roots: list[str]  # reduction roots
    stores: list[str]  # values written at the iteration index
    templates: dict[str, CxxReduce] = field(default_factory=dict)
    after: list[str] = field(default_factory=list)  # epilogue outputs, computed per output element
    after_shape: tuple[int, ...] = ()
    sub: int = 1  # elements of a sub-row: reads are a base per sub-row plus (or not) the position in it
    base_outer: tuple[int, ...] = ()  # the shape the sub-rows are numbered over (row bases)
    # Interior conditions (form over the space's coordinates, lo, hi): where all hold, every
    # per-axis view reads its interior shift (the element function); elsewhere the edge
    # function evaluates the views' images. Only with one inner axis (the last).
    guards: list[Guard] = field(default_factory=list)
    # A reduction over a block of axes followed by kept axes (leading or middle axes): the
    # space is (kept P) x (reduced R) x (kept M) x (kept columns C: the inner axes), rows
    # are the P x R x M rows of C columns, and each column accumulates over its R rows
    # (`columns`: (P, R, M, C)); None otherwise.
    columns: tuple[int, int, int, int] | None = None
    # A reduction over non-adjacent axes: the rows (sub-rows, or the columns' rows) of the
    # space in the order the reduction folds them (`rowmap`): output o's reduced row r is
    # row ``row_map`` (o, r) of ``base_outer``; None when the reduced axes are one block.
    row_map: RowMap | None = None
    # Layout-preserving views that neither split into affine coordinates nor refine with the
    # space read their input at per-element digits of the flat offset (`gathers.digits`:
    # div/mod of the counter, scalar code, correct); the emitter walks them the same way.
    digits: bool = False
    # The C++ type of element indices, offsets and positions: ``int``, or `WIDE_INDEX` when the
    # space or a tensor the group reads or writes has more than `INDEX_LIMIT` elements (`cover`).
    index: str = "int"
    # Per-axis views' bounded axes read at a per-row index (`row_images`), not split by guards:
    # coordinates ``len(space) + m`` of the reads' forms; the rows are the last axis, as with guards.
    row_images: RowImages | None = None
    # Where the row ends (elements outside the interior of constant pads along the row) run the
    # inlined ``F_ends`` instead of the edge function: per read moving along the row, the range
    # its inner counter is clamped into (`row_ends`); None: the ends take the edge function.
    ends: row_ends.Clamps | None = None
    # Where the clamps do not apply but every guard bounds the row (`row_ends.bounded`): the
    # row ends' ``F_ends`` reads the views' guarded axes through their image tables.
    mapped_ends: bool = False
    # A scatter root's CSR row check (`scatter.row_sum`): the offsets' parameter and the C++ of
    # the output index ``o`` in terms of ``i`` and ``j``, where ``o`` moves one along the row;
    # set while the element function is written. A row whose outputs have no CSR entry takes
    # the instance ``S = false``, without the (unvectorisable) loop over the entries.
    csr_row: tuple[str, str] | None = None

    @property
    def images(self) -> list[RowImage]:
        """The row images, by coordinate (none without them)."""
        return self.row_images.images if self.row_images else []

    @property
    def summed(self) -> list[int]:
        """The ``rb`` entries of the row images' later slots' flags (an index's second and
        further images, summed: `row_images`); a row where none is set takes the element
        functions' instance without their sums (``S``: `drivers.row_class`)."""
        base = len(self.row_reads)
        return [base + 2 * m for m, r in enumerate(self.images) if r.slot]

    @property
    def classed(self) -> bool:
        """Whether rows come in two classes (``rs``: `drivers.row_class`): rows that sum row
        images' later slots or CSR entries (`csr_row`), and rows that take the element
        functions' instance ``S = false`` without them."""
        return bool(self.summed) or self.csr_row is not None

    @property
    def row_reads(self) -> list[Read]:
        """The ``row`` reads, in the order of their bases ``rb[k]``."""
        return [r for r in self.reads.values() if r.mode == "row"]

    @property
    def row_position(self) -> bool:
        """Whether an element function's inner counter ``j`` is the element's position along
        the space's last axis and ``i - j`` the flat index of its row's start: the drivers
        walk rows (or sub-rows) of exactly the last axis (`drivers.pointwise_drivers`,
        `drivers.reduction_drivers`; not the column, row-map or digit layouts)."""
        plain = self.columns is None and self.row_map is None and not self.digits
        return plain and bool(self.space) and self.sub == self.space[-1] > 1

    def widen(self, expr: str) -> str:
        """``expr`` (an int: a task, a part) cast to the index type before it is multiplied
        into an element index; as it is with 32-bit indices."""
        return expr if self.index == "int" else f"({self.index}){expr}"

    @property
    def rows(self) -> int:
        return math.prod(self.outer)

    @property
    def count(self) -> int:
        """The reduced element count per output (reductions)."""
        return self.columns[1] if self.columns else self.inner

    @property
    def size(self) -> int:
        return self.rows * self.inner


def aligned(shape: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return (1,) * (ndim - len(shape)) + tuple(shape)


def classify(site: Site, space: tuple[int, ...], k: int, images: int = 0) -> Read | None:
    """How the read ``site`` is done in a nest whose inner axes are the last ``k`` of
    ``space`` (and whose coordinates past the space are ``images`` row images, if any: a read
    below one is a row read whose base adds the image's index); None when its inner part is
    neither contiguous nor broadcast (nor, with one inner axis, strided): that would need a
    division or modulus of the inner counter."""
    value, at = site
    cut, n = len(space) - k, len(space)
    if len(at.w) > n + images or (len(at.w) > n and not images):
        return Read(value, "gather")  # at a join's clamped coordinate: an index computed per element
    weights = at.padded(n + images).w[n:]
    at = Affine(at.b, at.w[:n]).padded(n)
    if not any(weights) and at == flat_index(space).padded(n):
        return Read(value, "full")
    if not any(at.w) and not any(weights):
        return Read(value, "scalar", at.b)
    inner = at.w[cut:]
    if not any(inner):
        step = 0
    elif inner == flat_index(space[cut:]).padded(k).w:
        step = 1
    elif k == 1:
        step = inner[0]
    else:
        return None
    return Read(value, "row", at.b, at.w[:cut], step, tuple(weights) if any(weights) else ())


def _types_ok(graph: Graph, values: list[str]) -> bool:
    return all(graph.types[v].dtype in C_TYPES for v in values)


def _is_view(op: Any) -> bool:
    """Layout views, joins, constant-weight stencils and per-axis views (pads): members
    evaluated at coordinates."""
    if op.join_axis is not None:
        return True
    if op.arity != 1:
        return False
    stencil = op.kind == "stencil" and op.weights is not None
    return op.view_affine is not None or op.axis_images is not None or stencil


def cover(graph: Graph, group: KernelGroup) -> Nest | None:
    """The loop nest of ``group`` on the C++ path, or None for a group the
    C++ path cannot lower (see the module docstring for what is covered). Its index type is
    64-bit when the space or a tensor the group reads or writes has more than `INDEX_LIMIT`
    elements, and such a nest is covered only where every part takes 64-bit indices."""
    nest = _cover(graph, group)
    if nest is None or largest(graph, group) <= INDEX_LIMIT:
        return nest
    nest.index = WIDE_INDEX
    return nest if _wide_ok(graph, nest) else None


def _cover(graph: Graph, group: KernelGroup) -> Nest | None:
    kind, space = group.kind, tuple(group.space)
    if kind == "scatter" and scatter_covers(graph, group):
        kind = "pointwise"  # the root sums its output element's CSR row (`scatter`)
    if kind not in ("pointwise", "reduction") or not 0 < math.prod(space) <= WIDE_LIMIT:
        return None
    if largest(graph, group) > WIDE_LIMIT:
        return None
    members = set(group.nodes)
    roots, templates = [], {}
    for name in scatter.evaluated(graph, group):
        node = graph.node_map[name]
        op = node.opdef
        if scatter.is_scatter(op) and group.kind == "scatter":
            continue  # checked by `scatter_covers`
        if op.kind == "reduction" and kind == "reduction" and op.cxx_reduce is not None:
            src = graph.types[node.inputs[0]]
            if src.dtype not in C_TYPES or node.type.dtype not in C_TYPES or src.shape != space:
                return None
            t = op.cxx_reduce(C_TYPES[src.dtype], C_TYPES[node.type.dtype])
            if t is None:
                return None
            roots.append(name)
            templates[name] = t
        elif gathers.covered(node):  # gathers and constant tables (`gathers`)
            continue
        elif sparse.is_sparse(op):  # a constant sparse map: its row loop (`sparse`)
            if not sparse.covers(graph, node):
                return None
        elif not _is_view(op) and (op.kind != "elementwise" or op.cxx is None):
            return None
    if not _types_ok(graph, [*group.nodes, *group.inputs]):
        return None
    # The epilogue: what is computed from finished reductions, and the epilogue roots fusion
    # attached beside them (pointwise work of the reductions' output shape, reading memory
    # only) that cannot be written at the iteration index instead.
    beside = {v for v in group.epilogue if _squeezed(graph.types[v].shape) != _squeezed(space)}
    late = _descendants(graph, members, roots) | beside
    after = [v for v in group.outputs if v in late]
    stores = [v for v in group.outputs if v not in roots and v not in late]
    seeds = [*(graph.node_map[r].inputs[0] for r in roots), *stores]
    if any(_squeezed(graph.types[v].shape) != _squeezed(space) for v in stores):
        return None  # a store is written at the iteration index: its flat order must be the space's
    after_shape = _walked_after(graph, members, after, roots)
    if after_shape is None:
        return None
    found: list[sites.Guard] = []
    lasts: dict[Site, Affine | None] = {}  # each read's coordinate along its value's last axis
    walked, images = _walk_rows(graph, members, seeds, space, found, lasts)
    axes = tuple(group.axes)
    if walked is None:  # a reshape that does not split: a finer space may make it affine
        space, axes, walked, images = _refined(graph, members, seeds, space, axes, found, lasts)
    digits = walked is None  # none does (3x2 read as 2x3): such reshapes read at their digits
    if digits:
        space, axes = tuple(group.space), tuple(group.axes)
        found.clear()
        walked = sites.walk(graph, members, seeds, space, guards=found, digits=True)
    if walked is None:
        return None
    guards = list(dict.fromkeys(found))
    n_images = images.count if images else 0
    most = 1 if guards or n_images else len(space)  # the interior split, row images: along the last axis
    columns = None
    if kind == "reduction":
        if not roots:
            return None
        if axes != tuple(range(axes[0], axes[-1] + 1) if axes else ()):
            parts = (roots, stores, templates, after, after_shape, guards)
            nest = _spread(group, space, axes, walked, most, *parts, n_images)
            return _with_rows(graph, nest, digits, images, lasts)
        kept = len(space) - 1 - axes[-1] if axes else 0  # kept axes after the reduced block
        if kept:  # the columns: the most trailing kept axes every read is contiguous over
            k = _inner_axes(walked, space, min(kept, most), n_images)
            p, r = math.prod(space[: axes[0]]), math.prod(space[axes[0] : axes[-1] + 1])
            columns = (p, r, math.prod(space[axes[-1] + 1 : len(space) - k]), math.prod(space[-k:]))
        else:
            k = len(axes)
    else:
        k = _inner_axes(walked, space, most, n_images)
    cut = len(space) - k
    k_read = k if kind == "pointwise" or columns else _inner_axes(walked, space, min(k, most), n_images)
    reads = _classified(walked, space, k_read, n_images)
    if reads is None:
        return None
    inner = math.prod(space[cut:])
    sub_rows = (math.prod(space[len(space) - k_read :]), space[: len(space) - k_read])
    outer = space[:cut]
    nest = Nest(
        group, space, outer, inner, reads, roots, stores, templates, after, after_shape, *sub_rows, guards, columns
    )
    return _with_rows(graph, nest, digits, images, lasts)


def _with_rows(
    graph: Graph, nest: Nest | None, digits: bool, images: RowImages | None, columns: dict[Site, Affine | None]
) -> Nest | None:
    """``nest`` with its digit reads, row images and row ends (`row_ends`) set."""
    if nest is not None:
        nest.digits = digits
        nest.row_images = images if images and images.found else None
        nest.ends = row_ends.clamps(graph, nest, columns) if images is not None else None
        nest.mapped_ends = images is not None and nest.ends is None and row_ends.bounded(nest)
    return nest


def _walk_rows(
    graph: Graph,
    members: set[str],
    seeds: list[str],
    space: tuple[int, ...],
    found: list[Guard],
    columns: dict[Site, Affine | None],
) -> tuple[list[Site] | None, RowImages | None]:
    """The walk over ``space`` with row images (`row_images`: bounded axes constant along a
    row read at a per-row index; where the walk made a coordinate of another kind first, a
    scatter's positions, it runs again with the images' coordinates reserved first, as the
    element function numbers them: `RowImages.numbered_first`), or the walk with guards only
    (and no row images: None) where that fails, or where a view kept its guard below a row
    image (a pad whose table is past `row_images.TABLE_MAX` below an adjoint whose table is not): that guard
    reads the image's index, which a row without the image sets to 0, so the drivers could
    not bound the row with it and every row would run the edge function (a 4096² heat
    step's reverse: 16x slower). ``columns`` receives the reads' coordinates along their
    last axis."""
    images = RowImages(space)
    walked = sites.walk(graph, members, seeds, space, guards=found, images=images, columns=columns)
    if walked is None or not images.found:
        return walked, (images if walked is not None else None)
    if not images.numbered_first():  # another coordinate came first (a scatter's positions): keep theirs
        again, guards, lasts = RowImages(space, reserve=images.count), [], {}
        redone = sites.walk(graph, members, seeds, space, guards=guards, images=again, columns=lasts)
        if redone is not None and again.count == images.count and again.numbered_first():
            walked, images, found[:] = redone, again, guards
            columns.clear()
            columns.update(lasts)
    if images.numbered_first() and not any(reads_past(form, len(space)) for form, _, _ in found):
        return walked, images
    found.clear()
    columns.clear()
    return sites.walk(graph, members, seeds, space, guards=found, columns=columns), None


def reads_past(form: Affine, rank: int) -> bool:
    """Whether a guard's form reads a coordinate past the loop space's ``rank`` (a join's
    input, a gather's index, a row image's index): no driver bounds a row with such a guard
    (`drivers`: the row is an edge)."""
    return len(form.w) > rank


def largest(graph: Graph, group: KernelGroup) -> int:
    """The most elements of the group's space or of a tensor it reads or writes."""
    return max([math.prod(group.space), *(graph.types[v].size for v in (*group.inputs, *group.nodes))])


def _wide_ok(graph: Graph, nest: Nest) -> bool:
    """Whether every part of ``nest`` takes 64-bit indices: the drivers and contiguous,
    strided, broadcast and scalar reads do; guards (per-axis views through image tables),
    row maps, digit reads, gathers, constant tables, sparse maps and scatters index with
    32-bit ints."""
    if nest.guards or nest.images or nest.digits or nest.row_map is not None or nest.group.kind == "scatter":
        return False
    if any(r.mode == "gather" for r in nest.reads.values()):
        return False
    nodes = [graph.node_map[n] for n in nest.group.nodes]
    return not any(gathers.covered(node) or sparse.is_sparse(node.opdef) for node in nodes)


def _refined(
    graph: Graph,
    members: set[str],
    seeds: list[str],
    space: tuple[int, ...],
    axes: tuple[int, ...],
    found: list[Guard],
    columns: dict[Site, Affine | None],
) -> tuple[tuple[int, ...], tuple[int, ...], list[Site] | None, RowImages | None]:
    """A group iterated over the factorisation of its space that refines every
    layout-preserving view's shapes (`sites.refine`): that space, the reduced ``axes`` in it
    (each original axis is a run of refined ones: the same flat order, the same outputs), its
    walk and its row images, as `_walk_rows` makes them over that space (a stencil that a
    scatter's ``add_at`` then flattens takes row images and row ends as it would unflattened);
    (space, axes, None, None) when there is none or its walk fails too."""
    finer = sites.refine(graph, members, space)
    if finer is None:
        return space, axes, None, None
    found.clear()
    columns.clear()
    ends = [math.prod(finer[: b + 1]) for b in range(len(finer))]
    lo = [math.prod(space[:a]) for a in range(len(space))]
    owner = [max(a for a in range(len(space)) if lo[a] < e) for e in ends]  # the original axis of each
    walked, images = _walk_rows(graph, members, seeds, finer, found, columns)
    return finer, tuple(b for b, a in enumerate(owner) if a in axes), walked, images


def _classified(walked: list[Site], space: tuple[int, ...], k: int, images: int = 0) -> dict[Site, Read] | None:
    """Each memory read's `Read` over ``k`` inner axes (`classify`, ``images``: the row
    images' coordinates past the space); None if one has none."""
    reads = {}
    for site in walked:
        r = classify(site, space, k, images)
        if r is None:
            return None
        reads[site] = r
    return reads


def _spread(
    group: KernelGroup,
    space: tuple[int, ...],
    axes: tuple[int, ...],
    walked: list[Site],
    most: int,
    roots: list[str],
    stores: list[str],
    templates: dict[str, CxxReduce],
    after: list[str],
    after_shape: tuple[int, ...],
    guards: list[Guard],
    images: int = 0,
) -> Nest | None:
    """The nest of a reduction over non-adjacent ``axes`` (`rowmap`), no transpose: with the
    last axis reduced, one output per kept element reduces its sub-rows (the trailing
    reduced axes every read is contiguous over) in row-major order of the reduced axes;
    with the last axis kept, columns over the trailing kept axes (every read contiguous
    over them) accumulate over their rows, found through the row map."""
    n = len(space)
    if axes[-1] == n - 1:
        block = n - next(a for a in range(n) if all(b in axes for b in range(a, n)))
        k = _inner_axes(walked, space, min(block, most), images)
    else:
        k = _inner_axes(walked, space, min(n - 1 - axes[-1], most), images)
    cut = n - k
    reads = _classified(walked, space, k, images)
    if reads is None:
        return None
    row_map = RowMap(space[:cut], tuple(a in axes for a in range(cut)))
    sub = math.prod(space[cut:])
    if axes[-1] == n - 1:  # one row per output, of R elements: sub-rows of `sub` elements
        outer, inner, columns = tuple(d for a, d in enumerate(space) if a not in axes), row_map.count * sub, None
    else:
        outer, inner, columns = space[:cut], sub, (1, row_map.count, row_map.kept, sub)
    parts = (roots, stores, templates, after, after_shape, sub, space[:cut], guards, columns, row_map)
    return Nest(group, space, outer, inner, reads, *parts)


def _descendants(graph: Graph, members: set[str], roots: list[str]) -> set[str]:
    """The members computed from ``roots`` (not the roots themselves), iteratively."""
    out: set[str] = set()
    stack = list(roots)
    while stack:
        v = stack.pop()
        for user in graph.consumers[v]:
            if user in members and user not in out:
                out.add(user)
                stack.append(user)
    return out


def _squeezed(shape: tuple[int, ...]) -> tuple[int, ...]:
    """``shape`` without its unit axes: shapes equal so have the same flat element order."""
    return tuple(d for d in shape if d != 1)


def _walked_after(graph: Graph, members: set[str], after: list[str], roots: list[str]) -> tuple[int, ...] | None:
    """The space the epilogue ``after`` iterates over: `_after_shape`, or the refinement of it
    that makes its views affine (`sites.refine`: a transpose between two reshapes of a
    reduction's output), the same flat order either way; None when neither walks."""
    shape = _after_shape(graph, after, roots)
    if shape is None or not after:
        return shape
    terminals = frozenset(roots)
    if sites.walk(graph, members, after, shape, terminals) is not None:
        return shape
    finer = sites.refine(graph, members, shape)
    if finer is None or sites.walk(graph, members, after, finer, terminals) is None:
        return None
    return finer


def _after_shape(graph: Graph, after: list[str], roots: list[str]) -> tuple[int, ...] | None:
    """The one shape (up to unit axes: the longest) of the epilogue's outputs, of the
    reductions' output size; () when there is no epilogue; None when they differ."""
    shapes = [tuple(graph.types[v].shape) for v in after]
    if not shapes:
        return ()
    if len({_squeezed(s) for s in shapes}) > 1 or not roots:
        return None  # outputs are written at output o: one flat element order
    shape = max(shapes, key=len)
    return shape if math.prod(shape) == graph.types[roots[0]].size else None


def _inner_axes(walked: list[Site], space: tuple[int, ...], most: int, images: int = 0) -> int:
    """The most trailing axes (at most ``most``) over which every read is contiguous or
    broadcast (at least the last axis, where a read may also be strided)."""
    best = min(1, most)
    for k in range(1, most + 1):
        if all(classify(site, space, k, images) for site in walked):
            best = k
        else:
            break
    return best


def scatter_covers(graph: Graph, group: KernelGroup) -> bool:
    """Whether the C++ path lowers scatter group ``group`` (see `scatter`'s docstring)."""
    (root,) = group.roots
    node = graph.node_map[root]
    layout = scatter.scatter_layout(graph, node)
    if layout.key_form is None or layout.row_form is None or list(group.outputs) != [root]:
        return False
    values, base = graph.types[node.inputs[layout.values]], graph.types[node.inputs[layout.base]]
    numeric = (*FLOAT_DTYPES, *INT_DTYPES)
    if node.type.dtype not in numeric or values.dtype != node.type.dtype or base.dtype != node.type.dtype:
        return False
    positions = node.inputs[layout.indices]
    if group.scatter.form == "sort":
        if graph.types[positions].dtype != "int32":
            return False
        return positions_nest(graph, group) is not None
    return True


def positions_nest(graph: Graph, group: KernelGroup) -> Any:
    """The nest over the positions' shape that reads a ``sort`` scatter's positions, or
    evaluates them when they are made inside the group (casts, arithmetic, views of data);
    None when `cover` refuses their producers."""
    (root,) = group.roots
    node = graph.node_map[root]
    positions = node.inputs[scatter.scatter_layout(graph, node).indices]
    members, needed, stack = set(group.nodes), set(), [positions]
    while stack:
        v = stack.pop()
        if v in members and v not in needed:
            needed.add(v)
            stack.extend(graph.node_map[v].inputs)
    nodes = [n for n in group.nodes if n in needed]
    inputs = sorted({i for n in nodes for i in graph.node_map[n].inputs if i not in needed})
    space = list(graph.types[positions].shape)
    sub = {**group.model_dump(), "kind": "pointwise", "space": space, "nodes": nodes, "roots": [], "scatter": None}
    sub.update(outputs=[positions], inputs=inputs, axes=[], epilogue=[])
    return cover(graph, KernelGroup.model_validate(sub))


def user_functions(graph: Graph, names: list[str]) -> list[str]:
    """The ``dp.*`` functions the nodes ``names`` come from (`origin_of`), in order, once each."""
    return list(dict.fromkeys(o for o in (origin_of(graph, n) for n in names) if o))


def _tensor(graph: Graph, value: str) -> str:
    """How a message names ``value``: a program input by its name, a node by its ``dp.*``
    function (its origin: a composite's, or the gradient's of one) and name and op."""
    if value in graph.input_map:
        return f"input {value!r}"
    origin = origin_of(graph, value)
    op = graph.node_map[value].opdef.name
    return f"the result of {origin} (node {value!r}, op {op!r})" if origin else f"node {value!r} (op {op!r})"


def missing_lowering(graph: Graph, group: KernelGroup) -> str:
    """Why `cover` refuses ``group``, for the compile error, in the user's terms (the ``dp.*``
    functions, the tensors): the members whose op has no C++ lowering at all (a user op
    registered without ``cxx``), values of a dtype it does not lower, a tensor past its
    indexing (`_too_large`), or else the combination of functions it does not lower."""
    bare = [(n, graph.node_map[n].opdef.name) for n in group.nodes if not graph.node_map[n].opdef.lowered]
    if bare:
        named = ", ".join(f"op {op!r} (node {n!r})" for n, op in bare)
        return (
            f"{named} with no C++ lowering (an OpDef registered without `cxx=`, its C++ element expression: "
            "see docs/adding-an-op.md); dp.interpret still runs it"
        )
    dtypes = sorted({graph.types[v].dtype for v in (*group.nodes, *group.inputs)} - set(C_TYPES))
    if dtypes:
        return f"values of dtype {dtypes}, which the C++ path does not lower (it lowers {sorted(C_TYPES)})"
    if largest(graph, group) > INDEX_LIMIT:
        return _too_large(graph, group)
    ops = sorted({f"op {graph.node_map[n].opdef.name!r}" for n in group.nodes})
    functions = ", ".join(user_functions(graph, list(group.nodes)) or ops)
    return (
        f"{functions} over a {group.kind} space of shape {list(group.space)}: a combination of reads the C++ "
        "backend does not lower (see docs/backend.md, 'Which groups take it')"
    )


def _too_large(graph: Graph, group: KernelGroup) -> str:
    """Why a group past `INDEX_LIMIT` is refused, naming its largest tensor, its size and
    the limit: past `WIDE_LIMIT` elements, or a part of the group that indexes with 32-bit
    ints (`_wide_ok`) or a launch past 32-bit task indices (`kernels.group_kernels`)."""
    values = [v for v in (*group.inputs, *group.nodes) if graph.types[v].size == largest(graph, group)]
    value = values[0] if values else group.outputs[0]
    t = graph.types[value]
    what = f"{_tensor(graph, value)} of shape {list(t.shape)}, {t.size} elements"
    if largest(graph, group) > WIDE_LIMIT:
        return (
            f"{what}: the C++ backend indexes with 64-bit integers and binds a buffer as Warp arrays of at most "
            f"{WIDE_LIMIT} elements (expected a smaller tensor: split the array into pieces of at most that many)"
        )
    ops = sorted({f"op {graph.node_map[n].opdef.name!r}" for n in group.nodes})
    functions = ", ".join(user_functions(graph, list(group.nodes)) or ops)
    return (
        f"{what}, past the {INDEX_LIMIT} (2**31 - 2**20) elements of 32-bit indexing, in a group of {functions} "
        "that stays 32-bit: 64-bit indexing covers pointwise and reduction kernels reading memory contiguously, "
        "strided or broadcast, not gathers, constant tables, padded or reshaped views, reductions over "
        "non-adjacent axes, scatters or launches of more than that many tasks (expected a smaller tensor: "
        "split the array into pieces of at most that many elements)"
    )

"""fusion: group the nodes of each phase into kernels.

Assumes: every node is tagged with a phase (`saved_attributes` ran).
Guarantees: the graph's kernel plan (`kernel_ir.KernelPlan`, read with `kernel_ir.plan_of`;
an earlier plan and its schedule are dropped) lists the kernels of the program, each a
`kernel_ir.KernelGroup` with ``id``, ``phase``, ``kind`` (``pointwise``, ``reduction``,
``scatter``: one scatter node, never merged, with ``scatter``: how it is made deterministic
and why, or ``contraction``: one matrix product, never merged, whose operands are written to
memory first: its kernel loads them as tiles, or ``recurrence``: one line filter, never
merged, whose input is written to memory first: its kernel runs the recursion along whole
lines, or ``projection``: one matrix-free projection, never merged, its input written to memory
first), ``space`` (the iteration space: the output shape, or the reduced input's shape),
``axes`` (reduced axes), ``nodes`` (topological order), ``roots`` (the values it computes
for others), ``inputs``/``outputs`` (values read from / written to memory) and bytes moved;
its ``boundaries`` say why each materialised value was not fused into its readers, its
``halo`` which producers are recomputed over a stencil's halo; ``meta["rows"]`` lists the
row sets (`fusion_rows`, `kernel_ir.RowSet`: groups one CPU task runs row by row while the
row is in cache), whose members are consecutive in the groups. Nested inlining emits at most
`MAX_CODE_COPIES` copies of any producer's code (ops declare their copies with
``code_copies``), and a kernel inlines a bounded number of nodes
(`fusion_steps.MAX_KERNEL_WORK` of `OpDef.work` per value, every strand a cut cone carries on cut with it);
a repeated step (`fusion_steps.step_cuts`) is one kernel, the same for every step, merged
with no other. Every node belongs to at least one group; a cheap elementwise or shape node
read by several groups is recomputed in each (at most ``max_inline_consumers``) rather than
written and read back, unless its inline code holds a stencil: recomputing that in several
kernels widens the halo each of them recomputes, step after step in a time-stepped model.
Decisions use op kinds and costs only, never op names. Values are unchanged; only ``meta``
(graph and nodes) is added."""

from __future__ import annotations

import networkx as nx
from pydantic import Field

from dpt_ir.ir import traits
from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.kernel_ir import Boundary, Halo, KernelGroup, KernelPlan, ScatterForm, with_plan
from dpt_ir.ir.records import group_tag, phase_of, saved_values
from dpt_ir.passes import fusion_rows
from dpt_ir.passes.fusion_expand import expanding_reads
from dpt_ir.passes.fusion_groups import Group, group_dag, merge_chains, merge_epilogues, merge_siblings
from dpt_ir.passes.fusion_products import merge_product_epilogues
from dpt_ir.passes.fusion_steps import bound_kernel_nodes, past_views, step_cuts
from dpt_ir.passes.options import CompileOptions, PassOptions

NAME = "fusion"
HALO_BUDGET = 48  # default work per element a multi-read node may spend recomputing what it reads
# Most copies of one producer's code that nested inlining may emit in a kernel (a fold
# inlined into a fold multiplies their images: 17 x 17 for a two-axis `nearest` blur of
# radius 8 made a 400 KB kernel and a 45 s compile).
MAX_CODE_COPIES = 64


class FusionOptions(PassOptions):
    """``fuse``: group nodes (off: one kernel per node); ``max_inline_consumers``: groups a cheap
    value may be recomputed in before it is materialised; ``halo_budget``: the work per element
    a multi-read node may spend recomputing what it reads; ``row_budget``: the bytes of one row
    a row set may read or write (0 is a budget too: no set fits); ``product_epilogues``: the
    largest matrix product (output elements) whose pointwise consumer runs inside the product's
    kernel (`fusion_products`; 0: none, None: any; the same bits either way)."""

    fuse: bool = True
    max_inline_consumers: int = Field(default=4, ge=0)
    halo_budget: int = Field(default=HALO_BUDGET, ge=0)
    row_budget: int = Field(default=fusion_rows.ROW_BUDGET, ge=0)
    product_epilogues: int | None = Field(default=None, ge=0)


def run(graph: Graph, options: FusionOptions | CompileOptions | None = None) -> Graph:
    opts = FusionOptions.of(options)
    fuse = opts.fuse
    roots, reasons, halo, steps = _materialised(graph, fuse, opts.max_inline_consumers, opts.halo_budget)
    groups = _closures(graph, roots, steps)
    if fuse:
        groups = merge_chains(graph, groups)
        groups = merge_siblings(graph, groups)
        groups = merge_epilogues(graph, groups)
        if opts.product_epilogues != 0:
            groups = merge_product_epilogues(graph, groups, opts.product_epilogues)
    graph = _annotate(graph, groups, reasons, halo)
    if not fuse:
        return graph
    return fusion_rows.annotate(graph, opts.row_budget)  # row sets


def _eval_cost(graph: Graph, value: str, reasons: dict[str, str], memo: dict[str, int]) -> int:
    """Work per element of ``value`` when everything not materialised below it is
    recomputed inline: each op counts its `OpDef.work` (transcendentals weigh more than
    arithmetic), a stencil its reads; views and constants cost nothing. An explicit
    stack, not recursion: chains of any depth."""
    stack = [value]
    while stack:
        name = stack[-1]
        node = graph.node_map.get(name)
        if name in memo or node is None or name in reasons:
            memo.setdefault(name, 0)  # inputs and materialised values are read, not recomputed
            stack.pop()
            continue
        pending = [i for i in node.inputs if i not in memo]
        if pending:
            stack.extend(pending)
            continue
        stack.pop()
        reads = traits.reads(node)
        # A stencil's own work is its multiply-adds.
        own = 0 if traits.is_view(node) else reads if reads > 1 else node.opdef.work
        memo[name] = own + sum(memo[i] for i in node.inputs) * reads
    return memo[value]


def _gather_reuse(graph: Graph, node: Node) -> int:
    """How many times, on average, a node reading its source at data-dependent positions
    (`OpDef.data_dependent_reads`: a gather) reads each source element: its output
    elements over the source's (a bicubic warp's footprint gathers each sample 16 times),
    counting every gather of the same source (a warp's one gather per footprint tap);
    1 for every other node."""
    if not node.opdef.data_dependent_reads or not node.inputs:
        return 1
    source = node.inputs[0]
    gathers = {c for c in graph.consumers[source] if graph.node_map[c].opdef.data_dependent_reads}
    gathered = sum(graph.node_map[c].type.size for c in gathers if graph.node_map[c].inputs[0] == source)
    return max(1, -(-gathered // max(graph.types[source].size, 1)))


def _halo(graph: Graph, reasons: dict[str, str], budget: int) -> list[Halo]:
    """Decide, for each node that reads its input several times per element (a stencil's
    taps, a fold's images, a gather's average reuse of its source), whether what it reads
    is recomputed inline at every read (cheap) or materialised (its cost times the reads
    exceeds ``budget``)."""
    notes = []
    for node in graph.nodes:
        base, gathered = traits.reads(node), _gather_reuse(graph, node)
        if base == 1 and gathered == 1:
            continue
        for k, value in enumerate(node.inputs):
            reads = max(base, gathered) if k == 0 else base
            if reads == 1:
                continue
            # Single-read views (pad, slices) are index arithmetic: decide for what they read.
            value = past_views(graph, value, reasons)
            cost = _eval_cost(graph, value, reasons, {})
            if cost == 0:
                continue
            if cost * reads > budget:
                reasons[value] = (
                    f"read {reads} times per element by {node.name}: recomputing its {cost} op(s) "
                    f"at each read would cost {cost * reads} per element; written once instead"
                )
            else:
                notes.append(Halo(value=value, stencil=node.name, reads=reads, cost=cost))
    return notes


def _bound_code_copies(graph: Graph, reasons: dict[str, str]) -> None:
    """Materialise what a multi-copy node (a fold) reads when inlining it would emit more
    than `MAX_CODE_COPIES` copies of some producer's code. Nodes are visited in order, so
    a value's own copies are already bounded when its readers are decided."""
    below: dict[str, int] = {}  # value -> copies of the deepest code it inlines
    for node in graph.nodes:
        inner = max((below.get(i, 1) for i in node.inputs if i not in reasons), default=1)
        images = traits.copies(node)
        if images > 1 and images * inner > MAX_CODE_COPIES:
            for value in node.inputs:
                if value in graph.node_map and value not in reasons and below.get(value, 1) > 1:
                    reasons[value] = (
                        f"read at {images} boundary images by {node.name}: inlining it would emit "
                        f"{images * below[value]} copies of its code (more than {MAX_CODE_COPIES}); "
                        "written once instead"
                    )
            inner = 1  # every input that inlined copies is now written once
        below[node.name] = images * inner


def _materialised(
    graph: Graph, fuse: bool, limit: int, budget: int
) -> tuple[list[str], dict[str, str], list[Halo], set[str]]:
    """Nodes whose value is written to memory, why each one is, the halo notes, and the
    step values (`fusion_steps.step_cuts`) whose groups are merged with no other."""
    outputs = {o.value for o in graph.outputs}
    saved = saved_values(graph)
    reasons: dict[str, str] = {}
    for node in graph.nodes:
        if node.name in outputs:
            reasons[node.name] = "a graph output"
        elif node.name in saved:
            reasons[node.name] = "saved: read by the backward phase"
        elif not traits.is_pointwise(node):
            reasons[node.name] = f"a {node.opdef.kind} result: its readers need it complete (next kernel)"
        elif not fuse and not traits.is_free(node):
            reasons[node.name] = "fusion is off"
        elif any(phase_of(graph.node_map[c]) != phase_of(node) for c in graph.consumers[node.name]):
            reasons[node.name] = "read by the other phase"
    _contraction_operands(graph, reasons)
    steps = step_cuts(graph, reasons) if fuse else set()
    halo = _halo(graph, reasons, budget) if fuse else []
    if fuse:
        expanding_reads(graph, reasons, budget, lambda value: _eval_cost(graph, value, reasons, {}))
        _bound_code_copies(graph, reasons)
        bound_kernel_nodes(graph, reasons)
    while True:
        counts = _closure_counts(graph, set(reasons))
        over = [n for n, k in counts.items() if k > limit and not traits.is_view(graph.node_map[n])]
        for n in over:
            reasons[n] = f"read by {counts[n]} groups (more than {limit}): computed once, not recomputed in each"
        halos = _inlined_stencils(graph, reasons)
        shared = [n for n, k in counts.items() if k > 1 and n not in reasons and n in halos]
        for n in shared:
            reasons[n] = (
                f"read by {counts[n]} groups, and its inline code holds the stencil {halos[n]}: computed once, "
                "not recomputed in each (each kernel would widen the halo it recomputes)"
            )
        if not over and not shared:
            break
    order = {n.name: k for k, n in enumerate(graph.nodes)}
    notes = [h for h in halo if h.value not in reasons]
    return sorted(reasons, key=order.__getitem__), reasons, notes, steps


# Kinds whose kernels read their operands straight from memory: the operands are materialised.
_LOADS_OPERANDS = {
    "contraction": "its kernel loads operand tiles",
    "recurrence": "its kernel runs the recursion along lines loaded from memory",
    "projection": "its kernel reads each pixel from memory at the angles' taps",
}


def _contraction_operands(graph: Graph, reasons: dict[str, str]) -> None:
    """Materialise the operands of every contraction (matmul), recurrence (a line filter) and
    projection (radon): their kernels load operands straight from memory
    (`dpt_ir.backends.cxx.contraction`, `recurrence`, `projection`), so nothing is inlined into
    them; a contraction reads each operand element many times, which inlining would recompute."""
    for node in graph.nodes:
        why = _LOADS_OPERANDS.get(node.opdef.kind)
        if why is None:
            continue
        for value in node.inputs:
            if value in graph.node_map and value not in reasons:
                reasons[value] = f"an operand of the {node.opdef.kind} {node.name}: {why}"


def _inlined_stencils(graph: Graph, reasons: dict[str, str]) -> dict[str, str]:
    """For each node, the first node reading its input several times per element (a
    stencil's taps, a fold's images) that recomputing it inline would recompute, if any:
    one forward sweep over what is not materialised."""
    holds: dict[str, str] = {}
    for node in graph.nodes:
        if traits.multi_read(node):
            holds[node.name] = node.name
            continue
        for i in node.inputs:
            if i in holds and i not in reasons:
                holds[node.name] = holds[i]
                break
    return holds


def _closure_counts(graph: Graph, roots: set[str]) -> dict[str, int]:
    """For each node that is not a root, how many of the groups `_closures` builds for
    ``roots`` contain it: the roots that reach it through non-root nodes, as bitmasks
    propagated from consumers to producers in one reverse sweep. Building every closure
    instead visits a node once per group holding it, quadratic on a chain whose roots
    each recompute the chain above them."""
    bit = {r: 1 << k for k, r in enumerate(sorted(roots))}
    reached: dict[str, int] = {}
    for node in reversed(graph.nodes):
        name = node.name
        if name in roots:
            continue
        mask = 0
        for c in graph.consumers[name]:
            mask |= bit[c] if c in roots else reached[c]
        reached[name] = mask
    return {n: m.bit_count() for n, m in reached.items() if m}


def _closures(graph: Graph, roots: list[str], steps: set[str]) -> list[Group]:
    """One group per root: the root plus the pointwise nodes it reads, up to other roots; a
    step value's group is pinned (it merges with no other, so every step's kernel is one)."""
    root_set = set(roots)
    groups = []
    order = {n.name: k for k, n in enumerate(graph.nodes)}
    for k, r in enumerate(sorted(roots, key=order.__getitem__)):
        node = graph.node_map[r]
        if traits.is_pointwise(node):
            g = Group(f"g{k}", phase_of(node), "pointwise", node.type.shape)
        elif node.opdef.kind in ("scatter", "contraction", "recurrence", "projection"):
            g = Group(f"g{k}", phase_of(node), node.opdef.kind, node.type.shape)
        else:
            attrs = node.opdef.parse_attrs(node.attrs, r)
            space = graph.types[node.inputs[0]].shape
            g = Group(f"g{k}", phase_of(node), "reduction", space, tuple(getattr(attrs, "axes", ())))
        g.roots.append(r)
        g.pinned = r in steps
        stack = [r]
        while stack:
            n = stack.pop()
            if n in g.nodes:
                continue
            g.nodes.add(n)
            for i in graph.node_map[n].inputs:
                if i in graph.node_map and i not in root_set:
                    stack.append(i)
        groups.append(g)
    return groups


def scatter_form(graph: Graph, root: str) -> ScatterForm:
    """How scatter node ``root`` is made deterministic (no float atomics): ``transpose``
    when its positions depend on no program input (the backend builds their transpose at
    compile time, and the scatter is an ordered gather), else ``sort`` (a counting sort of
    the positions by destination per evaluation, then an ordered segmented sum)."""
    node = graph.node_map[root]
    attrs = node.opdef.parse_attrs(node.attrs, root)
    layout = node.opdef.scatter(attrs, node.type.shape, ())  # type: ignore[misc]
    positions = node.inputs[layout.indices]
    stack, seen = [positions], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in graph.input_map:
            return ScatterForm(
                node=root,
                form="sort",
                reason=f"positions {positions} depend on program input {v}: counting sort by destination "
                "per evaluation, then an ordered segmented sum",
            )
        stack.extend(graph.node_map[v].inputs)
    return ScatterForm(
        node=root,
        form="transpose",
        reason=f"positions {positions} are a compile-time constant: transposed at compile time "
        "(stable sort by destination), summed as an ordered gather",
    )


def _is_product(graph: Graph, group: Group, root: str) -> bool:
    """Is ``root`` the product of contraction group ``group`` (not one of its epilogue roots)?"""
    return group.kind == "contraction" and graph.node_map[root].opdef.kind == "contraction"


def _annotate(graph: Graph, groups: list[Group], reasons: dict[str, str], halo: list[Halo]) -> Graph:
    dag = group_dag(graph, groups)
    by_id = {g.id: g for g in groups}
    order = list(
        nx.lexicographical_topological_sort(
            dag, key=lambda gid: (0 if by_id[gid].phase == "forward" else 1, int(gid[1:]))
        )
    )
    renumber = {gid: f"{'f' if by_id[gid].phase == 'forward' else 'b'}{k}" for k, gid in enumerate(order)}
    node_order = {n.name: k for k, n in enumerate(graph.nodes)}
    owner = {r: g.id for g in groups for r in g.roots}
    read_by: dict[str, set[str]] = {}  # value -> groups that read it from memory
    for g in groups:
        for n in g.nodes:
            for i in graph.node_map[n].inputs:
                if i not in g.nodes:
                    read_by.setdefault(i, set()).add(g.id)
    records, first_group = [], {}
    graph_outputs = {o.value for o in graph.outputs}
    for gid in order:
        g = by_id[gid]
        nodes = sorted(g.nodes, key=node_order.__getitem__)
        reads = sorted(
            {i for n in nodes for i in graph.node_map[n].inputs if i not in g.nodes},
            key=lambda v: (v not in node_order, node_order.get(v, 0), v),
        )
        roots = sorted(set(g.roots), key=node_order.__getitem__)
        # A root read only inside its own kernel (a reduction feeding its epilogue) stays in registers;
        # one that another kernel reads is written, even if its direct consumers are recomputed here too.
        # A product is written even when only its epilogue reads it: the epilogue reads each
        # finished tile back (`fusion_products`).
        writes = [r for r in roots if r in graph_outputs or read_by.get(r, set()) - {gid} or _is_product(graph, g, r)]
        records.append(
            KernelGroup(
                id=renumber[gid],
                phase=g.phase,
                kind=g.kind,
                space=g.space,
                axes=g.axes,
                epilogue=tuple(sorted(g.epilogue, key=node_order.__getitem__)),
                nodes=tuple(nodes),
                roots=tuple(roots),
                inputs=tuple(reads),
                outputs=tuple(writes),
                bytes_read=sum(graph.types[v].nbytes for v in reads),
                bytes_written=sum(graph.types[v].nbytes for v in writes),
                scatter=scatter_form(graph, roots[0]) if g.kind == "scatter" else None,
            )
        )
        for n in nodes:
            first_group.setdefault(n, renumber[gid])
    boundaries = [
        Boundary(value=v, from_=renumber[owner[v]], to=r.id, reason=reasons[v])
        for r in records
        for v in r.inputs
        if v in owner
    ]
    # Only the meta's group tag changes: an unchecked copy, as in `util.substitute` (same reason).
    nodes = tuple(n.model_copy(update={"meta": {**n.meta, **group_tag(first_group[n.name])}}) for n in graph.nodes)
    plan = KernelPlan(groups=tuple(records), boundaries=tuple(boundaries), halo=tuple(halo))
    return with_plan(graph, plan, nodes=nodes)

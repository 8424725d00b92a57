"""saved_attributes: partition the joint graph into forward and backward phases.

Assumes: the joint graph from `autodiff` (its `Autodiff` record names the cotangent
inputs still unknown at compile time and the gradient outputs).

Guarantees:
- every node is tagged ``phase=forward`` or ``phase=backward``; forward nodes read only
  program inputs and forward values;
- the values a backward node reads from the forward phase are the *saved set*, chosen
  by a minimum cut (networkx) that minimises saved bytes. Program inputs and forward
  outputs cost nothing (the caller keeps inputs immutable until the pass closes; outputs
  are written anyway). Nodes that do not depend on a cotangent may be recomputed in the
  backward (a clone named ``<name>.re``) unless their op is a reduction, a stencil or
  marked expensive, or (with ``options.recompute_budget``) recomputing them would cost
  more than that budget of op ``work`` per element, counted from the nearest values the
  backward can read (program inputs, and values kept in the forward);
- the `SavedPlan` record (`dpt_ir.ir.records`): ``recomputed`` lists each clone with the
  value it recomputes, the op work per element the backward spends on it (its own op and
  the recomputed values it reads), the bytes saving the value would have cost, the recompute budget and the reason;
- ``saved`` lists each saved value with its bytes, provenance (the forward node),
  readers (backward nodes) and the reason it is saved rather than recomputed;
  ``derived_attributes`` lists the static attributes (counts, shapes) the
  backward reads instead of a tensor;
- values are unchanged: every clone computes exactly what its original computes.

Without cotangent inputs (forward only, or every seed fixed at compile time) all nodes
are forward and nothing is saved: forward and backward can then share kernels.
"""

from __future__ import annotations

import networkx as nx

from dpt_ir.ir.graph import Graph, Node, unique_name
from dpt_ir.ir.records import (
    DerivedAttribute,
    Phase,
    Recomputed,
    SavedPlan,
    SavedValue,
    cotangents,
    grad_of,
    gradients,
    has_phase,
    phase_of,
    phase_tag,
    recompute_of,
    recompute_tags,
    with_saved_plan,
)
from dpt_ir.passes.options import CompileOptions, PassOptions

NAME = "saved_attributes"
NOT_RECOMPUTED = ("reduction", "stencil")
RECOMPUTE_SUFFIX = ".re"


class SavedOptions(PassOptions):
    """``recompute``: let the backward recompute cheap forward values; ``recompute_budget``: the
    op work per element one recomputed value may cost (None: no limit)."""

    recompute: bool = True
    recompute_budget: int | None = None


def run(graph: Graph, options: SavedOptions | CompileOptions | None = None) -> Graph:
    opts = SavedOptions.of(options)
    cts = set(cotangents(graph).values())
    needs_ct = _descendants(graph, cts)
    if not needs_ct:
        nodes = tuple(_tag(n, "forward") for n in graph.nodes)
        return graph.replace(
            nodes=nodes,
            meta=with_saved_plan(
                graph.meta, SavedPlan(saved=(), saved_bytes=0, derived_attributes=_derived(graph)), recomputed=False
            ),
        )
    recompute, budget = opts.recompute, opts.recompute_budget
    over_budget = _over_budget(graph, needs_ct, budget) if recompute and budget is not None else {}
    source_side = _min_cut(graph, needs_ct, recompute, set(over_budget))
    return _rewrite(graph, needs_ct, source_side, over_budget, budget)


def _descendants(graph: Graph, roots: set[str]) -> set[str]:
    """The nodes that read a value of ``roots``, directly or not: one sweep in node order."""
    out: set[str] = set()
    for node in graph.nodes:
        if any(i in roots or i in out for i in node.inputs):
            out.add(node.name)
    return out


def forward_outputs(graph: Graph) -> set[str]:
    grads = set(gradients(graph).values())
    return {o.value for o in graph.outputs if o.name not in grads}


def backward_outputs(graph: Graph) -> set[str]:
    grads = set(gradients(graph).values())
    return {o.value for o in graph.outputs if o.name in grads}


def _pinned_forward(node: Node) -> bool:
    op = node.opdef
    return op.kind in NOT_RECOMPUTED or op.cost == "expensive"


def _over_budget(graph: Graph, needs_ct: set[str], budget: int) -> dict[str, int]:
    """Forward values too costly to recompute: value -> the work per element recomputing
    it would take. Work accumulates along the inputs from the values the backward can
    read (program inputs, pinned ops, values already over budget, which are kept in the
    forward and so cost nothing more); a shared ancestor counts once per path, which errs
    towards keeping values."""
    inputs = {i.name for i in graph.inputs}
    rework: dict[str, int] = {}
    over: dict[str, int] = {}
    for node in graph.nodes:
        if node.name in needs_ct or node.name in inputs:
            continue
        if _pinned_forward(node):
            rework[node.name] = 0
            continue
        cost = node.opdef.work + sum(rework.get(i, 0) for i in node.inputs)
        if cost > budget:
            over[node.name] = cost
            cost = 0
        rework[node.name] = cost
    return over


def _min_cut(graph: Graph, needs_ct: set[str], recompute: bool, kept: set[str]) -> set[str]:
    """Values computed in the forward phase (``v:in`` on the source side of the cut).

    Each value ``v`` is an edge ``v:in -> v:out`` whose capacity is the bytes it costs to
    save; data edges are infinite. Cotangent-dependent values and backward outputs feed the
    sink (a backward output that reads no cotangent, such as a zero gradient, is then still
    computed in the backward); values that must be computed in the forward (outputs, pinned
    ops, ``kept`` values over the recompute budget, everything when recompute is off) hang
    from the source. Cotangent-dependent values
    cannot be saved (infinite).
    """
    fwd_out = forward_outputs(graph)
    cts = set(cotangents(graph).values())
    flow = nx.DiGraph()
    inputs = {i.name for i in graph.inputs}
    for name in graph.types:
        if name in needs_ct or name in cts:
            flow.add_edge(f"{name}:in", f"{name}:out")
            flow.add_edge(f"{name}:out", "sink")
        else:
            free = name in inputs or name in fwd_out
            flow.add_edge(f"{name}:in", f"{name}:out", capacity=0 if free else _save_cost(graph, name))
    for name in backward_outputs(graph):
        flow.add_edge(f"{name}:out", "sink")
    for i in inputs - cts:
        flow.add_edge("source", f"{i}:in")
    for node in graph.nodes:
        for i in node.inputs:
            flow.add_edge(f"{i}:out", f"{node.name}:in")
        forward_only = node.name in fwd_out or node.name in kept or not recompute or _pinned_forward(node)
        if node.name not in needs_ct and forward_only:
            flow.add_edge("source", f"{node.name}:in")
    _, (source_set, _) = nx.minimum_cut(flow, "source", "sink")
    return {k[: -len(":in")] for k in source_set if k.endswith(":in")}


def _save_cost(graph: Graph, name: str) -> int:
    """Twice the bytes of saving ``name``, less one when it is a reduction or stencil result
    (written to memory anyway): of two cuts saving equal bytes, the one saving such results
    wins, so no extra forward kernel materialises a value only to save it."""
    node = graph.node_map[name]
    nbytes = node.type.nbytes
    return 2 * nbytes - (1 if nbytes and _pinned_forward(node) else 0)


def _ancestors(graph: Graph, values: set[str]) -> set[str]:
    live = set(values)
    for node in reversed(graph.nodes):
        if node.name in live:
            live.update(node.inputs)
    return live


def _rewrite(
    graph: Graph, needs_ct: set[str], source_side: set[str], over_budget: dict[str, int], budget: int | None
) -> Graph:
    """Tag phases, clone forward values the backward recomputes, record the saved set."""
    inputs = {i.name for i in graph.inputs}
    bwd_out = backward_outputs(graph)
    in_backward = _ancestors(graph, bwd_out) - source_side - inputs
    saved = {i for n in graph.nodes if n.name in in_backward for i in n.inputs if i in source_side and i not in inputs}
    forward_roots = forward_outputs(graph) | saved | (bwd_out & source_side)
    in_forward = _ancestors(graph, forward_roots) - needs_ct - inputs
    clones: dict[str, str] = {}
    nodes: list[Node] = []
    taken = set(graph.types)
    for node in graph.nodes:
        backward_inputs = tuple(clones.get(i, i) for i in node.inputs)
        if node.name in in_forward:
            nodes.append(_tag(node, "forward"))
            if node.name in in_backward:
                clone = unique_name(node.name + RECOMPUTE_SUFFIX, taken)
                clones[node.name] = clone
                meta = {**node.meta, **recompute_tags(node.name)}
                nodes.append(node.with_(name=clone, inputs=backward_inputs, meta=meta))
        elif node.name in in_backward:
            nodes.append(_tag(node.with_(inputs=backward_inputs), "backward"))
    outputs = tuple(o.with_(value=clones.get(o.value, o.value)) if o.value in bwd_out else o for o in graph.outputs)
    records = _saved_records(graph, saved, nodes, over_budget, budget)
    plan = SavedPlan(
        saved=records,
        saved_bytes=sum(r.bytes for r in records),
        recomputed=_recomputed_records(graph, nodes, budget),
        derived_attributes=_derived(graph),
    )
    return graph.replace(nodes=tuple(nodes), outputs=outputs, meta=with_saved_plan(graph.meta, plan))


def _tag(node: Node, phase: Phase) -> Node:
    if phase_of(node) == phase and has_phase(node):
        return node
    return node.with_(meta={**node.meta, **phase_tag(phase)})


def _saved_records(
    graph: Graph, saved: set[str], nodes: list[Node], over_budget: dict[str, int], budget: int | None
) -> tuple[SavedValue, ...]:
    fwd_out = forward_outputs(graph)
    readers_of: dict[str, list[str]] = {}
    for n in nodes:
        if phase_of(n) == "backward":
            for i in dict.fromkeys(n.inputs):
                readers_of.setdefault(i, []).append(n.name)
    pinned_above = _PinnedAncestors(graph)
    records = []
    for node in graph.nodes:
        if node.name not in saved:
            continue
        readers = readers_of.get(node.name, [])
        records.append(
            SavedValue(
                value=node.name,
                bytes=node.type.nbytes,
                type=node.type.short(),
                provenance=node.name,
                op=node.op,
                readers=tuple(readers),
                reason=_reason(node, fwd_out, over_budget, budget, pinned_above),
            )
        )
    return tuple(records)


class _PinnedAncestors:
    """The pinned forward nodes (reductions, stencils, expensive ops) above each value, as
    bitmasks filled in one sweep in node order on first use: linear in the graph, where a
    search per saved value was quadratic on long chains."""

    def __init__(self, graph: Graph) -> None:
        self._graph = graph
        self._masks: dict[str, int] | None = None
        self._names: list[str] = []

    def __call__(self, name: str) -> list[str]:
        """The pinned nodes ``name`` depends on (itself excluded), sorted by name."""
        if self._masks is None:
            self._masks = self._sweep()
        mask, out = self._masks.get(name, 0), []
        while mask:
            low = mask & -mask
            out.append(self._names[low.bit_length() - 1])
            mask ^= low
        return sorted(out)

    def _sweep(self) -> dict[str, int]:
        masks: dict[str, int] = {}
        own: dict[str, int] = {}
        for node in self._graph.nodes:
            mask = 0
            for i in node.inputs:
                mask |= masks.get(i, 0) | own.get(i, 0)
            masks[node.name] = mask
            if _pinned_forward(node):
                own[node.name] = 1 << len(self._names)
                self._names.append(node.name)
        return masks


def _reason(
    node: Node, fwd_out: set[str], over_budget: dict[str, int], budget: int | None, pinned_above: _PinnedAncestors
) -> str:
    if node.name in fwd_out:
        return "a forward output, written anyway (saving it is free)"
    if _pinned_forward(node):
        return f"a {node.opdef.kind} result: reductions, stencils and expensive ops are not recomputed"
    if node.name in over_budget:
        return (
            f"recomputing it would cost {over_budget[node.name]} work per element, over the recompute "
            f"budget {budget}; saving {node.type.nbytes} B instead"
        )
    pinned = pinned_above(node.name)
    if pinned:
        return (
            f"recomputing it would need the reduction result(s) {pinned} as well; "
            f"saving {node.type.nbytes} B is the minimum cut"
        )
    return f"saving {node.type.nbytes} B is cheaper than what recomputing it would have to save"


def _recomputed_records(graph: Graph, nodes: list[Node], budget: int | None) -> tuple[Recomputed, ...]:
    """Why each clone is recomputed: its work per element against the bytes saving it would cost.

    The work counts the clone's op and, along its inputs, every other clone it reads (a
    shared clone once per path, as the budget does); what it reads from memory (program
    inputs, saved values) costs no work. That work is within ``budget``: a value over it
    is kept in the forward and saved instead."""
    work: dict[str, int] = {}
    reads: dict[str, frozenset[str]] = {}
    records = []
    for node in nodes:
        original = recompute_of(node)
        if original is None:
            continue
        own, inputs = node.opdef.work, sum(work.get(i, 0) for i in node.inputs)
        work[node.name] = own + inputs
        reads[node.name] = frozenset().union(*(reads.get(i, {i}) for i in node.inputs))
        nbytes = graph.types[original].nbytes
        limit = f"within the recompute budget {budget}" if budget is not None else "with no recompute budget"
        reason = (
            f"{own + inputs} work per element ({node.op} {own}, its recomputed inputs {inputs}) {limit}: "
            f"recomputed from {_names(reads[node.name])} instead of saving {nbytes} B"
        )
        records.append(
            Recomputed(
                value=node.name,
                recomputes=original,
                op=node.op,
                work=own + inputs,
                own_work=own,
                save_bytes=nbytes,
                budget=budget,
                reason=reason,
            )
        )
    return tuple(records)


def _names(values: frozenset[str], shown: int = 3) -> str:
    if not values:
        return "constants only"
    ordered = sorted(values)
    more = f" and {len(ordered) - shown} more" if len(ordered) > shown else ""
    return ", ".join(ordered[:shown]) + more


def _derived(graph: Graph) -> tuple[DerivedAttribute, ...]:
    """Static attributes read by backward formulas instead of tensors (e.g. mean's count)."""
    has_grad = {grad_of(n) for n in graph.nodes if phase_of(n) == "backward"}
    out = []
    for node in graph.nodes:
        d = node.opdef.derivative
        if d is None or not d.derived or node.name not in has_grad:
            continue
        sig = graph.signature(node)
        for attr, fn in d.derived.items():
            out.append(DerivedAttribute(node=node.name, op=node.op, attribute=attr, value=fn(sig)))
    return tuple(out)

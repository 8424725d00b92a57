"""The fusion pass's kernel groups and how they merge.

Assumes: groups come from `fusion._closures` (one per materialised root) over a graph whose
nodes are tagged with their phase.
Guarantees: every merge keeps the group DAG acyclic and only joins groups one kernel can
run (same phase and iteration space; reductions over the same axes), never a pinned group
(a time step's kernel, which stays the same for every step): horizontal merges
of groups with no path between them (`merge_siblings`), vertical merges across written
values read elementwise at the consumer's own index (`merge_chains`), and pointwise
epilogues of reductions (`merge_epilogues`). Path questions go to `Reachability`
(bitmasks updated per merge), never to a graph search per candidate pair.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import dataclass, field

import networkx as nx

from dpt_ir.ir.graph import Graph
from dpt_ir.passes.reach import Reachability
from dpt_ir.passes.util import same_index_members

MAX_GROUP_NODES = 64  # groups merge only up to this size (compile time grows with kernel size)
# ... unless they share most of their nodes (recomputed in both): then up to this size, one
# computation instead of two (a value's gradients wrt each coordinate axis and its loss).
MAX_SHARED_GROUP_NODES = 512


@dataclass
class Group:
    id: str
    phase: str
    kind: str
    space: tuple[int, ...]
    axes: tuple[int, ...] = ()
    roots: list[str] = field(default_factory=list)
    nodes: set[str] = field(default_factory=set)
    epilogue: list[str] = field(default_factory=list)  # roots computed from the finished reduction
    pinned: bool = False  # a time step's kernel (`fusion_steps.step_cuts`): merged with no other group


def group_dag(graph: Graph, groups: list[Group]) -> nx.DiGraph:
    owner = {r: g.id for g in groups for r in g.roots}
    dag = nx.DiGraph()
    dag.add_nodes_from(g.id for g in groups)
    for g in groups:
        for n in g.nodes:
            for i in graph.node_map[n].inputs:
                if i in owner and owner[i] != g.id:
                    dag.add_edge(owner[i], g.id)
    return dag


_OWN_KERNEL = {"scatter", "contraction", "recurrence", "projection"}  # kinds lowered by their own drivers


def _compatible(a: Group, b: Group) -> bool:
    """Can one kernel run both? Same phase and iteration space; a reduction can also
    produce pointwise values over the space it reads."""
    if a.phase != b.phase or a.space != b.space or _OWN_KERNEL & {a.kind, b.kind}:
        return False  # a scatter's kernels sort and sum its own positions, a contraction's load tiles,
        # a recurrence's run along whole lines, a projection's walk the angles: never shared
    if a.pinned or b.pinned:
        return False  # a step stays one step
    if a.kind == "reduction" and b.kind == "reduction":
        return a.axes == b.axes
    return True


def _mergeable(a: Group, b: Group, reach: Reachability) -> bool:
    return a.id < b.id and _compatible(a, b) and _small_enough(a, b) and not reach.connected(a.id, b.id)


def _small_enough(a: Group, b: Group) -> bool:
    """At most `MAX_GROUP_NODES` nodes together, or at most `MAX_SHARED_GROUP_NODES` when at
    least half of them are in both groups (merging them removes the recomputation)."""
    union = len(a.nodes | b.nodes)
    if union <= MAX_GROUP_NODES:
        return True
    return union <= MAX_SHARED_GROUP_NODES and 2 * len(a.nodes & b.nodes) >= union


def merge_siblings(graph: Graph, groups: list[Group]) -> list[Group]:
    """Merge compatible groups with no path between them (horizontal fusion), and a
    pointwise group into its producer's reduction group when it iterates over the same
    space (vertical fusion across the reduction's input).

    Greedy in list order: group ``a`` absorbs every later candidate ``b`` it can, then
    the next ``a``. A merge only adds paths, grows groups and narrows compatibility, so
    a pair rejected once stays rejected: one sweep gives what restarting from the first
    pair after every merge would give, with no search per pair."""
    reach = Reachability(group_dag(graph, groups))
    live = list(groups)
    i = 0
    while i < len(live):
        j = 0
        while j < len(live):
            a, b = live[i], live[j]
            if not _mergeable(a, b, reach):
                j += 1
                continue
            live[i] = _union(a, b)
            reach.merge(a.id, b.id)
            del live[j]
            if j < i:
                i -= 1
        i += 1
    return live


def _reads_in_registers(graph: Graph, producer: Group, consumer: Group, order: dict[str, int]) -> bool:
    """Does ``consumer`` read every value of ``producer`` it reads (at least one) elementwise
    at its own iteration index, so that one kernel can compute, write and use them?"""
    seeds = [graph.node_map[r].inputs[0] if graph.node_map[r].opdef.kind == "reduction" else r for r in consumer.roots]
    same = same_index_members(graph, sorted(consumer.nodes, key=order.__getitem__), seeds, consumer.space)
    read = False
    for name in consumer.nodes:
        node = graph.node_map[name]
        for value in node.inputs:
            if value not in producer.roots or value in consumer.nodes:
                continue
            if (
                name not in same
                or node.opdef.kind != "elementwise"
                or graph.types[value].shape != consumer.space
                or graph.node_map[value].opdef.kind == "reduction"  # complete only after its loop
            ):
                return False
            read = True
    return read


def merge_chains(graph: Graph, groups: list[Group]) -> list[Group]:
    """Fuse a group into a producer group whose values it reads only elementwise at its own
    iteration index (vertical fusion across written values): the kernel writes what must
    be written (saved values, outputs) and keeps computing, instead of a kernel boundary
    per written value. Either may be a reduction over the other's space (a reduction's
    loop computes and writes pointwise values too); a reduction's result, known only
    after its loop, is never such a read. A time-stepped model's tape forward
    becomes a few kernels instead of two per step. Merges only where no third group lies
    between the two (no detour), within `MAX_GROUP_NODES`."""
    reach = Reachability(group_dag(graph, groups))
    owner = {r: g.id for g in groups for r in g.roots}
    live = {g.id: g for g in groups}
    position = {g.id: k for k, g in enumerate(groups)}  # a merged group keeps its producer's id and place
    order = {n.name: k for k, n in enumerate(graph.nodes)}
    for g in groups:
        b = live[g.id]
        producers = sorted(
            {owner[i] for n in b.nodes for i in graph.node_map[n].inputs if i in owner and owner[i] != b.id},
            key=position.__getitem__,
        )
        for pid in producers:
            a = live[pid]
            if (
                _compatible(a, b)
                and len(a.nodes | b.nodes) <= MAX_GROUP_NODES
                and not reach.detour(a.id, b.id)
                and _reads_in_registers(graph, a, b, order)
            ):
                live[a.id] = _union(a, b)
                reach.merge(a.id, b.id)
                del live[b.id]
                owner.update({r: a.id for r in b.roots})
                break
    return list(live.values())


def _union(a: Group, b: Group) -> Group:
    kind = "reduction" if "reduction" in (a.kind, b.kind) else "pointwise"
    axes = a.axes if a.kind == "reduction" else b.axes
    nodes, epilogue = a.nodes | b.nodes, a.epilogue + b.epilogue
    return Group(a.id, a.phase, kind, a.space, axes, a.roots + b.roots, nodes, epilogue, a.pinned or b.pinned)


def _epilogue_fits(graph: Graph, red: Group, ep: Group) -> bool:
    """Can ``ep`` run after ``red``'s loop, one element per reduction output ``o``?

    The reduction results, and layout-preserving views of them (reshape, squeeze), are
    known only at flat position ``o``, and so is everything ``ep`` computes from them;
    ``ep`` must iterate over a space of that size and read all of these only there: through
    such views, or elementwise at its own index (no broadcast, no other view). It must not
    read what ``red`` writes at its input space.
    """
    if red.kind != "reduction" or ep.kind != "pointwise" or ep.phase != red.phase or ep.epilogue or ep.pinned:
        return False
    results = {r for r in red.roots if graph.node_map[r].opdef.kind == "reduction"}
    size = math.prod(ep.space)
    if any(graph.types[r].size != size for r in results):
        return False
    elsewhere = set(red.roots) - results - set(red.epilogue)  # written at the reduction's input space
    if any(i in elsewhere for n in ep.nodes for i in graph.node_map[n].inputs):
        return False
    return read_at_own_index(graph, results, ep)


def read_at_own_index(graph: Graph, results: set[str], ep: Group) -> bool:
    """Does ``ep`` read ``results`` (values known only at its own flat position: finished
    reductions, a product's tile), and read them, and everything it computes from them, only
    there: through layout-preserving views, or elementwise at its own index (no broadcast, no
    other view)?"""
    at_o, frontier, read = set(results), list(results), False
    while frontier:
        value = frontier.pop()
        for user in graph.consumers[value]:
            if user not in ep.nodes:
                continue
            read = True
            node = graph.node_map[user]
            if not node.opdef.preserves_layout and (
                node.opdef.kind != "elementwise" or ep.space != node.type.shape or ep.space != graph.types[value].shape
            ):
                return False
            # What is computed from a result at ``o`` is known at ``o`` only too: its readers
            # are held to the same rule (a reversed slice of ``result + 1`` reads elsewhere).
            if user not in at_o:
                at_o.add(user)
                frontier.append(user)
    return read


def merge_epilogues(graph: Graph, groups: list[Group]) -> list[Group]:
    """Fuse a pointwise consumer of reduction results into the reduction's kernel when it
    iterates over the reductions' output space and no other kernel sits between them.

    Greedy in list order, the first fitting pair first, as restarting from the first pair
    after every merge would: a merge only contracts an edge of the group DAG (paths are
    added, never removed) and changes no group but the fused one, so pairs that failed
    before it still fail, and the scan resumes at the fused group. The DAG is contracted
    in place rather than rebuilt."""
    dag = group_dag(graph, groups)
    position = {g.id: k for k, g in enumerate(groups)}
    live: list[Group | None] = list(groups)
    by_id = {g.id: g for g in groups}
    k = 0
    while k < len(live):
        red = live[k]
        fused = None if red is None else _first_epilogue(graph, dag, red, by_id, position)
        if fused is None:
            k += 1
            continue
        ep = by_id.pop(fused[1])
        live[position[ep.id]] = None
        live[k] = by_id[red.id] = fused[0]
        contract(dag, red.id, ep.id)
    return [g for g in live if g is not None]


def _first_epilogue(
    graph: Graph, dag: nx.DiGraph, red: Group, by_id: dict[str, Group], position: dict[str, int]
) -> tuple[Group, str] | None:
    """``red`` fused with its first successor (in list order) that fits as its epilogue
    with no detour through another group, and that successor's id; None if none fits."""
    eid = first_successor(dag, red.id, by_id, position, lambda ep: _epilogue_fits(graph, red, ep))
    if eid is None:
        return None
    fused = _union(red, by_id[eid])
    fused.epilogue = red.epilogue + by_id[eid].roots
    return fused, eid


def first_successor(
    dag: nx.DiGraph, gid: str, by_id: dict[str, Group], position: dict[str, int], fits: Callable[[Group], bool]
) -> str | None:
    """The first successor of ``gid`` in the group DAG (in list order) that ``fits`` and that no
    other path reaches from ``gid`` (fusing across a detour would make a cycle); None if none."""
    for eid in sorted(dag.successors(gid), key=position.__getitem__):
        if not fits(by_id[eid]):
            continue
        dag.remove_edge(gid, eid)
        detour = nx.has_path(dag, gid, eid)
        dag.add_edge(gid, eid)
        if not detour:
            return eid
    return None


def contract(dag: nx.DiGraph, keep: str, gone: str) -> None:
    """Merge DAG vertex ``gone`` into ``keep``: the DAG `group_dag` builds for the union."""
    for p in dag.predecessors(gone):
        if p != keep:
            dag.add_edge(p, keep)
    for q in dag.successors(gone):
        if q != keep:
            dag.add_edge(keep, q)
    dag.remove_node(gone)

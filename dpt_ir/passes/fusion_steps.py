"""Kernel cuts that repeat with a time-stepped model's period, so that its steps share kernels.

Assumes: the graph of the fusion pass (nodes in topological order, phases tagged) and its
``reasons`` (value -> why it is written) as decided so far. Guarantees: each function only
adds reasons, each naming the rule; every walk is iterative and bounded: `step_cuts` climbs
nodes read by one node only (each lies on one such path, so all walks together visit each
node at most once per stencil reading it), the strand test stops after `STRAND_HOPS` hops
and `STRAND_VISITS` nodes, the rest are single sweeps over the graph; the rules stay
near-linear on chains of any length.

Kernel sharing (`dpt_ir.backends.warp.codegen._share`) only shares identical text, so a
repeated step gives one kernel only if every step is cut at the same place:

- `step_cuts`: a multi-read operator (a stencil) that occurs `STEP_REPEATS` times or more is
  a step; the value each occurrence reads is written at the step's carried value (``u`` in
  ``u + 0.2 * laplacian(u)``, the cotangent ``g`` in ``g + adjoint(0.2 * g)``), so that no
  kernel holds two steps (pairs of steps plus the odd one left over made 20 heat steps 7
  distinct stencil kernels); values computed exactly as a carried value is (the last step's
  result, which no further step reads) are written too, and the groups of these values
  are never merged with others (``pinned``), so the last step's kernel is the others'.
- `bound_kernel_nodes`: the size bound; when a cone's work (`OpDef.work` of its nodes: an
  arithmetic op 1, a transcendental 8, whose inlined code is as much longer) reaches
  `MAX_KERNEL_WORK`, the
  other states it carries (`live_outs`: the forward state a backward reads, a gradient
  accumulator) are cut with it, so that every strand of a ladder (forward, cotangent,
  accumulator) restarts at the same step and the next cut falls at the same place.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Sequence

from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.traits import is_free, is_pointwise, multi_read, reads

# Most work (`OpDef.work`) one kernel inlines before a value is written (`bound_kernel_nodes`).
# It was 256 nodes: the 4,999-node sin chain (benchmarks/compile_scaling.py) compiled in 52.7 s
# of CPU at 256 nodes and 126.6 s at 512, its largest kernels 254 nodes of work 688. Counted in
# work, a kernel of cheap arithmetic may be three times as long: the 128³ order-3 registration
# step (64 taps per point, work 1 each) was cut into 24 kernels that recompute the taps, 455 ms
# a step; at 676 nodes its largest kernel is whole, 13 kernels, 204 ms (2026-12-08).
MAX_KERNEL_WORK = 768
# A multi-read operator occurring this often is a time step: three steps and their adjoints.
STEP_REPEATS = 6
# A value read on after a kernel cut is cut with it when nodes of its op and type precede and
# follow it within this many reads (a carried state; `_recurs`), looking at this many nodes
# at most each way.
STRAND_HOPS = 4
STRAND_VISITS = 64


def step_key(node: Node) -> str:
    """A node's operator (op and attributes): equal keys on multi-read nodes are steps of one
    time-stepped model, or a step and its adjoint's step, not two different filters."""
    return node.op + json.dumps(node.attrs, sort_keys=True, default=str)


def step_cuts(graph: Graph, reasons: dict[str, str]) -> set[str]:
    """Write each repeated step's carried value and every value computed as one is; the
    values cut (their groups are pinned: merged with no other group)."""
    counts: dict[str, int] = {}
    for node in graph.nodes:
        if multi_read(node):
            counts[step_key(node)] = counts.get(step_key(node), 0) + 1
    cuts: list[str] = []
    for node in graph.nodes:
        if not multi_read(node) or counts[step_key(node)] < STEP_REPEATS:
            continue
        for read in node.inputs:
            value = _carried(graph, past_views(graph, read, reasons), reasons)
            if value not in graph.node_map or value in reasons or is_free(graph.node_map[value]):
                continue
            inner = graph.node_map[value]
            if multi_read(inner) and step_key(inner) != step_key(node):
                continue  # another operator of the same step (an adjoint pad reading its stencil)
            reasons[value] = (
                f"the value a step carries into {node.name} ({counts[step_key(node)]} nodes run its operator): "
                "written once, so that each step is one kernel and every step's kernel is the same"
            )
            cuts.append(value)
    return set(cuts) | _alike(graph, reasons, cuts)


def past_views(graph: Graph, value: str, reasons: dict[str, str]) -> str:
    """What ``value`` reads through single-read, single-input views (pads, slices) not in
    ``reasons`` (not written): views are index arithmetic, decisions are for what they read."""
    while (
        value in graph.node_map
        and value not in reasons
        and graph.node_map[value].opdef.kind == "shape"
        and len(graph.node_map[value].inputs) == 1
        and reads(graph.node_map[value]) == 1
    ):
        value = graph.node_map[value].inputs[0]
    return value


def _carried(graph: Graph, value: str, reasons: dict[str, str]) -> str:
    """The value a step carries, from the one it reads: up through elementwise nodes read by
    one node with one input that is computed (not free, not written), to the first value
    read by several nodes (``g`` in ``g + adjoint(pad(0.2 * g))``, whose ``0.2 * g`` the
    stencil reads); ``value`` itself when the walk reaches the step's own stencil first
    (``u`` in ``u = log(box(u)) + 1.5``, whose values are each read once)."""
    start = value
    while value in graph.node_map and value not in reasons and len(graph.consumers[value]) == 1:
        node = graph.node_map[value]
        computed = [
            i for i in node.inputs if i in graph.node_map and i not in reasons and not is_free(graph.node_map[i])
        ]
        if node.opdef.kind != "elementwise" or len(computed) != 1 or multi_read(graph.node_map[computed[0]]):
            return start
        value = computed[0]
    return value


def _alike(graph: Graph, reasons: dict[str, str], cuts: list[str]) -> set[str]:
    """Write the values whose inline code is a cut value's, structurally (op, attributes,
    type, and the same of what they inline, written values and inputs counting by type):
    the last step's result is computed as every carried value is, but no step reads it."""
    ids: dict[tuple[object, ...], int] = {}
    sig: dict[str, int] = {}
    for v in graph.inputs:
        sig[v.name] = ids.setdefault(("read", str(v.type)), len(ids))
    for node in graph.nodes:
        parts = tuple(
            ids.setdefault(("read", str(graph.types[i])), len(ids)) if i in reasons else sig[i] for i in node.inputs
        )
        sig[node.name] = ids.setdefault((step_key(node), str(node.type), parts), len(ids))
    wanted, cut = {sig[c]: c for c in cuts}, set(cuts)
    alike = set()
    for node in graph.nodes:
        like = wanted.get(sig[node.name])
        if like is None or not is_pointwise(node) or is_free(node) or node.name in cut:
            continue
        alike.add(node.name)  # pinned, even when written for another reason (a graph output)
        if node.name not in reasons:
            reasons[node.name] = (
                f"computed as the step value {like} is: written like it, so that its step's kernel is the others'"
            )
    return alike


def bound_kernel_nodes(graph: Graph, reasons: dict[str, str]) -> None:
    """Materialise a pointwise value once the work of the code inlined into it reaches
    `MAX_KERNEL_WORK`, so a long chain is split into kernels of bounded size (the C++
    compiler's time grows faster than a function's length: an 833-step chain fused into one
    5,800-line kernel), and with it the states its cone carries on (`live_outs`). Cones are
    exact (bitsets of the nodes they inline, and of the nodes of each work value) and visited
    in order, so every group built afterwards inlines at most ``arity * MAX_KERNEL_WORK`` work."""
    bit = {n.name: 1 << k for k, n in enumerate(graph.nodes)}
    names = [n.name for n in graph.nodes]
    by_work: dict[int, int] = {}  # work value -> the bitset of the nodes of that work
    for n in graph.nodes:
        by_work[n.opdef.work] = by_work.get(n.opdef.work, 0) | bit[n.name]
    cone: dict[str, int] = {}
    for node in graph.nodes:
        if not is_pointwise(node):
            continue
        mask = bit[node.name]
        for i in node.inputs:
            if i not in reasons and i in cone:
                mask |= cone[i]
        cone[node.name] = mask
        work = sum(w * (mask & m).bit_count() for w, m in by_work.items())
        if work >= MAX_KERNEL_WORK and node.name not in reasons and not is_free(node):
            size = mask.bit_count()
            reasons[node.name] = (
                f"its inline code reached {size} nodes of work {work} (the limit is {MAX_KERNEL_WORK}): "
                "written once, so that kernels stay small enough to compile quickly"
            )
            for name in live_outs(graph, names, mask, reasons):
                reasons[name] = (
                    f"a state computed in {node.name}'s inline code ({size} nodes of work {work}, the limit is "
                    f"{MAX_KERNEL_WORK}) and read after it: written with it, so that every strand of the model is "
                    "cut at the same step"
                )


def live_outs(graph: Graph, names: list[str], mask: int, reasons: dict[str, str]) -> list[str]:
    """The nodes of cone ``mask`` (bit k: ``names[k]``) that are not materialised, are read
    by a node outside the cone and recur (`_recurs`): the carried states of the model's
    strands (its forward state, the cotangent, a gradient accumulator), not values a later
    kernel recomputes cheaply from the inputs (the terms of a wide sum)."""
    members, m = [], mask
    while m:
        low = m & -m
        members.append(names[low.bit_length() - 1])
        m ^= low
    inside = set(members)
    return [
        n
        for n in members
        if n not in reasons
        and not is_free(graph.node_map[n])
        and any(c not in inside for c in graph.consumers[n])
        and _recurs(graph, n)
    ]


def _recurs(graph: Graph, value: str) -> bool:
    """Is ``value`` a state that steps carry on, as ``y`` in ``y = sin(y) * 0.9 + c``: does a
    node with its op and type both precede it and follow it within `STRAND_HOPS` pointwise
    reads (breadth-first walks of at most `STRAND_VISITS` nodes each way)?"""
    node = graph.node_map[value]
    return _meets_alike(graph, node, lambda n: graph.consumers[n]) and _meets_alike(
        graph, node, lambda n: graph.node_map[n].inputs if n in graph.node_map else ()
    )


def _meets_alike(graph: Graph, node: Node, step: Callable[[str], Sequence[str]]) -> bool:
    """Does a walk from ``node`` along ``step`` (readers or inputs) meet another node of its
    op and type within `STRAND_HOPS` hops, through pointwise nodes?"""
    frontier, seen = [node.name], {node.name}
    for _ in range(STRAND_HOPS):
        nxt = []
        for name in frontier:
            for c in step(name):
                if c in seen or len(seen) >= STRAND_VISITS or c not in graph.node_map:
                    continue
                seen.add(c)
                other = graph.node_map[c]
                if other.op == node.op and other.type == node.type:
                    return True
                if is_pointwise(other):
                    nxt.append(c)
        frontier = nxt
    return False

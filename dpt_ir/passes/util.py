"""Small graph-rewriting helpers shared by the passes."""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from dpt_ir.ir.graph import Graph, Node, Output
from dpt_ir.ir.registry import get_op
from dpt_ir.ir.types import TensorType

if TYPE_CHECKING:
    from dpt_ir.ir.kernel_ir import KernelGroup, RowSet


def resolve(name: str, subst: Mapping[str, str]) -> str:
    """Follow a chain of substitutions to its end."""
    seen = set()
    while name in subst and name not in seen:
        seen.add(name)
        name = subst[name]
    return name


def emit_node(
    types: dict[str, TensorType],
    op_name: str,
    inputs: tuple[str, ...],
    attrs: dict[str, Any],
    name: str,
    meta: dict[str, Any],
) -> Node:
    """A node of op ``op_name`` typed as the op infers from ``types``, which gains it."""
    where = f"node {name!r}"
    op = get_op(op_name, where)
    out = op.infer(tuple(types[i] for i in inputs), op.parse_attrs(attrs, where), where)
    types[name] = out
    return Node(name=name, op=op_name, inputs=inputs, attrs=attrs, type=out, meta=dict(meta))


def substitute(graph: Graph, subst: Mapping[str, str], nodes: Iterable[Node] | None = None) -> Graph:
    """Rewrite every use of a value named in ``subst`` to its replacement (nodes and outputs).

    ``nodes`` replaces the node list first (default: the graph's). Nodes whose own name is
    substituted away are kept; `dce` removes them once unused.
    """
    new_nodes = []
    # Unchecked node copies on purpose (the one exception to FrozenModel.with_): the inputs
    # are names of the graph itself, `graph.replace` checks every reference, and the manager
    # verifies the graph after each pass; a validated copy per node made a 5,000-node graph's
    # passes 1.3x slower (benchmarks/compile_scaling.py --passes-only, measured 2026-12-02).
    for node in graph.nodes if nodes is None else nodes:
        inputs = tuple(resolve(i, subst) for i in node.inputs)
        new_nodes.append(node if inputs == node.inputs else node.model_copy(update={"inputs": inputs}))
    outputs = tuple(Output(name=o.name, value=resolve(o.value, subst)) for o in graph.outputs)
    return graph.replace(nodes=tuple(new_nodes), outputs=outputs)


def live_ranges(groups: Sequence[KernelGroup], sets: Sequence[RowSet] = ()) -> tuple[dict[str, int], dict[str, int]]:
    """For kernels in order: the index of the kernel that writes each value, and of the
    last kernel that reads it (values never read have no entry). Each row set (`sets`,
    `fusion_rows`) counts as one kernel: a value a member writes lives from the set's first
    member, one a member reads until its last (the members' rows interleave, so no buffer
    may pass from one value to another inside a set)."""
    written: dict[str, int] = {}
    last_read: dict[str, int] = {}
    for k, g in enumerate(groups):
        for v in g.outputs:
            written[v] = k
        for v in g.inputs:
            last_read[v] = k
    position = {g.id: k for k, g in enumerate(groups)}
    for s in sets:
        span = [position[g] for g in s.groups if g in position]
        if not span:
            continue
        lo, hi = min(span), max(span)
        for v, k in written.items():
            if lo <= k <= hi:
                written[v] = lo
        for g in s.groups:
            for v in groups[position[g]].inputs:
                last_read[v] = max(last_read.get(v, hi), hi)
    return written, last_read


def same_index_members(graph: Graph, nodes: Sequence[str], seeds: Iterable[str], space: tuple[int, ...]) -> set[str]:
    """The members of a kernel (``nodes``, in topological order) that its ``seeds`` read at
    the kernel's own iteration index: the seeds of shape ``space`` and, through
    elementwise nodes, their same-shape inputs (a broadcast, a view or a stencil reads
    elsewhere). Fusion asks it which reads a kernel can take from registers; the backend
    emits these members first, in order, so that no elementwise chain nests."""
    members = set(nodes)
    at = {v for v in seeds if v in members and graph.types[v].shape == space}
    for name in reversed(nodes):  # consumers before producers
        node = graph.node_map[name]
        if name in at and node.opdef.kind == "elementwise":
            at.update(i for i in node.inputs if i in members and graph.types[i].shape == space)
    return at

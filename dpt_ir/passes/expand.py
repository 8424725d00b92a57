"""expand: a differentiated node whose op declares an expansion is rebuilt from primitives,
so that its forward and its derivative share their pieces.

Assumes: the joint graph of `autodiff` (backward nodes tagged ``grad_of``), built with the
same ``options.expand``. Decided from op traits only: an op with an `OpDef.expansion`
(``(attrs, inputs) -> value`` built from primitives) whose derivative formula builds the same
pieces as IR where the expansion applies (`GradContext.expanded`; logsumexp: the shift ``m``,
``e = exp(x - m)`` and ``s = sum(e)``; its gradient is ``e / s``).

A target decision (`CompileOptions.expand`, from `Target.expand`): with the option off (CUDA,
whose plan launches the pieces one by one and shares no exp between them) the graph is
returned unchanged: the op keeps its fused node, whose derivative then reads its output.

Guarantees: each node with an expansion that autodiff differentiated (some node is tagged
``grad_of`` it) is redirected to its expansion, whose nodes are placed just before it and
carry its meta (phase, origin: a status check names the same ``dp.*`` function); the node is
left for `dce` and the duplicated pieces for `cse`, which keeps the first (the forward's).
Since the pass runs after autodiff, no gradient flows through the expansion (no stop-gradient
needed). A node nothing differentiates, and a forward-only graph, are left unchanged, as is a
node whose expansion declines its inputs (returns None).

Numerics: the expansion must give the node's value (logsumexp: the same bits as its fused
reduction, `dpt_ir.ops.reduction`).
"""

from __future__ import annotations

from dpt_ir.ir.builder import GraphBuilder
from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.records import grad_of
from dpt_ir.passes.options import CompileOptions, PassOptions
from dpt_ir.passes.util import substitute

NAME = "expand"


class ExpandOptions(PassOptions):
    """``expand``: rebuild differentiated ops from their expansion (off: leave the graph)."""

    expand: bool = True


def run(graph: Graph, options: ExpandOptions | CompileOptions | None = None) -> Graph:
    if not ExpandOptions.of(options).expand:
        return graph
    differentiated = {grad_of(n) for n in graph.nodes}
    targets = [n for n in graph.nodes if n.opdef.expansion is not None and n.name in differentiated]
    if not targets:
        return graph
    b, handles = GraphBuilder.from_graph(graph)
    before: dict[str, list[Node]] = {}
    subst: dict[str, str] = {}
    for node in targets:
        start = len(b.nodes)
        attrs = node.opdef.parse_attrs(node.attrs, node.name)
        value = node.opdef.expansion(attrs, tuple(handles[i] for i in node.inputs))
        if value is None:
            continue
        b.tag_since(start, node.meta)
        before[node.name] = list(b.nodes[start:])
        subst[node.name] = value.name
    if not subst:
        return graph
    nodes = [m for n in graph.nodes for m in (*before.get(n.name, ()), n)]
    return substitute(graph, subst, nodes)

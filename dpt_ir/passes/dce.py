"""dce: dead-code elimination.

Assumes: a valid graph. Guarantees: keeps exactly the nodes some output depends on, in
their original order; inputs are never removed (they are the program's signature).
"""

from __future__ import annotations

from dpt_ir.ir.graph import Graph

NAME = "dce"


def run(graph: Graph, options: object = None) -> Graph:
    live = {o.value for o in graph.outputs}
    for node in reversed(graph.nodes):
        if node.name in live:
            live.update(node.inputs)
    nodes = tuple(n for n in graph.nodes if n.name in live)
    return graph if len(nodes) == len(graph.nodes) else graph.replace(nodes=nodes)

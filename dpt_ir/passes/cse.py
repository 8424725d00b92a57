"""cse: common-subexpression elimination.

Assumes: a valid graph. Guarantees: no two nodes apply the same op with the same
attributes to the same inputs; the later duplicate is redirected to the earlier node
(which keeps its meta) and left for `dce`. Values are unchanged. Once the graph is
partitioned (it has a `SavedPlan`), nodes of different phases are never merged, so a
recomputation chosen by `saved_attributes` stays a recomputation.
"""

from __future__ import annotations

import json

from dpt_ir.ir.graph import Graph
from dpt_ir.ir.records import is_partitioned, phase_of
from dpt_ir.passes.util import resolve, substitute

NAME = "cse"


def run(graph: Graph, options: object = None) -> Graph:
    partitioned = is_partitioned(graph)
    first: dict[tuple, str] = {}
    subst: dict[str, str] = {}
    for node in graph.nodes:
        key = (
            node.op,
            tuple(resolve(i, subst) for i in node.inputs),
            json.dumps(node.attrs, sort_keys=True),
            node.type,
            phase_of(node) if partitioned else None,
        )
        if key in first:
            subst[node.name] = first[key]
        else:
            first[key] = node.name
    return substitute(graph, subst) if subst else graph

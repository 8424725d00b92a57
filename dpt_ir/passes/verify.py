"""verify: check the invariants every pass must preserve.

Assumes: nothing (a Graph is already structurally valid by construction: names,
references, acyclicity, topological order, op arity, attributes and types).
Guarantees: returns the graph unchanged, or raises ContractError naming the first node
that breaks a pass-level invariant: a forward node reading a backward value, a fusion
group naming a node that does not exist, or a group record without its fields.
"""

from __future__ import annotations

from dpt_ir.errors import ContractError
from dpt_ir.graph import Graph, verify_graph
from dpt_ir.passes.util import phase_of

NAME = "verify"


def run(graph: Graph, options: object = None) -> Graph:
    verify_graph(graph)
    _check_phases(graph)
    _check_groups(graph)
    return graph


def _check_phases(graph: Graph) -> None:
    phase = {i.name: "input" for i in graph.inputs}
    for node in graph.nodes:
        p = phase_of(node)
        if p not in ("forward", "backward"):
            raise ContractError(f"node {node.name!r}: unknown phase {p!r}; expected forward or backward")
        if p == "forward":
            for i in node.inputs:
                if phase.get(i) == "backward":
                    raise ContractError(
                        f"node {node.name!r}: forward node reads backward value {i!r}; expected "
                        "forward nodes to read only inputs and forward values"
                    )
        phase[node.name] = p


def _check_groups(graph: Graph) -> None:
    groups = graph.meta.get("groups")
    if groups is None:
        return
    names = set(graph.types)
    for g in groups:
        for key in ("id", "phase", "kind", "nodes", "inputs", "outputs"):
            if key not in g:
                raise ContractError(f"fusion group {g.get('id', '?')!r}: missing field {key!r}")
        for n in g["nodes"]:
            if n not in names:
                raise ContractError(f"fusion group {g['id']!r}: names node {n!r}, which is not in the graph")

"""autodiff: extend the forward graph with its backward, from the derivative table.

Assumes: a valid forward graph; ``options.wrt`` names differentiable float inputs.
Guarantees: the joint graph of `dpt_ir.api.autodiff.joint_graph`: every original node and
output unchanged; one cotangent input ``ct.<output>`` per seeded output (or, when the
options fix a seed value, a constant in its place); one output ``grad.<input>`` per wrt
input; backward nodes tagged ``phase=backward``, an op with an expansion differentiated by
the formula that shares its pieces only if ``options.expand`` (`expand` then rebuilds it). With
no ``wrt`` the graph is returned unchanged.
"""

from __future__ import annotations

from dpt_ir.api.autodiff import joint_graph
from dpt_ir.ir.graph import Graph, Node, unique_name
from dpt_ir.ir.records import Autodiff, backward_tags, joint_record, phase_of, with_autodiff
from dpt_ir.ir.registry import CONSTANT_OP
from dpt_ir.passes.options import CompileOptions
from dpt_ir.passes.util import substitute

NAME = "autodiff"


def run(graph: Graph, options: CompileOptions) -> Graph:
    if not options.wrt:
        return graph
    joint = joint_graph(graph, options.wrt, options.seed_outputs(graph), options.expand)
    if options.seed_values:
        joint = _fix_seeds(joint, options.seed_values)
    return joint


def _fix_seeds(joint: Graph, values: dict[str, float]) -> Graph:
    """Replace cotangent inputs whose value is known at compile time by constants."""
    record = joint_record(joint)
    cts = record.cotangents
    taken = set(joint.types)
    seed_nodes: list[Node] = []
    subst: dict[str, str] = {}
    for out, ct in cts.items():
        if out not in values:
            continue
        t = joint.types[ct]
        name = unique_name(f"seed_{out}", taken)
        attrs = {"value": float(values[out]), "dtype": t.dtype, "shape": list(t.shape)}
        seed_nodes.append(Node(name=name, op=CONSTANT_OP, attrs=attrs, type=t, meta=backward_tags("seed")))
        subst[ct] = name
    inputs = tuple(i for i in joint.inputs if i.name not in subst)
    unknown = {o: c for o, c in cts.items() if o not in values}
    fixed = Autodiff(wrt=record.wrt, cotangents=unknown, gradients=record.gradients, fixed_seeds=dict(values))
    meta = with_autodiff(joint.meta, fixed)
    # The input list shrinks before the uses are rewritten: validate only the final graph.
    unvalidated = joint.model_copy(update={"inputs": inputs})
    # Seeds go after the forward nodes: cse keeps the first of two equal nodes, and a
    # forward constant equal to a seed must not be redirected to a backward node.
    nodes = list(joint.nodes)
    first = next((k for k, n in enumerate(nodes) if phase_of(n) == "backward"), len(nodes))
    return substitute(unvalidated, subst, [*nodes[:first], *seed_nodes, *nodes[first:]]).replace(meta=meta)

"""reciprocal: a division by a broadcast value becomes a multiplication by its reciprocal,
computed once at the divisor's own (smaller) shape.

Assumes: a valid graph. Decided from op traits only: an op with ``divides_as = (mul, rcp)``
(`OpDef.divides_as`: ``a op b == mul(a, rcp(b))`` up to rounding) whose divisor has at
most 1 / `MIN_RATIO` of the result's elements, either directly (the elementwise rule
broadcasts it) or through a chain of layout views (`OpDef.view_affine`: every output
element is one input element, so ``rcp`` commutes with them) down to such a value.

Guarantees: ``div(a, b)`` becomes ``mul(a, rcp(b))`` and ``div(a, view(b))`` becomes
``mul(a, view(rcp(b)))``, the views cloned with their attributes, every new node carrying
the division's meta (phase, grad_of); the division is redirected, left for `dce`, and the
reciprocals of one divisor are left for `cse` to merge. A same-shape divisor, or one with
more than 1 / `MIN_RATIO` of the elements, is never rewritten (a reciprocal per element
plus a multiply is more work than the division). Nothing is rewritten with
``options.reciprocal`` off.

Numerics: ``a * (1 / b)`` rounds twice, so it may differ from ``a / b`` by about one ulp.
IEEE special values give the same pattern: b = ±0 gives ±inf (NaN where a is 0 or NaN),
b = ±inf gives ±0 (NaN where a is infinite), a NaN b gives NaN. Where ``1 / b`` is not a
normal number the results can differ more: |b| < 1 / FLT_MAX (subnormal b) makes
``1 / b`` overflow to inf where ``a / b`` may be finite, and |b| > 2**126 (float32) makes
``1 / b`` subnormal, losing precision.
"""

from __future__ import annotations

from dpt_ir.ir.graph import Graph, Node, unique_name
from dpt_ir.ir.types import TensorType
from dpt_ir.passes.options import CompileOptions, PassOptions
from dpt_ir.passes.util import emit_node, substitute

NAME = "reciprocal"
MIN_RATIO = 2  # the result has at least this many elements per divisor element


class ReciprocalOptions(PassOptions):
    """``reciprocal``: rewrite divisions by a broadcast value (off: leave the graph)."""

    reciprocal: bool = True


def run(graph: Graph, options: ReciprocalOptions | CompileOptions | None = None) -> Graph:
    if not ReciprocalOptions.of(options).reciprocal:
        return graph
    producers = {n.name: n for n in graph.nodes}
    types = dict(graph.types)  # gains the new nodes' types
    taken = set(types)
    nodes: list[Node] = []
    subst: dict[str, str] = {}
    for node in graph.nodes:
        rewritten = _rewrite(graph, node, producers, types, taken)
        if rewritten:
            subst[node.name] = rewritten[-1].name
            nodes.extend(rewritten)
        nodes.append(node)
    return substitute(graph, subst, nodes) if subst else graph


def _rewrite(
    graph: Graph, node: Node, producers: dict[str, Node], types: dict[str, TensorType], taken: set[str]
) -> list[Node]:
    """The nodes replacing ``node`` (the multiply last), or [] where it stays."""
    traits = node.opdef.divides_as
    if traits is None or len(node.inputs) != 2:
        return []
    a, b = node.inputs
    chain = _views_to_small(graph, b, node.type.size, producers)
    if chain is None:
        return []
    source = chain[0].inputs[0] if chain else b
    if graph.types[source].dtype != node.type.dtype:
        return []
    mul_name, rcp_name = traits
    new = [emit_node(types, rcp_name, (source,), {}, unique_name(f"rcp.{source}", taken), node.meta)]
    for view in chain:
        new.append(
            emit_node(types, view.op, (new[-1].name,), view.attrs, unique_name(f"{view.name}.rcp", taken), node.meta)
        )
    product = emit_node(types, mul_name, (a, new[-1].name), {}, unique_name(f"{node.name}.rcp", taken), node.meta)
    if product.type != node.type:
        return []
    return [*new, product]


def _views_to_small(graph: Graph, value: str, size: int, producers: dict[str, Node]) -> list[Node] | None:
    """The layout views from a value with at most ``size / MIN_RATIO`` elements up to
    ``value`` (outermost last; [] when ``value`` is small itself), or None."""
    chain: list[Node] = []
    while graph.types[value].size * MIN_RATIO > size:
        view = producers.get(value)
        if view is None or view.opdef.view_affine is None or len(view.inputs) != 1:
            return None
        chain.append(view)
        value = view.inputs[0]
    return chain[::-1]

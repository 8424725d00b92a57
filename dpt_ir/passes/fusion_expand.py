"""fusion_expand: materialise a costly value that a fused node reads into a larger space.

Assumes: ``reasons`` maps the values `fusion` has already decided to materialise to why;
``cost(value)`` is the work per element of recomputing ``value`` inline (`fusion._eval_cost`).
Guarantees: adds a reason for every node-produced, not yet materialised value (looked up past
single-read views, as `fusion._halo` does) whose inline cost exceeds ``budget`` and that a
pointwise node reads into an output with more elements than the value has (a broadcast, a
``concat``, an ``embed_slice``, a pad). Inlined there, the value's code runs at every element
of the larger output (an ``embed_slice`` or ``concat`` selects its operands per element, so
each element evaluates every operand's code): the gradient of a ``(2, N, N)`` coordinate
field through its slices recomputed the whole interpolation twice per point. Written once,
it is computed at its own elements only. Decisions use sizes and costs
only, never op names; values are unchanged.
"""

from __future__ import annotations

from collections.abc import Callable

from dpt_ir.ir import traits
from dpt_ir.ir.graph import Graph
from dpt_ir.passes.fusion_steps import past_views


def expanding_reads(graph: Graph, reasons: dict[str, str], budget: int, cost: Callable[[str], int]) -> None:
    """Add a reason for each costly value read into a larger pointwise output (in place)."""
    for node in graph.nodes:
        if not traits.is_pointwise(node) or node.opdef.data_dependent_reads:
            continue  # gathers: `fusion._halo` weighs their reuse of the source
        size = node.type.size
        for value in node.inputs:
            value = past_views(graph, value, reasons)  # a reshape's or slice's operand: index arithmetic
            if value not in graph.node_map or value in reasons:
                continue
            own = graph.types[value].size
            if own == 0 or size <= own:
                continue
            work = cost(value)
            if work > budget:
                reasons[value] = (
                    f"read into the {size} elements of {node.name}: inlining its {work} op(s) per element "
                    f"would run them at each of them, not at its own {own}; written once instead"
                )

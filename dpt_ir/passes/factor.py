"""factor: a linear reduction of a product pulls out the factors that are constant along
its reduced axes, ``sum(a * c) -> sum(a) * c`` where ``c`` is broadcast along them.

Assumes: a valid graph. Decided from op traits only:

- the reduction: kind ``reduction``, linear in its input (`OpDef.linear` holds the group
  ``(0,)``: sum, mean), with ``axes`` and ``keepdims`` attributes;
- the product: the tree of nodes of one elementwise, binary, commutative op linear in each
  argument alone (`OpDef.linear` ``((0,), (1,))``: mul) under the reduction's input, entered
  through nodes that no other node reads (a shared product stays one leaf: it is computed anyway);
- a leaf is constant along the reduced axes when its shape, aligned to the input's on the
  right, has extent 1 on each of them and its dtype is the reduction's.

Guarantees: when some leaves are constant and some are not, the reduction becomes the
reduction of the product of the varying leaves, times the product of the constant ones (a
``reshape`` drops the reduced axes from the latter when ``keepdims`` is off), every new node
carrying the reduction's meta; the reduction is redirected and left for `dce`. So the
reduced loop no longer reads the constant factors, and where they are themselves results of
a reduction over the same rows (a softmax's ``1 / sum(exp(x - m))`` in its tangent
``sum(t * exp(x - m) / s)``) the two sums run in one pass over the row instead of two.
One multiplication per reduced element becomes one per result element. Nothing is rewritten
with ``options.factor`` off.

Numerics: ``sum(a) * c`` rounds differently from ``sum(a * c)`` (one rounding of the
product instead of one per term, the sum accumulated in float64 either way); a non-finite
``c`` can give inf where the original gave NaN (``0 * inf`` terms).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpt_ir.ir.graph import Graph, Node, unique_name
from dpt_ir.ir.registry import OpDef
from dpt_ir.ir.types import TensorType, is_float
from dpt_ir.passes.options import CompileOptions, PassOptions
from dpt_ir.passes.util import emit_node, substitute

NAME = "factor"


class FactorOptions(PassOptions):
    """``factor``: pull factors constant along a linear reduction's axes out of it (off: leave the graph)."""

    factor: bool = True


def run(graph: Graph, options: FactorOptions | CompileOptions | None = None) -> Graph:
    if not FactorOptions.of(options).factor:
        return graph
    producers = {n.name: n for n in graph.nodes}
    readers: dict[str, int] = {}
    for node in graph.nodes:
        for i in node.inputs:
            readers[i] = readers.get(i, 0) + 1
    for out in graph.outputs:
        readers[out.value] = readers.get(out.value, 0) + 1
    types = dict(graph.types)  # gains the new nodes' types
    taken = set(types)
    nodes: list[Node] = []
    subst: dict[str, str] = {}
    for node in graph.nodes:
        rewritten = _rewrite(graph, node, producers, readers, types, taken)
        if rewritten:
            subst[node.name] = rewritten[-1].name
            nodes.extend(rewritten)
        nodes.append(node)
    return substitute(graph, subst, nodes) if subst else graph


def _is_product(op: OpDef) -> bool:
    return (
        op.kind == "elementwise"
        and op.arity == 2
        and op.commutative
        and op.linear is not None
        and op.linear.groups == ((0,), (1,))
    )


def _rewrite(
    graph: Graph,
    node: Node,
    producers: dict[str, Node],
    readers: dict[str, int],
    types: dict[str, TensorType],
    taken: set[str],
) -> list[Node]:
    """The nodes replacing reduction ``node`` (the final product last), or [] where it stays."""
    op = node.opdef
    if op.kind != "reduction" or op.linear is None or (0,) not in op.linear.groups_for(1):
        return []
    top = producers.get(node.inputs[0])
    if top is None or not _is_product(top.opdef):
        return []
    attrs = op.parse_attrs(node.attrs, node.name)
    axes, keepdims = getattr(attrs, "axes", None), getattr(attrs, "keepdims", None)
    if axes is None or keepdims is None:
        return []
    source = graph.types[node.inputs[0]]
    full, dtype = tuple(source.shape), node.type.dtype
    if readers.get(top.name, 0) != 1 or not is_float(dtype) or source.dtype != dtype:
        return []  # a shared product is computed anyway; an integer sum accumulates apart
    reduced = {a % len(full) for a in axes}
    leaves = _leaves(top, producers, readers)
    if any(graph.types[leaf].dtype != dtype for leaf in leaves):
        return []  # the product's promotions would move
    constant = [leaf for leaf in leaves if _constant_along(graph.types[leaf], full, reduced)]
    varying = [leaf for leaf in leaves if leaf not in constant]
    if not constant or not varying:
        return []
    if tuple(np.broadcast_shapes(*(tuple(graph.types[leaf].shape) for leaf in varying))) != full:
        return []  # the varying factors alone broadcast to fewer elements: keep the reduction's count
    product, meta = top.op, node.meta
    new: list[Node] = []

    def emit(op_name: str, inputs: tuple[str, ...], op_attrs: dict[str, Any], stem: str) -> str:
        new.append(emit_node(types, op_name, inputs, op_attrs, unique_name(stem, taken), meta))
        return new[-1].name

    summand = varying[0]
    for leaf in varying[1:]:
        summand = emit(product, (summand, leaf), {}, f"{node.name}.term")
    scale = constant[0]
    for leaf in constant[1:]:
        scale = emit(product, (scale, leaf), {}, f"{node.name}.scale")
    total = emit(node.op, (summand,), dict(node.attrs), f"{node.name}.factored")
    if not keepdims:
        padded = (1,) * (len(full) - len(types[scale].shape)) + tuple(types[scale].shape)
        kept = [d for a, d in enumerate(padded) if a not in reduced]
        scale = emit("reshape", (scale,), {"shape": kept}, f"{scale}.unreduced")
    emit(product, (total, scale), {}, f"{node.name}.scaled")
    return new if new[-1].type == node.type else []


def _leaves(top: Node, producers: dict[str, Node], readers: dict[str, int]) -> list[str]:
    """The factors of the product tree at ``top``, entered through unshared nodes of its op
    (an explicit stack: no recursion on the tree's depth), in argument order."""
    leaves: list[str] = []
    stack = list(reversed(top.inputs))
    while stack:
        value = stack.pop()
        inner = producers.get(value)
        if inner is not None and inner.op == top.op and readers.get(value, 0) == 1:
            stack.extend(reversed(inner.inputs))
        else:
            leaves.append(value)
    return leaves


def _constant_along(t: TensorType, full: tuple[int, ...], reduced: set[int]) -> bool:
    """Whether a leaf of type ``t``, broadcast to ``full``, is constant along ``reduced``."""
    offset = len(full) - len(t.shape)
    if offset < 0:
        return False
    return all(a < offset or t.shape[a - offset] == 1 for a in reduced)

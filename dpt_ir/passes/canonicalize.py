"""canonicalize: constant folding and algebraic identities, decided from op traits.

Assumes: a valid graph. Guarantees: values are unchanged (bit for bit, except that
folded constants are computed once by the NumPy reference in the node's dtype), and

- a node whose inputs are all constants and whose result is uniform becomes a constant
  (elementwise ops fold symbolically; shape ops and reductions fold when their inputs
  are small, after checking the result is uniform: ``embed_slice`` pads with zeros);
- ``x op e`` with ``e`` the op's identity element (``e op x`` too when commutative)
  becomes ``x`` when that changes neither shape nor dtype;
- ``f(f(x))`` becomes ``x`` for an involution ``f``.

Rewritten nodes are redirected, and left for `dce`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.registry import CONSTANT_OP
from dpt_ir.passes.util import resolve, substitute

NAME = "canonicalize"
FOLD_LIMIT = 1 << 16  # elements a reduction of constants may read at compile time


def run(graph: Graph, options: object = None) -> Graph:
    nodes: list[Node] = []
    consts: dict[str, Any] = {}  # constant value name -> fill value
    subst: dict[str, str] = {}
    producers: dict[str, Node] = {}
    for node in graph.nodes:
        node = _with_inputs(node, subst)
        folded = _fold(graph, node, consts)
        if folded is not None:
            node = folded
        op = node.opdef
        if op.constant_value is not None:
            consts[node.name] = op.constant_value(op.parse_attrs(node.attrs, node.name))
        else:
            target = _identity_target(graph, node, consts) or _involution_target(graph, node, producers)
            if target is not None:
                subst[node.name] = target
        nodes.append(node)
        producers[node.name] = node
    if not subst and nodes == list(graph.nodes):
        return graph
    return substitute(graph, subst, nodes)


def _with_inputs(node: Node, subst: dict[str, str]) -> Node:
    inputs = tuple(resolve(i, subst) for i in node.inputs)
    return node if inputs == node.inputs else node.with_(inputs=inputs)


def _fold(graph: Graph, node: Node, consts: dict[str, Any]) -> Node | None:
    op = node.opdef
    if not node.inputs or any(i not in consts for i in node.inputs):
        return None
    attrs = op.parse_attrs(node.attrs, node.name)
    in_types = [graph.types[i] for i in node.inputs]
    if op.kind == "elementwise":
        # Uniform inputs give a uniform output: evaluate once on 0-d arrays.
        args = [np.asarray(consts[i], dtype=t.dtype) for i, t in zip(node.inputs, in_types, strict=True)]
        with np.errstate(all="ignore"):
            value = np.asarray(op.reference(attrs, *args)).astype(node.type.dtype)
    elif op.kind in ("shape", "reduction") and all(t.size <= FOLD_LIMIT for t in in_types):
        args = [np.full(t.shape, consts[i], dtype=t.dtype) for i, t in zip(node.inputs, in_types, strict=True)]
        with np.errstate(all="ignore"):
            result = np.asarray(op.reference(attrs, *args)).astype(node.type.dtype)
        flat = result.reshape(-1)
        if flat.size == 0 or not np.all((flat == flat[0]) | (np.isnan(flat) & np.isnan(flat[0]))):
            return None
        value = flat[0]
    else:
        return None
    return Node(
        name=node.name,
        op=CONSTANT_OP,
        attrs={"value": value.item(), "dtype": node.type.dtype, "shape": list(node.type.shape)},
        type=node.type,
        meta=node.meta,
    )


def _identity_target(graph: Graph, node: Node, consts: dict[str, Any]) -> str | None:
    op = node.opdef
    if op.identity is None or len(node.inputs) != 2:
        return None
    a, b = node.inputs
    candidates = [(a, b)] + ([(b, a)] if op.commutative else [])
    for keep, other in candidates:
        if other in consts and consts[other] == op.identity and graph.types[keep] == node.type:
            return keep
    return None


def _involution_target(graph: Graph, node: Node, producers: dict[str, Node]) -> str | None:
    if not node.opdef.involution or len(node.inputs) != 1:
        return None
    inner = producers.get(node.inputs[0])
    if inner is None or inner.op != node.op or inner.attrs != node.attrs:
        return None
    source = inner.inputs[0]
    return source if graph.types[source] == node.type else None

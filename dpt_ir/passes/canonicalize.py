"""canonicalize: constant folding and algebraic identities, decided from op traits.

Assumes: a valid graph. Guarantees: values are unchanged (bit for bit, except that
folded constants are computed once by the NumPy reference in the node's dtype), and

- a node whose inputs are all constants and whose result is uniform becomes a constant
  (elementwise ops and layout views, `OpDef.view_affine`, fold symbolically; other shape
  ops and reductions fold when their inputs and result are small, after checking the
  result is uniform: ``embed_slice`` pads with zeros), so no data-sized array is made at
  compile time;
- a node whose output has elements but whose input has none becomes a constant: a
  reduction or contraction (`OpDef.empty_value`: every slice it folds is empty) of its
  identity (sum 0, mean NaN, logsumexp -inf, matmul 0), a per-axis view (a constant pad,
  embed_slice: `OpDef.axis_images`) of its fill: a zero-size axis needs no kernel;
- ``x op e`` with ``e`` the op's identity element (``e op x`` too when commutative)
  becomes ``x`` when that changes neither shape nor dtype;
- ``f(f(x))`` becomes ``x`` for an involution ``f``;
- a scatter (`OpDef.scatter`) of an empty values input becomes its base;
- an input that a layout view (`OpDef.view_affine`) makes from another value by only swapping
  its last two axes is read from that value under the consumer's swap flag
  (`OpDef.swap_flags`: ``x.T @ y`` is matmul with ``transpose_a``, no transposed copy; the
  same elements in the same order, so the same bits).

Rewritten nodes are redirected, and left for `dce`.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.indexing import Affine
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
        folded = _fold(graph, node, consts) or _swaps_folded(graph, node, producers)
        if folded is not None:
            node = folded
        op = node.opdef
        if op.constant_value is not None:
            consts[node.name] = op.constant_value(op.parse_attrs(node.attrs, node.name))
        else:
            target = (
                _identity_target(graph, node, consts)
                or _involution_target(graph, node, producers)
                or _empty_scatter_target(graph, node)
            )
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
    fill = _empty_fill(graph, node)
    if fill is not None:
        return _constant(node, np.asarray(fill).astype(node.type.dtype))
    if not node.inputs or any(i not in consts for i in node.inputs):
        return None
    attrs = op.parse_attrs(node.attrs, node.name)
    in_types = [graph.types[i] for i in node.inputs]
    if op.kind == "elementwise":
        # Uniform inputs give a uniform output: evaluate once on 0-d arrays.
        args = [np.asarray(consts[i], dtype=t.dtype) for i, t in zip(node.inputs, in_types, strict=True)]
        with np.errstate(all="ignore"):
            value = np.asarray(op.reference(attrs, *args)).astype(node.type.dtype)
    elif op.view_affine is not None and node.type.size:
        # A layout view reads one input element per output element: a uniform input gives
        # its value everywhere, with no array made (a broadcast may be data-sized).
        value = np.asarray(consts[node.inputs[0]]).astype(node.type.dtype)
    elif op.kind in ("shape", "reduction") and all(t.size <= FOLD_LIMIT for t in (*in_types, node.type)):
        args = [np.full(t.shape, consts[i], dtype=t.dtype) for i, t in zip(node.inputs, in_types, strict=True)]
        with np.errstate(all="ignore"):
            result = np.asarray(op.reference(attrs, *args)).astype(node.type.dtype)
        flat = result.reshape(-1)
        if flat.size == 0 or not np.all((flat == flat[0]) | (np.isnan(flat) & np.isnan(flat[0]))):
            return None
        value = flat[0]
    else:
        return None
    return _constant(node, value)


def _swaps_folded(graph: Graph, node: Node, producers: dict[str, Node]) -> Node | None:
    """``node`` reading, for each input a swap of another value's last two axes, that value
    under the input's swap flag toggled (`OpDef.swap_flags`); None when no input is one."""
    flags = node.opdef.swap_flags
    if flags is None:
        return None
    inputs, attrs = list(node.inputs), dict(node.attrs)
    for k, flag in enumerate(flags):
        source = _swapped_source(graph, producers.get(inputs[k])) if flag is not None else None
        if source is not None:
            inputs[k], attrs[flag] = source, not attrs.get(flag, False)
    if inputs == list(node.inputs):
        return None
    node.opdef.parse_attrs(attrs, node.name)  # the flags stay valid attributes
    return node.with_(inputs=tuple(inputs), attrs=attrs)


def _swapped_source(graph: Graph, view: Node | None) -> str | None:
    """The input of ``view`` when ``view`` is a layout view that reads input element
    ``(..., j, i)`` at output element ``(..., i, j)`` and nothing else (probed through its
    `OpDef.view_affine` on unit coordinate forms), else None."""
    if view is None or view.opdef.view_affine is None or len(view.inputs) != 1:
        return None
    out_shape, in_shape = tuple(view.type.shape), tuple(graph.types[view.inputs[0]].shape)
    n = len(out_shape)
    if n < 2 or in_shape != (*out_shape[:-2], out_shape[-1], out_shape[-2]):
        return None
    units = tuple(Affine(0, tuple(int(a == k) for a in range(n))) for k in range(n))
    attrs = view.opdef.parse_attrs(view.attrs, view.name)
    read = view.opdef.view_affine(attrs, in_shape, out_shape, units, out_shape)
    swapped = (*units[:-2], units[-1], units[-2])
    return view.inputs[0] if read is not None and tuple(read) == swapped else None


def _empty_fill(graph: Graph, node: Node) -> float | None:
    """The value of every element of ``node`` when it has elements but an input has none:
    a reduction's or contraction's over empty slices (`OpDef.empty_value`), a per-axis view's
    fill (`OpDef.axis_images`: every element reads no image, a constant pad's ``cval``);
    None otherwise (a join of an empty input reads the others)."""
    op = node.opdef
    if not node.type.size or all(graph.types[i].size for i in node.inputs):
        return None
    if op.empty_value is not None:
        return op.empty_value
    if op.axis_images is not None:
        attrs = op.parse_attrs(node.attrs, node.name)
        return op.axis_images(attrs, tuple(graph.types[node.inputs[0]].shape), tuple(node.type.shape)).fill
    return None


def _constant(node: Node, value: np.ndarray) -> Node:
    """``node`` as a constant of its type, every element ``value`` (0-d, its dtype)."""
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


def _empty_scatter_target(graph: Graph, node: Node) -> str | None:
    """The base of a scatter that adds no values (its values input has no element)."""
    op = node.opdef
    if op.scatter is None:
        return None
    attrs = op.parse_attrs(node.attrs, node.name)
    # Which inputs hold the base and the values does not depend on the positions' shape.
    layout = op.scatter(attrs, node.type.shape, ())
    base, values = node.inputs[layout.base], node.inputs[layout.values]
    return base if graph.types[values].size == 0 and graph.types[base] == node.type else None

"""Forward mode: one sweep over a graph's nodes carrying a tangent beside each value.

`tangent_sweep` extends a graph with the tangents of its values for tangent inputs of the
``wrt`` inputs, node by node in the graph's (topological) order, one loop and no recursion.
A node's tangent is the sum of its inputs' contributions, in input order:

- an op linear in a group of its inputs (`OpDef.linear`, `dpt_ir.ir.registry.Linear`): the op
  itself applied to the group's tangents (zeros for members without one) and the other
  inputs' values, with the linear part's attributes. So a stencil's tangent is the same
  stencil over the same rows, a pad's a pad, matmul's two products; no op is named here;
- any other differentiable input: the transpose of the node's own VJP (`node_jvp`): the
  node alone in a graph, differentiated twice by `joint_graph` (its backward ``u ↦ Jᵀu`` is
  linear in ``u``, and the VJP of that in ``u`` seeded with the tangent is ``J v``, which reads
  no ``u``: the cotangent is a zero constant and the first backward is dead code). Loop ops get
  their tangent scan this way (`dpt_ir.ops.loop_reverse`).

Assumes: a valid graph, ``wrt`` checked (`check_wrt`). Guarantees: the original nodes
unchanged and first; the tangent nodes of a node tagged as its derivative work, as autodiff
tags a backward (`backward_tags`: the `expand` pass rebuilds a differentiated logsumexp from
the pieces its tangent shares), a tangent of each value's type; a ContractError for a node
on a differentiated path whose op has no derivative
entry and is not piecewise constant, naming the node and its op.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpt_ir.api import core as F
from dpt_ir.api.autodiff import active_values, joint_graph
from dpt_ir.ir.builder import GraphBuilder, Tensor
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, Input, Node, Output, unique_name
from dpt_ir.ir.records import backward_tags, joint_record, origin_of
from dpt_ir.ir.types import TensorType, is_float


def tangent_sweep(
    graph: Graph, wrt: Sequence[str], tangent_names: dict[str, str], outs: Sequence[str], expand: bool
) -> tuple[GraphBuilder, dict[str, str]]:
    """A builder holding ``graph``, a tangent input ``tangent_names[x]`` per ``wrt`` input and
    the tangent nodes; and the value holding the tangent of each output of ``outs``."""
    b, handles = GraphBuilder.from_graph(graph)
    tangents: dict[str, Tensor] = {w: b.add_input(tangent_names[w], graph.types[w]) for w in wrt}
    active = active_values(graph, wrt, [graph.output_value(o) for o in outs])
    for node in graph.nodes:
        if node.name in active and any(i in tangents for i in node.inputs):
            start = len(b.nodes)
            t = node_tangent(graph, node, handles, tangents, expand)
            b.tag_since(start, backward_tags(node.name))
            if t is not None:
                tangents[node.name] = t
    result: dict[str, str] = {}
    for o in outs:
        value = graph.output_value(o)
        t = tangents.get(value)
        result[o] = (t if t is not None else F.zeros_like(handles[value])).name
    return b, result


def node_tangent(
    graph: Graph, node: Node, handles: dict[str, Tensor], tangents: dict[str, Tensor], expand: bool
) -> Tensor | None:
    """The tangent of ``node`` from its inputs' ``tangents``; None where it has none (a
    piecewise-constant op or stop_gradient, or only non-differentiable inputs carry tangents)."""
    op = node.opdef
    if op.derivative is None:
        if op.piecewise_constant or op.stops_gradient:
            return None
        origin = origin_of(graph, node.name)
        raise ContractError(
            f"forward mode: node {node.name!r} (op {op.name!r}{f', {origin}' if origin else ''}) lies on the "
            f"differentiated path and op {op.name!r} has no derivative entry, so its derivative is unknown; "
            "expected ops differentiable where a tangent flows"
        )
    carried = [i for i, v in enumerate(node.inputs) if v in tangents and op.derivative.formula_for(i) is not None]
    if not carried:
        return None
    parts: list[Tensor] = []
    rest = set(carried)
    if op.linear is not None:
        attrs = op.linear.attrs(op.parse_attrs(node.attrs, node.name)) if op.linear.attrs else node.attrs
        for group in op.linear.groups_for(len(node.inputs)):
            hit = [i for i in group if i in rest]
            if not hit:
                continue
            args = [_group_arg(i, v, group, handles, tangents) for i, v in enumerate(node.inputs)]
            parts.append(handles[node.name].builder.emit(op.name, args, attrs))
            rest -= set(hit)
    if rest:
        parts.append(node_jvp(graph, node, sorted(rest), handles, tangents, expand))
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return _typed(total, node.type)


def _group_arg(i: int, value: str, group: tuple[int, ...], handles: dict[str, Tensor],
               tangents: dict[str, Tensor]) -> Tensor:  # fmt: skip
    if i not in group:
        return handles[value]
    t = tangents.get(value)
    return t if t is not None else F.zeros_like(handles[value])


def _typed(t: Tensor, want: TensorType) -> Tensor:
    if t.shape != want.shape:
        t = F.broadcast_to(t, want.shape)
    return F.cast(t, want.dtype) if t.dtype != want.dtype else t


def node_jvp(graph: Graph, node: Node, carried: list[int], handles: dict[str, Tensor],
             tangents: dict[str, Tensor], expand: bool) -> Tensor:  # fmt: skip
    """The tangent of ``node`` from the tangents of inputs ``carried``: the transpose of its
    VJP, derived on the node alone and emitted into the builder of ``handles``."""
    taken = {node.name}
    names = [unique_name(f"in{i}", taken) for i in range(len(node.inputs))]
    inputs = tuple(
        Input(name=n, type=graph.types[v], requires_grad=i in carried)
        for i, (n, v) in enumerate(zip(names, node.inputs, strict=True))
    )
    alone = node.model_copy(update={"inputs": tuple(names), "meta": {}})
    mini = Graph(name="node", inputs=inputs, nodes=(alone,), outputs=(Output(name="out", value=node.name),))
    wrt = [names[i] for i in carried]
    first = joint_graph(mini, wrt, ["out"], expand)
    level1 = joint_record(first)
    ct = level1.cotangents["out"]
    first = first.replace(
        inputs=tuple(i.model_copy(update={"requires_grad": True}) if i.name == ct else i for i in first.inputs)
    )
    grads = [level1.gradients[w] for w in wrt]
    second = joint_graph(first, [ct], grads, expand, strict=True)
    level2 = joint_record(second)
    b = handles[node.name].builder
    env: dict[str, Tensor] = {names[i]: handles[v] for i, v in enumerate(node.inputs)}
    env[node.name] = handles[node.name]
    env[ct] = F.zeros_like(handles[node.name])  # J v does not depend on the cotangent
    for w, g in zip(wrt, grads, strict=True):
        env[level2.cotangents[g]] = tangents[node.inputs[names.index(w)]]
    product = second.output_value(level2.gradients[ct])
    for n in _needed(second, product, env):
        env[n.name] = b.emit(n.op, [env[i] for i in n.inputs], n.attrs)
    return env[product]


def _needed(graph: Graph, value: str, known: dict[str, Tensor]) -> list[Node]:
    """The nodes of ``graph`` that ``value`` needs and ``known`` does not hold, in order."""
    want = {value}
    kept: list[Node] = []
    for n in reversed(graph.nodes):
        if n.name in want and n.name not in known:
            kept.append(n)
            want.update(n.inputs)
    kept.reverse()
    return kept


def float_tangent_inputs(graph: Graph, wrt: Sequence[str], prefix: str) -> dict[str, str]:
    """A new input name ``<prefix><x>`` (made unique) for the tangent of each ``wrt`` input."""
    taken = set(graph.types)
    return {w: unique_name(prefix + w, taken) for w in wrt if is_float(graph.types[w].dtype)}

"""Forward mode and second order, derived from the op table (docs/second_order.md):

- `jvp_graph`: forward mode, one sweep over the nodes (`dpt_ir.api.forward.tangent_sweep`):
  an op linear in an input (`OpDef.linear`) applied to the tangent, any other input's tangent
  the transpose of that node's VJP (its backward ``u ↦ Jᵀu`` is linear in ``u``; the VJP of
  that in ``u``, seeded with ``v``, is ``J v`` and reads no ``u``);
- `hvp_graph`: forward over reverse. The gradient graph with the loss seed fixed to 1 (the
  reverse, `joint_graph`), then `jvp_graph` of its gradient outputs for the vectors ``v``:
  ``H v``;
- `gnvp_graph`: ``J_rᵀ (J_r v)``: the jvp graph of the residual ``r``, extended with the
  VJP of ``r`` seeded with the tangent it computes, in one graph that shares the forward.

Each result is a forward-only graph: the original inputs, one vector input per ``wrt`` input
(``tangent.<x>`` for jvp, ``vector.<x>`` for hvp and gnvp), the original outputs and the
products (``tangent.<output>``, ``hvp.<x>`` with ``grad.<x>``, ``gnvp.<x>``), described by its
`Derived` record (`dpt_ir.ir.records`); the levels' `Autodiff` records are consumed on the way.
Dead nodes are dropped, the inputs kept (the caller passes them all).

Assumes: a valid graph. Guarantees: ContractError for a ``wrt`` that is not a differentiable
input, a non-float output to differentiate, and an op on a differentiated path whose second
derivative is unknown (`joint_graph`'s ``strict``: an op without a derivative entry that is
not piecewise constant, such as a loop's ``scan_vjp``), naming the node, the op and its
``dp.*`` function.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpt_ir.api.autodiff import check_wrt, joint_graph
from dpt_ir.api.forward import float_tangent_inputs, tangent_sweep
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, Input, Node, Output, unique_name
from dpt_ir.ir.records import Derived, derived_record, joint_record, phase_tag, with_derived, without_autodiff
from dpt_ir.ir.registry import CONSTANT_OP
from dpt_ir.ir.types import TensorType, is_float

TANGENT_PREFIX = "tangent."
VECTOR_PREFIX = "vector."
HVP_PREFIX = "hvp."
GNVP_PREFIX = "gnvp."
GRAD_PREFIX = "grad."
_FIRST_PREFIX = "first."  # the first level's gradient outputs while the second level is built


def float_outputs(graph: Graph, outputs: Sequence[str] | None, what: str) -> tuple[str, ...]:
    """``outputs`` (default: every float output), checked to name float outputs."""
    if outputs is None:
        names = tuple(o.name for o in graph.outputs if is_float(graph.types[o.value].dtype))
    else:
        names = tuple(outputs)
    for name in names:
        t = graph.types[graph.output_value(name)]
        if not is_float(t.dtype):
            raise ContractError(
                f"{what}: output {name!r} of graph {graph.name!r} has dtype {t.dtype}; expected a float output"
            )
    if not names:
        raise ContractError(f"{what}: graph {graph.name!r} has no float output to differentiate")
    return names


def jvp_graph(graph: Graph, wrt: Sequence[str], outputs: Sequence[str] | None = None, expand: bool = True) -> Graph:
    """The outputs and ``J v`` of ``outputs`` (default: every float output) for tangents
    ``tangent.<x>`` of the ``wrt`` inputs, as outputs ``tangent.<output>``: forward mode
    (`dpt_ir.api.forward.tangent_sweep`)."""
    wrt = check_wrt(graph, wrt)
    outs = float_outputs(graph, outputs, "jvp")
    # Unique names: a tangent scan's body is itself differentiated, and already holds tangent.<x>.
    tangent_in = float_tangent_inputs(graph, wrt, TANGENT_PREFIX)
    b, values = tangent_sweep(graph, wrt, tangent_in, outs, expand)
    taken_out = {o.name for o in graph.outputs}
    products = {o: unique_name(TANGENT_PREFIX + o, taken_out) for o in outs}
    out_list = [*graph.outputs, *(Output(name=products[o], value=values[o]) for o in outs)]
    b.set_outputs(out_list)
    swept = b.build()
    record = Derived(kind="jvp", wrt=wrt, of=outs, vectors=tangent_in, products=products)
    return Graph(name=graph.name, inputs=swept.inputs, nodes=tuple(_live(list(swept.nodes), out_list)),
                 outputs=tuple(out_list), meta=with_derived(without_autodiff(graph.meta), record))  # fmt: skip


def hvp_graph(graph: Graph, wrt: Sequence[str], loss: str, expand: bool = True) -> Graph:
    """The outputs, the gradient ``grad.<x>`` of ``loss`` and ``H v`` (``hvp.<x>``) for vectors
    ``vector.<x>`` of the ``wrt`` inputs: forward over reverse."""
    wrt = check_wrt(graph, wrt)
    float_outputs(graph, [loss], "hvp")
    shape = graph.types[graph.output_value(loss)].shape
    if shape != ():
        raise ContractError(
            f"hvp: output {loss!r} of graph {graph.name!r} has shape {list(shape)}; expected a scalar loss"
        )
    first, held = gradient_graph(graph, wrt, loss, expand)
    # Forward over reverse: the tangents of the gradient outputs are H v.
    tangent = jvp_graph(first, wrt, list(held.values()), expand)
    level = derived_record(tangent)
    vectors = {w: VECTOR_PREFIX + w for w in wrt}
    rename = {level.vectors[w]: vectors[w] for w in wrt}
    grads = {w: GRAD_PREFIX + w for w in wrt}
    products = {w: HVP_PREFIX + w for w in wrt}
    out_list = [*graph.outputs]
    out_list += [Output(name=grads[w], value=tangent.output_value(held[w])) for w in wrt]
    out_list += [Output(name=products[w], value=tangent.output_value(level.products[held[w]])) for w in wrt]
    record = Derived(kind="hvp", wrt=wrt, of=(loss,), vectors=vectors, products=products, gradients=grads)
    return _finish(tangent, graph, rename, {}, out_list, record)


def gradient_graph(graph: Graph, wrt: tuple[str, ...], loss: str, expand: bool = True) -> tuple[Graph, dict[str, str]]:
    """The gradient graph of ``loss`` (its seed fixed to 1), its gradient of each ``wrt`` input
    as output ``first.<x>`` (the returned names), out of the way of a second level's."""
    first = joint_graph(graph, wrt, [loss], expand)
    level1 = joint_record(first)
    held = {w: _FIRST_PREFIX + w for w in wrt}
    outs = [*graph.outputs, *(Output(name=held[w], value=first.output_value(level1.gradients[w])) for w in wrt)]
    return _finish(first, first, {}, {level1.cotangents[loss]: 1.0}, outs, None), held


def gnvp_graph(graph: Graph, wrt: Sequence[str], residual: str, expand: bool = True) -> Graph:
    """The outputs and ``J_rᵀ (J_r v)`` (``gnvp.<x>``) of output ``residual`` for vectors
    ``vector.<x>`` of the ``wrt`` inputs: its JVP, then its VJP seeded with that tangent."""
    wrt = check_wrt(graph, wrt)
    float_outputs(graph, [residual], "gnvp")
    jvp = jvp_graph(graph, wrt, [residual], expand)
    tangent = jvp.output_value(TANGENT_PREFIX + residual)
    joint = joint_graph(jvp, wrt, [residual], expand)
    level = joint_record(joint)
    vectors = {w: VECTOR_PREFIX + w for w in wrt}
    rename = {TANGENT_PREFIX + w: vectors[w] for w in wrt}
    # The seed is the tangent itself: the cotangent input's readers read the tangent's node.
    rename[level.cotangents[residual]] = rename.get(tangent, tangent)
    products = {w: GNVP_PREFIX + w for w in wrt}
    out_list = [*graph.outputs, *(Output(name=products[w], value=joint.output_value(level.gradients[w])) for w in wrt)]
    record = Derived(kind="gnvp", wrt=wrt, of=(residual,), vectors=vectors, products=products)
    return _finish(joint, graph, rename, {}, out_list, record)


def _finish(
    graph: Graph,
    original: Graph,
    rename: dict[str, str],
    constants: dict[str, float],
    outputs: list[Output],
    record: Derived | None,
) -> Graph:
    """``graph`` with the inputs of ``rename`` renamed (or redirected to a node), those of
    ``constants`` replaced by constants of that value, ``outputs`` as its outputs, the nodes no
    output needs dropped and ``record`` in place of its `Autodiff` record (None: keep it).
    The inputs are ``original``'s, then the renamed ones that remain inputs."""
    taken = set(graph.types)
    fills: list[Node] = []
    subst = dict(rename)
    for name, value in constants.items():
        t: TensorType = graph.types[name]
        node = unique_name(f"{name.replace('.', '_')}_fill", taken)
        attrs = {"value": value, "dtype": t.dtype, "shape": list(t.shape)}
        fills.append(Node(name=node, op=CONSTANT_OP, attrs=attrs, type=t, meta=phase_tag("forward")))
        subst[name] = node
    nodes = [*fills, *(_renamed(n, subst) for n in graph.nodes)]
    outs = [o.model_copy(update={"value": subst.get(o.value, o.value)}) for o in outputs]
    kept = _live(nodes, outs)
    if record is None:  # an intermediate level: its inputs stay, but the replaced ones
        inputs = tuple(i for i in graph.inputs if i.name not in subst)
        meta = without_autodiff(graph.meta)
    else:
        vectors = set(record.vectors.values())
        # One input per vector, though several inputs may be redirected to it (gnvp of an output
        # that is a wrt input: the seed is the tangent input itself).
        extra = {rename[i.name]: i.type for i in graph.inputs if rename.get(i.name) in vectors}
        inputs = (*original.inputs, *(Input(name=n, type=t, requires_grad=False) for n, t in extra.items()))
        meta = with_derived(without_autodiff(graph.meta), record)
    return Graph(name=graph.name, inputs=inputs, nodes=tuple(kept), outputs=tuple(outs), meta=meta)


def _renamed(node: Node, subst: dict[str, str]) -> Node:
    if not any(i in subst for i in node.inputs):
        return node
    return node.model_copy(update={"inputs": tuple(subst.get(i, i) for i in node.inputs)})


def _live(nodes: list[Node], outputs: list[Output]) -> list[Node]:
    """The nodes some output needs, in order: one reverse sweep."""
    needed = {o.value for o in outputs}
    kept: list[Node] = []
    for node in reversed(nodes):
        if node.name in needed:
            kept.append(node)
            needed.update(node.inputs)
    kept.reverse()
    return kept


def derived_graph(graph: Graph, wrt: Sequence[str], loss: str | None, kind: str, of: str | None,
                  expand: bool = True) -> Graph:  # fmt: skip
    """The derived graph of ``kind`` ("jvp", "hvp", "gnvp": of residual output ``of``) of a
    program over ``graph`` differentiating ``wrt`` with loss ``loss``; a ContractError for an
    hvp without a loss (no single scalar float output, and none named)."""
    if kind == "jvp":
        return jvp_graph(graph, wrt, expand=expand)
    if kind == "hvp":
        if loss is None:
            raise ContractError(
                f"program {graph.name!r}: hvp needs the loss that value_and_grad differentiates; the graph "
                "has no single scalar float output, so compile with loss='<output name>'"
            )
        return hvp_graph(graph, wrt, loss, expand=expand)
    assert kind == "gnvp" and of is not None
    return gnvp_graph(graph, wrt, of, expand=expand)

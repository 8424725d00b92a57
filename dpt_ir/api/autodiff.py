"""Reverse-mode differentiation over the table of derivative formulas.

`joint_graph` extends a forward graph with the backward nodes for ``wrt``: one cotangent
*input* per seeded output (``ct.<output>``) and one gradient *output* per wrt input
(``grad.<input>``). Backward nodes are ordinary IR built by the ops' formulas, tagged
as backward and with the forward node they differentiate (`dpt_ir.ir.records.backward_tags`). Only floating values carry
gradients. Contributions to one value are summed in a fixed order, so the result is
deterministic. With ``expand`` (`CompileOptions.expand`, the default), an op that declares an
expansion gets the formula that builds the pieces its expansion rebuilds (`GradContext.expanded`).
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.ir.builder import GraphBuilder, Tensor
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, Output
from dpt_ir.ir.records import Autodiff, backward_tags, origin_of, with_autodiff
from dpt_ir.ir.registry import GradContext
from dpt_ir.ir.types import is_float

COTANGENT_PREFIX = "ct."
GRADIENT_PREFIX = "grad."


def check_wrt(graph: Graph, wrt: Sequence[str]) -> tuple[str, ...]:
    """Validate ``wrt`` against the graph's inputs; ContractError naming the culprit."""
    if isinstance(wrt, str):
        wrt = [wrt]
    if not isinstance(wrt, Sequence):
        raise ContractError(f"wrt: expected an input name or a list of input names, found {wrt!r}")
    names = tuple(wrt)
    for name in names:
        inp = graph.input_map.get(name)
        if inp is None:
            raise ContractError(
                f"wrt: {name!r} is not an input of graph {graph.name!r}; inputs are {[i.name for i in graph.inputs]}"
            )
        # The dtype first: an integer or bool input is never differentiable, whatever its flag says.
        if not is_float(inp.type.dtype):
            raise ContractError(f"wrt: input {name!r} has dtype {inp.type.dtype}; expected a float dtype")
        if not inp.requires_grad:
            raise ContractError(
                f"wrt: input {name!r} was declared with requires_grad=False; expected a differentiable input"
            )
    if len(set(names)) != len(names):
        raise ContractError(f"wrt: duplicate names in {list(names)}")
    return names


def default_loss(graph: Graph) -> str:
    """The only scalar floating output, or ContractError."""
    scalars = [
        o.name for o in graph.outputs if graph.types[o.value].shape == () and is_float(graph.types[o.value].dtype)
    ]
    if len(scalars) != 1:
        raise ContractError(
            f"graph {graph.name!r}: cannot choose the output to differentiate: expected exactly "
            f"one scalar float output, found {scalars or 'none'}; name it with loss= or a seed"
        )
    return scalars[0]


def active_values(graph: Graph, wrt: Sequence[str], seeded: Sequence[str]) -> set[str]:
    """Float values on some path from a wrt input to a seeded output value."""
    nxg = graph.to_networkx()
    import networkx as nx

    forward: set[str] = set(wrt)
    for w in wrt:
        forward |= nx.descendants(nxg, w)
    backward: set[str] = set(seeded)
    for s in seeded:
        backward |= nx.ancestors(nxg, s)
    return {v for v in forward & backward if is_float(graph.types[v].dtype)}


def joint_graph(
    graph: Graph, wrt: Sequence[str], seed_outputs: Sequence[str], expand: bool = True, strict: bool = False
) -> Graph:
    """The forward graph plus its backward for ``wrt``, seeded at ``seed_outputs``; ``expand``:
    whether the `expand` pass will rebuild the ops that declare an expansion. ``strict`` (second
    order, `dpt_ir.api.second_order`): a node on a differentiated path whose op has no
    derivative entry and is neither `OpDef.piecewise_constant` nor `OpDef.stops_gradient` is a
    ContractError naming it, where first order passes no gradient through it."""
    wrt = check_wrt(graph, wrt)
    for name in seed_outputs:
        value = graph.output_value(name)
        if not is_float(graph.types[value].dtype):
            raise ContractError(f"seed: output {name!r} has dtype {graph.types[value].dtype} and is not differentiable")
    b, handles = GraphBuilder.from_graph(graph)
    cotangents: dict[str, list[Tensor]] = {}
    ct_names: dict[str, str] = {}
    for name in seed_outputs:
        value = graph.output_value(name)
        ct = b.add_input(COTANGENT_PREFIX + name, graph.types[value], requires_grad=False)
        ct_names[name] = ct.name
        cotangents.setdefault(value, []).append(ct)

    active = active_values(graph, wrt, [graph.output_value(n) for n in seed_outputs])
    for node in reversed(graph.nodes):
        if node.name not in active or node.name not in cotangents:
            continue
        start = len(b.nodes)
        gy = _accumulate(cotangents.pop(node.name))
        _backprop_node(graph, node.name, gy, handles, active, cotangents, expand, strict)
        b.tag_since(start, backward_tags(node.name))

    outputs = list(graph.outputs)
    grad_names: dict[str, str] = {}
    for w in wrt:
        start = len(b.nodes)
        parts = cotangents.get(w)
        g = _accumulate(parts) if parts else F.zeros_like(handles[w])
        b.tag_since(start, backward_tags(w))
        grad_names[w] = GRADIENT_PREFIX + w
        outputs.append(Output(name=GRADIENT_PREFIX + w, value=g.name))
    b.set_outputs(outputs)
    joint = b.build()
    record = Autodiff(wrt=tuple(wrt), cotangents=ct_names, gradients=grad_names)
    return joint.replace(meta=with_autodiff(graph.meta, record))


def _accumulate(parts: list[Tensor]) -> Tensor:
    total = parts[0]
    for p in parts[1:]:
        total = total + p
    return total


def _backprop_node(
    graph: Graph,
    name: str,
    gy: Tensor,
    handles: dict[str, Tensor],
    active: set[str],
    cotangents: dict[str, list[Tensor]],
    expand: bool,
    strict: bool,
) -> None:
    node = graph.node(name)
    op = node.opdef
    if op.derivative is None:
        if strict and not (op.piecewise_constant or op.stops_gradient):
            origin = origin_of(graph, name)
            raise ContractError(
                f"second order: node {name!r} (op {op.name!r}{f', {origin}' if origin else ''}) lies on the "
                f"differentiated path and op {op.name!r} has no derivative entry, so its derivative is unknown; "
                "expected ops differentiable to second order"
            )
        return
    sig = graph.signature(node)
    ins = tuple(handles[i] for i in node.inputs)
    for i, inp in enumerate(node.inputs):
        if inp not in active:
            continue
        formula = op.derivative.formula_for(i)
        if formula is None:
            continue
        ctx = GradContext(op, sig, gy, ins, handles[name], index=i, expanded=expand and op.expansion is not None)
        g = formula(ctx)
        target = graph.types[inp]
        if g.shape != target.shape:
            g = F.sum_to(g, target.shape)
        if g.dtype != target.dtype:
            g = F.cast(g, target.dtype)
        cotangents.setdefault(inp, []).append(g)


def seed_arrays(graph: Graph, seed: object) -> dict[str, np.ndarray]:
    """Normalise a user seed (None, or a dict output name -> scalar or array) to arrays of
    each seeded output's type."""
    if seed is None:
        seed = {default_loss(graph): 1.0}
    if not isinstance(seed, dict):
        raise ContractError(f"seed: expected a dict output name -> scalar or array, found {type(seed).__name__}")
    out: dict[str, np.ndarray] = {}
    for name, value in seed.items():
        t = graph.types[graph.output_value(name)]
        arr = np.asarray(value)
        if arr.dtype.kind not in "biuf":
            raise ContractError(
                f"seed for output {name!r}: expected a real scalar or array, found {type(value).__name__}"
                f" of dtype {arr.dtype}"
            )
        if arr.shape == () and t.shape != ():
            arr = np.full(t.shape, arr)
        if arr.shape != t.shape:
            raise ContractError(
                f"seed for output {name!r}: expected a scalar or shape {list(t.shape)}, found shape {list(arr.shape)}"
            )
        if not is_float(t.dtype):
            raise ContractError(f"seed: output {name!r} has dtype {t.dtype} and is not differentiable")
        out[name] = arr.astype(t.dtype)
    return out

"""The reverse of a loop, ``scan_vjp``, and its own derivative: the tangent scan.

``scan_vjp`` (see `dpt_ir.ops.loop`) takes a scan's inputs plus the packed cotangent ``g`` of
its results and gives ``Jᵀ g``, the packed gradients of the scan's float inputs. Its
derivative entry is what forward mode and second order through loops are built from
(docs/second_order.md):

- the **tangent scan** of a scan: a ``scan`` whose carries are (carries, their tangents), whose
  ``xs`` and closed-over tensors are followed by their tangents, and whose body is the body's
  jvp graph (`body_jvp`, derived once per body by `dpt_ir.api.second_order.jvp_graph`), so
  the tangent is carried forward step by step through one compiled body;
- ``scan_vjp`` is linear in ``g``: its vjp with respect to ``g``, for the cotangent ``w`` of its
  result (a tangent of each float input), is ``J w``, the tangent half of the tangent scan
  of the inputs with tangents ``w``;
- its vjp with respect to the scan's inputs ``θ`` is ``∂θ <w, J(θ)ᵀ g> = ∂θ <J(θ) w, g>``: the
  ``scan_vjp`` of that tangent scan seeded with ``g`` on the tangent results and zero on
  the others, which replays the node's checkpoint policy (revolve) over the doubled carries.

So the jvp of a scan (the transpose of its vjp, `jvp_graph`) is one tangent scan, and the
hvp (reverse over reverse, `hvp_graph`) adds the reverse sweep of that tangent scan.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.api.second_order import jvp_graph
from dpt_ir.ir import records
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, Input, Output
from dpt_ir.ir.registry import ALL_INPUTS, Derivative, GradContext, OpDef, register_op
from dpt_ir.ir.types import TensorType, is_float
from dpt_ir.ops.loop import (
    ScanAttrs,
    Stepper,
    checkpoint_plan,
    grad_layout,
    infer_scan,
    once_per_cotangent,
    pack,
    packed_part,
    result_types,
    split_inputs,
    unpack,
)


def _infer_vjp(inputs: tuple[TensorType, ...], a: ScanAttrs, where: str) -> TensorType:
    if not inputs:
        raise ContractError(f"{where}: expected the scan's inputs and its packed cotangent, found no input")
    forward = inputs[:-1]
    out = infer_scan(forward, a, where)
    if inputs[-1] != out:
        raise ContractError(f"{where}: the packed cotangent has type {inputs[-1]}; expected {out}, the scan's")
    return TensorType(shape=(sum(size for _, _, size in grad_layout(forward)),), dtype=out.dtype)


def _scan_vjp_ref(a: ScanAttrs, *arrays: np.ndarray) -> np.ndarray:
    forward, gy = arrays[:-1], arrays[-1]
    types = tuple(TensorType(shape=x.shape, dtype=x.dtype.name) for x in forward)
    stepper = Stepper(a, forward)
    results = unpack(gy, result_types(a.body, a))
    g_carry = [r.copy() for r in results[: a.carries]]
    g_ys = results[a.carries :]
    names = stepper.names
    g_xs = [np.zeros_like(x) for x in stepper.xs]
    n_fixed = a.carries + a.xs + (1 if a.index else 0)
    g_closure = [np.zeros_like(c) if is_float(c.dtype.name) else None for c in stepper.closure]
    slots: list[list[np.ndarray]] = []
    carry = list(forward[: a.carries])
    for act in checkpoint_plan(a, types).actions:
        if act.kind == "store":
            slots[act.slot :] = [list(carry)]
        elif act.kind == "restore":
            carry = list(slots[act.slot])
        elif act.kind == "advance":
            for i in range(act.at, act.at + act.count):
                carry = stepper.forward(carry, i)[0]
        else:
            grads = stepper.vjp(carry, act.at, [*g_carry, *(y[act.at] for y in g_ys)])
            g_carry = [grads[names[k]] for k in range(a.carries)]
            for j, g in enumerate(g_xs):
                g[act.at] = grads[names[a.carries + j]]
            for j, g in enumerate(g_closure):
                if g is not None:
                    g += grads[names[n_fixed + j]]
    parts = [*g_carry, *g_xs, *g_closure]
    return pack([p for p, t in zip(parts, types, strict=True) if is_float(t.dtype)], gy.dtype.name)


# -- the tangent scan ---------------------------------------------------------------------------
def tangent_attrs(a: ScanAttrs) -> ScanAttrs:
    """The attributes of the tangent scan of a scan with attributes ``a``: its body is
    `body_jvp`, each carry and float ``xs`` gains a tangent, the same length and policy."""
    body = body_jvp(a)
    float_xs = sum(is_float(i.type.dtype) for i in a.body.inputs[a.carries : a.carries + a.xs])
    return a.model_copy(update={"body": body, "carries": 2 * a.carries, "xs": a.xs + float_xs})


def body_jvp(a: ScanAttrs) -> Graph:
    """The tangent scan's body: the body's jvp graph (every float input's tangent, every
    output's tangent), its inputs and outputs in scan order: carries then their tangents, xs
    slices then the float ones' tangents, the step index, closed-over tensors then the float
    ones' tangents; outputs: new carries, their tangents, ys, their tangents."""
    return _body_jvp(a.body.model_dump_json(), a.carries, a.xs, a.index)


@functools.lru_cache(maxsize=64)
def _body_jvp(doc: str, carries: int, xs: int, index: bool) -> Graph:
    body = Graph.model_validate_json(doc)
    floats = [i.name for i in body.inputs if is_float(i.type.dtype)]
    derived = jvp_graph(body, floats)
    record = records.derived_record(derived)
    by_name = {i.name: i for i in derived.inputs}

    def with_tangents(group: tuple[Input, ...]) -> list[Input]:
        tangents = [by_name[record.vectors[i.name]] for i in group if i.name in record.vectors]
        # Every float input is differentiable, so the tangent scan has a reverse of its own.
        return [i.model_copy(update={"requires_grad": True}) for i in (*group, *tangents)]

    ins = body.inputs
    n_fixed = carries + xs + (1 if index else 0)
    inputs = [*with_tangents(ins[:carries]), *with_tangents(ins[carries : carries + xs]),
              *ins[carries + xs : n_fixed], *with_tangents(ins[n_fixed:])]  # fmt: skip
    outs = body.outputs

    def out_tangents(group: tuple[Output, ...]) -> list[Output]:
        return [*group, *(Output(name=record.products[o.name], value=derived.output_value(record.products[o.name]))
                          for o in group)]  # fmt: skip

    outputs = [*out_tangents(outs[:carries]), *out_tangents(outs[carries:])]
    return Graph(name=f"{body.name}.jvp", inputs=tuple(inputs), nodes=derived.nodes, outputs=tuple(outputs))


def _tangent_scan(c: GradContext) -> tuple[Any, list[Any], list[int], ScanAttrs]:
    """The tangent scan of the scan whose inputs ``scan_vjp`` reads, with the cotangent of
    ``scan_vjp``'s result as the inputs' tangents: the node, its inputs, the position of each
    of the scan's inputs among them, and its attributes."""
    a: ScanAttrs = c.attrs
    n = len(c.sig.inputs) - 1
    types = c.sig.inputs[:n]
    ins = [c.input(k) for k in range(n)]
    tangents = {}
    for k, offset, size in grad_layout(types):
        tangents[k] = F.cast(F.reshape(c.gy[offset : offset + size], types[k].shape), types[k].dtype)
    order: list[Any] = []
    position = [0] * n
    for group in split_inputs(n, a, "scan_vjp"):
        for k in group:
            position[k] = len(order)
            order.append(ins[k])
        order += [tangents[k] for k in group if k in tangents]
    ta = tangent_attrs(a)
    node = once_per_cotangent(
        c.gy, "tangent_scan", lambda: F.builder_of(order, "scan_vjp").emit("scan", order, ta.model_dump(mode="json"))
    )
    return node, order, position, ta


def _pieces(packed: Any, types: list[TensorType]) -> list[Any]:
    out, offset = [], 0
    for t in types:
        out.append(packed[offset : offset + t.size])
        offset += t.size
    return out


def _join(parts: list[Any]) -> Any:
    return parts[0] if len(parts) == 1 else F.concatenate(parts, axis=0)


def _scan_vjp_grad(c: GradContext) -> Any:
    a: ScanAttrs = c.attrs
    n = len(c.sig.inputs) - 1
    node, order, position, ta = _tangent_scan(c)
    results = result_types(a.body, a)
    k = a.carries  # the tangent scan's results: carries, their tangents, ys, their tangents
    if c.index == n:  # the packed cotangent: J w, the tangent results in the scan's layout
        tangent = _pieces(node, result_types(ta.body, ta))
        return _join([*tangent[k : 2 * k], *tangent[2 * k + len(results) - k :]])

    def reverse() -> Any:
        g = c.input(n)
        seeded = _pieces(g, results)
        zeros = [g.builder.constant(0.0, t.dtype, (t.size,)) for t in results]
        seed = _join([*zeros[:k], *seeded[:k], *zeros[k:], *seeded[k:]])
        return g.builder.emit("scan_vjp", [*order, seed], ta.model_dump(mode="json"))

    vjp = once_per_cotangent(c.gy, "tangent_scan_vjp", reverse)
    types = tuple(TensorType(shape=x.shape, dtype=x.dtype) for x in order)
    return packed_part(vjp, types, position[c.index], c.input_type(c.index).shape, "scan_vjp")


register_op(
    OpDef(
        name="scan_vjp",
        kind="loop",
        arity=None,
        attrs=ScanAttrs,
        infer=_infer_vjp,
        reference=_scan_vjp_ref,
        derivative=Derivative(formulas={ALL_INPUTS: _scan_vjp_grad}, saved_inputs=ALL_INPUTS),
        cost="expensive",
        doc="reverse sweep of a scan with its checkpoint policy: packed gradients of its float inputs",
    )
)

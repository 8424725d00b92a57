"""The pieces a compiled loop is built from.

Assumes: a loop node's attributes (`dpt_ir.ops.loop.ScanAttrs`).
Guarantees: `piece_names` names a loop's body and body-vjp pieces by the body's content
(one per distinct body); `vjp_piece` is the body's joint graph reduced to its gradient
outputs, a closure's gradient summed into ``acc.<input>``; `check_loop_dtypes` refuses
float inputs outside the carries' dtype (`ContractError`).
"""

from __future__ import annotations

import hashlib

from dpt_ir.ir import records
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, Node, Output
from dpt_ir.ir.types import TensorType, is_float
from dpt_ir.ops.loop import ScanAttrs, body_vjp


def piece_names(a: ScanAttrs) -> tuple[str, str]:
    """The names of a loop's body and body-vjp pieces (one per distinct body)."""
    digest = hashlib.sha256(a.body.model_dump_json().encode()).hexdigest()[:12]
    return f"body_{digest}", f"body_vjp_{digest}"


ACC_PREFIX = "acc."  # the vjp piece's input holding a closure's gradient summed over later steps


def vjp_piece(a: ScanAttrs) -> Graph:
    """The vjp program's graph: the body's joint graph reduced to its gradient outputs,
    where each float closed-over input's gradient is ``acc.<input> + this step's part``
    (the running sum over the steps already reversed, fused into the vjp kernel: the same
    additions in the same order as summing afterwards, without a launch per step)."""
    from dpt_ir.ir.builder import GraphBuilder

    joint = body_vjp(a.body)
    grads = records.joint_record(joint).gradients
    b, handles = GraphBuilder.from_graph(joint)
    closures = a.body.inputs[a.carries + a.xs + (1 if a.index else 0) :]
    outputs = {o.name: o.value for o in joint.outputs if o.name in set(grads.values())}
    for inp in closures:
        if is_float(inp.type.dtype):
            acc = b.add_input(ACC_PREFIX + inp.name, inp.type)
            total = b.emit("add", [acc, handles[outputs[grads[inp.name]]]], meta=records.phase_tag("backward"))
            outputs[grads[inp.name]] = total.name
    b.set_outputs([Output(name=k, value=v) for k, v in outputs.items()])
    return b.build().replace(name=f"{a.body.name}.vjp", meta={})


def check_loop_dtypes(node: Node, in_types: tuple[TensorType, ...]) -> None:
    """Compiled loops pack every float input's gradient in the carries' dtype."""
    dtype = in_types[0].dtype
    for k, t in enumerate(in_types):
        if is_float(t.dtype) and t.dtype != dtype:
            raise ContractError(
                f"compile: node {node.name!r}: loop input {k} has dtype {t.dtype}; compiled loops expect every "
                f"float input in the carries' dtype {dtype}"
            )

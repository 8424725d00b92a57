"""The pieces a compiled loop is built from.

Assumes: a loop node's attributes (`dpt_ir.ops.loop.ScanAttrs`).
Guarantees: `piece_names` names a loop's body and body-vjp pieces by the body's content
(one per distinct body and set of unread gradients); `vjp_piece` is the body's joint graph
reduced to its gradient outputs but the ``unread`` ones (`unread_gradients`), a closure's
gradient summed into ``acc.<input>``; `check_loop_dtypes` refuses float inputs outside the
carries' dtype (`ContractError`).
"""

from __future__ import annotations

import hashlib

from dpt_ir.ir import records
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, Node, Output
from dpt_ir.ir.types import TensorType, is_float
from dpt_ir.ops.loop import ScanAttrs, body_input, body_vjp


def piece_names(a: ScanAttrs, unread: frozenset[str] = frozenset()) -> tuple[str, str]:
    """The names of a loop's body and body-vjp pieces (one per distinct body; the vjp's also
    per set of ``unread`` body inputs, whose gradients it leaves out)."""
    digest = hashlib.sha256(a.body.model_dump_json().encode()).hexdigest()[:12]
    tail = "_" + hashlib.sha256(",".join(sorted(unread)).encode()).hexdigest()[:8] if unread else ""
    return f"body_{digest}", f"body_vjp_{digest}{tail}"


ACC_PREFIX = "acc."  # the vjp piece's input holding a closure's gradient summed over later steps


def vjp_piece(a: ScanAttrs, unread: frozenset[str] = frozenset()) -> Graph:
    """The vjp program's graph: the body's joint graph reduced to its gradient outputs but
    those of the ``unread`` body inputs (`unread_gradients`), where each float closed-over
    input's gradient is ``acc.<input> + this step's part`` (the running sum over the steps
    already reversed, fused into the vjp kernel: the same additions in the same order as
    summing afterwards, without a launch per step)."""
    from dpt_ir.ir.builder import GraphBuilder

    joint = body_vjp(a.body)
    grads = records.joint_record(joint).gradients
    b, handles = GraphBuilder.from_graph(joint)
    closures = a.body.inputs[a.carries + a.xs + (1 if a.index else 0) :]
    wanted = {g for name, g in grads.items() if name not in unread}
    outputs = {o.name: o.value for o in joint.outputs if o.name in wanted}
    for inp in closures:
        if is_float(inp.type.dtype) and inp.name not in unread:
            acc = b.add_input(ACC_PREFIX + inp.name, inp.type)
            total = b.emit("add", [acc, handles[outputs[grads[inp.name]]]], meta=records.phase_tag("backward"))
            outputs[grads[inp.name]] = total.name
    b.set_outputs([Output(name=k, value=v) for k, v in outputs.items()])
    return b.build().replace(name=f"{a.body.name}.vjp", meta={})


def live_values(graph: Graph) -> set[str]:
    """The values of ``graph`` that depend on an input requiring a gradient (one walk in
    node order; a value read before it is defined counts as live, so nothing is pruned
    wrongly)."""
    live = {i.name for i in graph.inputs if i.requires_grad}
    known = {i.name for i in graph.inputs}
    for n in graph.nodes:
        if any(v in live or v not in known for v in n.inputs):
            live.add(n.name)
        known.add(n.name)
    return live


def unread_gradients(live: set[str], node: Node, a: ScanAttrs) -> frozenset[str]:
    """The body inputs standing for ``scan_vjp`` node ``node``'s closed-over inputs whose
    gradient no output of its graph (a first-order joint graph: the forward outputs and the
    gradients of inputs that require one) reads: the input's value is not in ``live``
    (`live_values`), so any gradient it passed on would end at inputs that take none (a
    damping profile, a source mask). Each one the vjp computes costs a read and a write of
    its running sum a step. An ``xs`` input's gradient stays: it is one row a step, and
    leaving out the wave's (`benchmarks/bench_wave.py`) turned its vjp's first kernel from a
    reduction into a pointwise kernel that Warp's build runs slower (docs/loops.md)."""
    closures = range(a.carries + a.xs, len(node.inputs) - 1)  # the last input is the packed cotangent
    return frozenset(body_input(a, k) for k in closures if node.inputs[k] not in live)


def check_loop_dtypes(node: Node, in_types: tuple[TensorType, ...]) -> None:
    """Compiled loops pack every float input's gradient in the carries' dtype."""
    dtype = in_types[0].dtype
    for k, t in enumerate(in_types):
        if is_float(t.dtype) and t.dtype != dtype:
            raise ContractError(
                f"compile: node {node.name!r}: loop input {k} has dtype {t.dtype}; compiled loops expect every "
                f"float input in the carries' dtype {dtype}"
            )

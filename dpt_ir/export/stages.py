"""The stage list of a loop program's plan: its segments and loop nodes as the CPU runtime runs them.

Assumes: the `dpt_ir.runtime.loop_program.Segments` of the plan, bound on the CPU
(their `Loop` stages hold the resolved checkpoint schedule and whether a reverse reads the
carries its forward kept), and the CUDA build of every piece (`dpt_ir.export.cuda.cuda_pieces`).
Guarantees: one buffer table per plan: the plan's inputs by name, each stage's pieces'
tables under ``s<k>/`` (segments), ``s<k>.body/`` and ``s<k>.vjp/`` (a loop's body and body
vjp: one table per stage, as each `Loop` has its own workspaces), with their inputs that
are values of the enclosing graph (a segment's inputs, a loop's closed-over tensors) bound
to those values' buffers; a loop's packed result (``s<k>/packed``, ``s<k>/grads``), step
index (``s<k>/iota``, a constant), stored carries (``s<k>/slot<m>.<c>``) and kept carries
(``s<k>/keep<i>.<c>``) as buffers of their own. A ``scan_vjp`` stage's ``actions`` are the
`dpt_ir.ops.revolve.Action`s of its `Loop`'s schedule, the very list `Loop.reverse` executes;
where the reverse reads the carries its forward kept (store every carry, the forward in
the same plan), they are ``restore``/``reverse`` pairs from the last step down, over the
carries the forward stage keeps, as `Loop.reverse` reads them.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dpt_ir.export.bundle import Action, BufferSpec, Copy, Launches, LoopStage, PlanSpec, Result, SegmentStage
from dpt_ir.export.cuda import CudaBuild
from dpt_ir.export.tables import Table, bytes_moved, constants, piece_table
from dpt_ir.ir import records
from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ops.loop import body_input
from dpt_ir.runtime.loop_pieces import ACC_PREFIX

_PLAN_ROLES = ("input", "cotangent", "output", "gradient")  # a piece's tables hold these as workspace


class _Plan:
    """The buffer table and constants of one plan being built."""

    def __init__(self, name: str, build: CudaBuild, status: int) -> None:
        self.name, self.build, self.status = name, build, status
        self.buffers: dict[str, BufferSpec] = {}
        self.constants: dict[str, np.ndarray] = {}  # buffer -> data (ref.npz's constant/<plan>/<buffer>)
        self.env: dict[str, str] = {}  # value of the plan's graph -> its buffer
        self.kept: dict[int, list[list[str]]] = {}  # id(forward Loop) -> the carries it keeps

    def add(self, spec: BufferSpec, data: np.ndarray | None = None) -> str:
        self.buffers.setdefault(spec.name, spec)
        if data is not None:
            self.constants[spec.name] = data
        return spec.name

    def table(self, piece: str, prefix: str, bound: dict[str, str]) -> Table:
        """Piece ``piece``'s table under ``prefix``, added to the plan."""
        outputs = {o.value: "workspace" for o in self.build.graphs[piece].outputs}
        table = piece_table(self.build.graphs[piece], self.build, piece, self.status, outputs).renamed(prefix, bound)
        data = {table.where[p]: v for p, (_, v) in constants(self.build.kernels[piece]).items()}
        for b in table.buffers:
            own = b.with_(role="workspace") if b.role in _PLAN_ROLES else b
            self.add(own, data.get(b.name))
        return table


def loop_plan(
    name: str, segments: Any, build: CudaBuild, status: int, wrt: tuple[str, ...], outputs: list[str], flags: bool
) -> tuple[PlanSpec, dict[str, np.ndarray]]:
    """The `PlanSpec` of plan ``name`` (``segments``: its CPU stages) and its constants by buffer
    name; ``outputs``: the program's output names; ``flags``: the program raised on the inputs."""
    joint: Graph = segments.graph
    plan = _Plan(name, build, status)
    cotangents: dict[str, str] = records.cotangents(joint) if name == "tape" else {}
    for i in joint.inputs:
        t = i.type
        spec = BufferSpec(name=i.name, role="input", dtype=t.dtype, shape=list(t.shape), size=max(t.size, 1))  # type: ignore[arg-type]
        if i.name in cotangents.values():
            spec = spec.with_(role="cotangent")
        elif i.name in records.cotangents(joint).values():  # value_and_grad's seed of the loss: ones
            spec = spec.with_(role="constant")
        plan.add(spec, np.ones(t.shape, t.dtype).reshape(-1) if spec.role == "constant" else None)
        plan.env[i.name] = i.name
    stages: list[SegmentStage | LoopStage] = []
    for k, (kind, runner, what) in enumerate(segments.stages):
        if kind == "segment":
            table = plan.table(what.name, f"s{k}", {i.name: plan.env[i.name] for i in what.inputs})
            scheduled = plan.build.graphs[what.name]  # the passes may give an output another value
            plan.env.update({o.value: table.outputs[scheduled.output_value(o.name)] for o in what.outputs})
            run = Launches(piece=what.name, launches=table.launches, copies=table.copies)
            stages.append(SegmentStage(kind="segment", name=f"s{k}", run=run))
        else:
            stages.append(_loop_stage(plan, f"s{k}", runner, what))
    gradients = records.gradients(joint) if name != "run" else {}
    keyed = [(f"output/{o}", o) for o in outputs] + [(f"gradient/{w}", gradients[w]) for w in wrt if w in gradients]
    results = [
        Result(key=key, buffer=plan.env[joint.output_value(o)], shape=list(joint.types[joint.output_value(o)].shape))
        for key, o in keyed
    ]
    for r in results:
        b = plan.buffers[r.buffer]
        if b.role == "workspace":
            plan.buffers[r.buffer] = b.with_(role=r.key.split("/")[0])
    buffers = list(plan.buffers.values())
    spec = PlanSpec(
        name=name,  # type: ignore[arg-type]
        buffers=buffers,
        stages=stages,
        results=results,
        cotangents=dict(cotangents),
        bytes_moved=bytes_moved(buffers),
        expect_flags=flags,
    )
    return spec, plan.constants


def _loop_stage(plan: _Plan, prefix: str, loop: Any, node: Node) -> LoopStage:
    """The stage of loop node ``node`` (``loop``: its CPU `Loop`)."""
    a = loop.attrs
    c, nx = a.carries, a.xs
    inputs = list(node.inputs[:-1] if node.op == "scan_vjp" else node.inputs)
    names = loop.names

    def name_of(k: int) -> str:  # the body input of loop input k
        return body_input(a, k)

    closures = {name_of(k): plan.env[inputs[k]] for k in range(c + nx, len(inputs))}
    body_piece, vjp_piece = loop.piece_names
    body = plan.table(body_piece, f"{prefix}.body", closures)
    dtype = loop.in_types[0].dtype
    rows = [loop.in_types[c + j].size // a.length for j in range(nx)]
    iota = None
    if a.index:
        iota_spec = BufferSpec(name=f"{prefix}/iota", role="constant", dtype="int32", shape=[a.length], size=a.length)
        iota = plan.add(iota_spec, np.arange(a.length, dtype=np.int32))

    def feed(table: Table) -> list[Copy]:
        out = [Copy(dst=table.where[names[c + j]], src=plan.env[inputs[c + j]], size=rows[j], src_step=rows[j])
               for j in range(nx)]  # fmt: skip
        if iota is not None:
            out.append(Copy(dst=table.where[names[c + nx]], src=iota, size=1, src_step=1))
        return out

    body_graph = plan.build.graphs[body_piece]
    outs = [body.outputs[body_graph.output_value(o)] for o in loop.body_outputs]
    sizes = [t.size for t in loop.results]
    offsets = loop.result_offsets
    common: dict[str, Any] = {
        "kind": "loop",
        "name": prefix,
        "node": node.name,
        "op": node.op,
        "length": a.length,
        "body": Launches(piece=body_piece, launches=body.launches, copies=body.copies),
        "init": [plan.env[inputs[k]] for k in range(c)],
        "carry_in": [body.where[names[k]] for k in range(c)],
        "carry_out": outs[:c],
        "feed": feed(body),
        "policy": loop.schedule.policy,
    }
    if node.op == "scan":
        packed = _own(plan, f"{prefix}/packed", dtype, sum(sizes))
        plan.env[node.name] = packed
        emit = [Copy(dst=packed, src=outs[k], size=sizes[k] // a.length, dst_at=offsets[k],
                     dst_step=sizes[k] // a.length) for k in range(c, len(outs))]  # fmt: skip
        final = [Copy(dst=packed, src=outs[k], size=sizes[k], dst_at=offsets[k]) for k in range(c)]
        keep = [[_own(plan, f"{prefix}/keep{i}.{k}", dtype, sizes[k], "saved") for k in range(c)]
                for i in range(1, a.length)] if loop.keeps_every_carry() else []  # fmt: skip
        plan.kept[id(loop)] = keep
        return LoopStage(**common, emit=emit, final=final, keep=keep)
    return _reverse_stage(plan, prefix, loop, node, common, name_of, feed, vjp_piece)


def _reverse_stage(
    plan: _Plan,
    prefix: str,
    loop: Any,
    node: Node,
    common: dict[str, Any],
    name_of: Callable[[int], str],
    feed: Callable[[Table], list[Copy]],
    vjp_piece: str,
) -> LoopStage:
    """A ``scan_vjp`` node's stage (``common``: the fields it shares with a ``scan``'s)."""
    a = loop.attrs
    c = a.carries
    gy = plan.env[node.inputs[-1]]
    inputs = node.inputs[:-1]
    closures = {name_of(k): plan.env[inputs[k]] for k in range(c + a.xs, len(inputs))}
    vjp = plan.table(vjp_piece, f"{prefix}.vjp", closures)
    vg = plan.build.graphs[vjp_piece]
    dtype = loop.in_types[0].dtype

    def grad_of(k: int) -> str:  # the vjp output buffer of loop input k's gradient (this step's)
        return vjp.outputs[vg.output_value(loop.grad_outputs[name_of(k)])]

    def ct_of(k: int) -> str:  # the vjp input of body output k's cotangent
        return vjp.where[loop.ct_names[loop.body_outputs[k]]]

    sizes, offsets = [t.size for t in loop.results], loop.result_offsets
    rows = [s // a.length for s in sizes]
    vjp_feed = feed(vjp) + [
        Copy(dst=ct_of(k), src=gy, size=rows[k], src_at=offsets[k], src_step=rows[k]) for k in range(c, len(sizes))
    ]
    goff = loop.grad_offsets
    grads = _own(plan, f"{prefix}/grads", dtype, sum(t.size for k, t in enumerate(loop.in_types) if k in goff))
    plan.env[node.name] = grads
    sums = loop.closures()
    acc = {k: vjp.where[ACC_PREFIX + name_of(k)] for k in sums}
    after = [Copy(dst=ct_of(k), src=grad_of(k), size=sizes[k]) for k in range(c)]
    after += [Copy(dst=acc[k], src=grad_of(k), size=loop.in_types[k].size) for k in sums]
    for j in range(a.xs):
        k, row = c + j, loop.in_types[c + j].size // a.length
        if k in goff:
            after.append(Copy(dst=grads, src=grad_of(k), size=row, dst_at=goff[k], dst_step=row))
    final = [Copy(dst=grads, src=ct_of(k), size=sizes[k], dst_at=goff[k]) for k in range(c)]
    final += [Copy(dst=grads, src=acc[k], size=loop.in_types[k].size, dst_at=goff[k]) for k in sums]
    # The forward kept every carry: c_i for step i, read from the last step down. (A checkpointed
    # reverse replays its whole schedule here, its first sweep too: the same carries, the same bits.)
    if loop.source is not None and loop.stores_every_carry():
        slots = plan.kept[id(loop.source)]
        pairs = [
            (Action(kind="restore", at=i, slot=i), Action(kind="reverse", at=i)) for i in range(a.length - 1, -1, -1)
        ]
        actions = [act for pair in pairs for act in pair]
    else:
        slots = [[_own(plan, f"{prefix}/slot{m}.{k}", dtype, sizes[k], "saved") for k in range(c)]
                 for m in range(1, loop.schedule.slots)]  # fmt: skip
        actions = [Action(**act.model_dump()) for act in loop.schedule.actions]
    return LoopStage(
        **common,
        vjp=Launches(piece=vjp_piece, launches=vjp.launches, copies=vjp.copies),
        vjp_carry_in=[vjp.where[loop.names[k]] for k in range(c)],
        vjp_feed=vjp_feed,
        after_vjp=after,
        zero=list(acc.values()),
        begin=[Copy(dst=ct_of(k), src=gy, size=sizes[k], src_at=offsets[k]) for k in range(c)],
        final=final,
        slots=slots,
        actions=actions,
    )


def _own(plan: _Plan, name: str, dtype: str, size: int, role: str = "workspace") -> str:
    return plan.add(BufferSpec(name=name, role=role, dtype=dtype, shape=[size], size=max(size, 1)))  # type: ignore[arg-type]

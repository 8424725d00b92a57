"""A plan's buffer table and launch list, as `dpt_ir.runtime.plan.ExecutionPlan` binds them.

Assumes: a scheduled graph (its kernel plan, `dpt_ir.ir.kernel_ir.plan_of`, with a
schedule; the `Autodiff` record) and its C++ launches
(`dpt_ir.export.cuda.cuda_plans`). Guarantees:
the table mirrors a `Workspace`: one buffer per schedule buffer (values with disjoint live
ranges share it), graph inputs and cotangent inputs bound by name, reduction partials by
their parameter name, launch constants (sparse rows, scatter tables: role constant, data in
``ref.npz``) by their parameter name, the status word as ``$status``, and an output that is an input after
the passes as ``$copy:<input>`` (a `Copy` from the input before the launches, as
`ExecutionPlan.run` does); `Table.renamed` places a piece's table in a loop program's
plan. Roles: output / gradient for the plan's results, saved for a
buffer a forward group writes and a backward group reads, workspace for the others.
"""

from __future__ import annotations

import math
from typing import Any

from dpt_ir.backends.base import target_for
from dpt_ir.backends.launches import STATUS, KernelSource
from dpt_ir.export.bundle import BufferSpec, Copy, Launches, LaunchSpec, PlanSpec, Result, SegmentStage
from dpt_ir.export.cuda import CudaBuild, pointer_params
from dpt_ir.ir import records
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import plan_of

BLOCK = target_for("cuda").cuda_block  # CUDA threads per block of every launch (`Target.cuda_block`)
CHECKPOINTS = {  # plan -> its status reads: (stage name, the phases it launches)
    "run": [("forward", ("forward",))],
    "value_and_grad": [("value_and_grad", ("forward", "backward"))],
    "tape": [("forward", ("forward",)), ("backward", ("backward",))],
}
MOVED = ("input", "cotangent", "output", "gradient", "saved")
_ITEMSIZE = {"float32": 4, "float64": 8, "int32": 4, "uint32": 4, "uint8": 1, "bool": 1}


def _phase_of_values(graph: Graph) -> tuple[dict[str, str], dict[str, set[str]]]:
    """Value -> the phase of the group producing it; value -> phases of groups reading it."""
    made: dict[str, str] = {}
    read: dict[str, set[str]] = {}
    for g in plan_of(graph).groups:
        for n in g.nodes:
            made[n] = g.phase
        for v in g.inputs:
            read.setdefault(v, set()).add(g.phase)
    return made, read


def _value_buffers(graph: Graph, results: dict[str, str]) -> tuple[list[BufferSpec], dict[str, str]]:
    """Schedule buffers and the value -> buffer name map."""
    made, read = _phase_of_values(graph)
    specs, where = [], {}
    for buf in plan_of(graph).scheduled().buffers:
        values = buf.values
        if buf.output:
            (value,) = values
            role = results[value]
            shape = list(graph.types[value].shape)
        else:
            saved = any(made.get(v) == "forward" and "backward" in read.get(v, ()) for v in values)
            role, shape = ("saved" if saved else "workspace"), [buf.size]
        specs.append(BufferSpec(name=buf.id, role=role, dtype=buf.dtype, shape=shape, size=max(buf.size, 1)))
        where.update({v: buf.id for v in values})
    return specs, where


class Table:
    """A piece's buffer table, launches and copies; ``where``: the buffer of each input (by
    name), value, partial and constant a launch binds; ``outputs``: the buffer of each output
    value (``$copy:<input>`` for an output that is an input after the passes)."""

    def __init__(
        self,
        buffers: list[BufferSpec],
        launches: list[LaunchSpec],
        copies: list[Copy],
        where: dict[str, str],
        outputs: dict[str, str],
    ) -> None:
        self.buffers, self.launches, self.copies = buffers, launches, copies
        self.where, self.outputs = where, outputs

    def renamed(self, prefix: str, bound: dict[str, str]) -> Table:
        """Every buffer named ``<prefix>/<name>`` except those ``bound`` (name -> a buffer of
        the enclosing plan: dropped from the table) and the status word (one per plan)."""

        def new(name: str) -> str:
            return bound.get(name, name if name == STATUS else f"{prefix}/{name}")

        return Table(
            [b.with_(name=new(b.name)) for b in self.buffers if b.name not in bound],
            [k.with_(args=[new(a) for a in k.args]) for k in self.launches],
            [c.with_(dst=new(c.dst), src=new(c.src)) for c in self.copies],
            {v: new(b) for v, b in self.where.items()},
            {v: new(b) for v, b in self.outputs.items()},
        )


def piece_table(graph: Graph, build: CudaBuild, piece: str, status: int, results: dict[str, str]) -> Table:
    """The table of ``build``'s scheduled graph ``piece``'s launches (``results``: output
    value -> role)."""
    kernels = build.kernels[piece]
    buffers, where = _value_buffers(graph, results)
    specs: list[BufferSpec] = []
    cotangents: dict[str, str] = records.cotangents(graph)
    for i in graph.inputs:
        role = "cotangent" if i.name in cotangents.values() else "input"
        specs.append(_spec(i.name, role, i.type.dtype, i.type.shape))
        where[i.name] = i.name
    specs += buffers
    copies, outputs = [], {}
    for o in graph.outputs:
        if o.value not in graph.input_map:
            outputs[o.value] = where[o.value]
        elif o.value not in outputs:
            t = graph.types[o.value]
            outputs[o.value] = f"$copy:{o.value}"
            specs.append(_spec(outputs[o.value], results[o.value], t.dtype, t.shape))
            copies.append(Copy(dst=outputs[o.value], src=o.value, size=max(t.size, 1)))
    partials: dict[str, tuple[str, int]] = {}
    for k in kernels:
        partials.update(k.partials)
    specs += [
        BufferSpec(name=p, role="partial", dtype=t, shape=[n], size=n)  # type: ignore[arg-type]
        for p, (t, n) in partials.items()
    ]
    consts = constants(kernels)
    specs += [
        BufferSpec(name=p, role="constant", dtype=t, shape=[v.size], size=max(v.size, 1))  # type: ignore[arg-type]
        for p, (t, v) in consts.items()
    ]
    where.update({p: p for p in [*consts, *partials]})
    if status:
        specs.append(BufferSpec(name=STATUS, role="status", dtype="int32", shape=[status], size=status))
    phases = {g.id: g.phase for g in plan_of(graph).groups}
    ops = {g.id: sorted({graph.node_map[n].op for n in g.nodes}) for g in plan_of(graph).groups}
    launches = [
        LaunchSpec(
            name=k.name,
            kernel=build.units[k.name].name,
            group=k.group,
            ops=ops[k.group],
            phase=phases[k.group],
            dim=k.dim,
            host_tasks=build.host_tasks.get(k.name, k.dim),
            grid=-(-k.dim // BLOCK),
            block=BLOCK,
            args=[where[p] for p in pointer_params(k)],
            status_base=k.status_base,
        )
        for k in kernels
    ]
    return Table(specs, launches, copies, where, outputs)


def plan_spec(name: str, build: CudaBuild, status: int, expect_flags: bool) -> PlanSpec:
    """The `PlanSpec` of plan ``name`` of an ordinary program: ``status`` elements in the
    status word (0: no checks); ``expect_flags``: the program raised a NumericalError on the
    bundle's inputs. Its stages are its checkpoints: ``run`` and ``value_and_grad`` one,
    ``tape`` two (the forward phase's launches, then the backward's)."""
    graph = build.graphs[name]
    gradients = {graph.output_value(g): w for w, g in records.gradients(graph).items()}
    results = {o.value: ("gradient" if o.value in gradients else "output") for o in graph.outputs}
    table = piece_table(graph, build, name, status, results)
    stages = []
    for stage, phases in CHECKPOINTS[name]:
        run = Launches(piece=name, launches=[k for k in table.launches if k.phase in phases], copies=table.copies)
        stages.append(SegmentStage(kind="segment", name=stage, run=run))
    out = [
        Result(
            key=f"{results[v]}/{_result_name(graph, v, gradients)}",
            buffer=table.outputs[v],
            shape=list(graph.types[v].shape),
        )
        for v in results
    ]
    return PlanSpec(
        name=name,  # type: ignore[arg-type]
        buffers=table.buffers,
        stages=stages,
        results=out,
        cotangents=dict(records.cotangents(graph)),
        bytes_moved=bytes_moved(table.buffers),
        expect_flags=expect_flags,
    )


def bytes_moved(buffers: list[BufferSpec]) -> int:
    """Each input, cotangent, output, gradient and saved buffer once: the traffic floor."""
    return sum(b.size * _ITEMSIZE[b.dtype] for b in buffers if b.role in MOVED)


def constants(kernels: list[KernelSource]) -> dict[str, tuple[str, Any]]:
    """The launch constants a plan binds (param -> (Warp type, flat values)), by name: a
    constant bound by several launches is one buffer."""
    out: dict[str, tuple[str, Any]] = {}
    for k in kernels:
        out.update(k.constants)
    return out


def _result_name(graph: Graph, value: str, gradients: dict[str, str]) -> str:
    if value in gradients:
        return gradients[value]
    return next(o.name for o in graph.outputs if o.value == value)


def _spec(name: str, role: str, dtype: str, shape: Any) -> BufferSpec:
    size = max(math.prod(shape), 1)
    return BufferSpec(name=name, role=role, dtype=dtype, shape=list(shape), size=size)  # type: ignore[arg-type]

"""verify: check the invariants every pass must preserve.

Assumes: nothing (a Graph is already structurally valid by construction: names,
references, acyclicity, topological order, op arity, attributes and types).
Guarantees: returns the graph unchanged, or raises ContractError naming the first node,
kernel or buffer that breaks a pass-level invariant: a forward node reading a backward
value; a kernel plan that is not a valid `kernel_ir.KernelPlan` (a group without its
fields, a schedule whose assignment or totals disagree with its buffers); a fusion group
naming a node that does not exist; a kernel
reading a value that no earlier kernel writes and that is not a program input; a value
written by two kernels; a graph output no kernel writes; two values sharing a buffer
while both are live (the schedule's reuse would overwrite one with the other).
"""

from __future__ import annotations

from collections.abc import Sequence

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, verify_graph
from dpt_ir.ir.kernel_ir import KernelGroup, KernelPlan, has_plan, plan_of
from dpt_ir.ir.records import phase_of
from dpt_ir.passes.util import live_ranges

NAME = "verify"


def run(graph: Graph, options: object = None) -> Graph:
    verify_graph(graph)
    _check_phases(graph)
    plan = _check_groups(graph)
    if plan is not None:
        _check_dataflow(graph, plan.groups)
        _check_buffers(graph, plan)
        plan.check()
    return graph


def _check_phases(graph: Graph) -> None:
    phase = {i.name: "input" for i in graph.inputs}
    for node in graph.nodes:
        p = phase_of(node)
        if p not in ("forward", "backward"):
            raise ContractError(f"node {node.name!r}: unknown phase {p!r}; expected forward or backward")
        if p == "forward":
            for i in node.inputs:
                if phase.get(i) == "backward":
                    raise ContractError(
                        f"node {node.name!r}: forward node reads backward value {i!r}; expected "
                        "forward nodes to read only inputs and forward values"
                    )
        phase[node.name] = p


def _check_groups(graph: Graph) -> KernelPlan | None:
    """The graph's kernel plan, validated (`kernel_ir.plan_of`), whose groups name only
    nodes of the graph; None before fusion."""
    if not has_plan(graph):
        return None
    plan = plan_of(graph)
    names = set(graph.types)
    for g in plan.groups:
        for n in g.nodes:
            if n not in names:
                raise ContractError(f"fusion group {g.id!r}: names node {n!r}, which is not in the graph")
    return plan


def _check_dataflow(graph: Graph, groups: Sequence[KernelGroup]) -> None:
    """Kernels in their listed order: each reads only program inputs and values an
    earlier kernel wrote; each value has one writer; every graph output is written."""
    available = {i.name for i in graph.inputs}
    writer: dict[str, str] = {}
    for g in groups:
        for v in g.inputs:
            if v not in available:
                writer_later = _writer_of(groups, v)
                later = f"; it is written later, by kernel {writer_later!r}" if writer_later else ""
                raise ContractError(
                    f"kernel {g.id!r}: reads {v!r} before any kernel writes it{later}; expected every value a "
                    "kernel reads to be a program input or written by an earlier kernel"
                )
        for v in g.outputs:
            if v in writer:
                raise ContractError(f"value {v!r}: written by kernels {writer[v]!r} and {g.id!r}; expected one writer")
            writer[v] = g.id
        available.update(g.outputs)
    for out in graph.outputs:
        if out.value not in available:
            raise ContractError(f"output {out.name!r}: value {out.value!r} is written by no kernel")


def _writer_of(groups: Sequence[KernelGroup], value: str) -> str | None:
    return next((g.id for g in groups if value in g.outputs), None)


def _check_buffers(graph: Graph, plan: KernelPlan) -> None:
    """Values that share a buffer have disjoint live ranges: each is written after the
    last kernel that reads the previous one (graph outputs never share)."""
    if plan.schedule is None:
        return
    groups = plan.groups
    written, last_read = live_ranges(groups, plan.rows)  # a row set is one kernel
    outputs = {o.value for o in graph.outputs}
    for buf in plan.schedule.buffers:
        values = sorted(buf.values, key=lambda v: written[v])
        if len(values) > 1 and outputs.intersection(values):
            raise ContractError(f"buffer {buf.id!r}: a graph output shares it with {values}; expected its own")
        for before, after in zip(values, values[1:], strict=False):
            end = last_read.get(before, written[before])
            if written[after] <= end:
                raise ContractError(
                    f"buffer {buf.id!r}: {after!r} is written by kernel {groups[written[after]].id!r} while "
                    f"{before!r} is still read (until kernel {groups[end].id!r}); expected disjoint live ranges"
                )

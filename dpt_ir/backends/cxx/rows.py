"""Row kernels: the groups of a row set (`dpt_ir.passes.fusion_rows`) as one CPU launch whose
task runs every group over a row, row after row, while the row is in L1/L2.

Assumes: a row set of fusion (`kernel_ir.RowSet`: ``groups`` in order, ``space``, ``row`` = C
elements per row) whose members read earlier members' values only within the same row (fusion
proved it), consecutive in the schedule (which took the set as one kernel for buffer
liveness). Guarantees: each member is a **stage**: its own element function and drivers
(`kernels.group_kernels`) with a layout whose task is one row (`stage_layout`): a row
reduction folds the row into its result; a reduction over more axes stores one partial per
row, folded in row order by its final kernel (after the row launch); a pointwise stage runs
the row's elements. The row driver calls the stages' drivers in set order for each row of its
task; a full-shape value that only the set reads (`row_local_values`: normalisation's centred
rows) lives in a row buffer of the task, never in memory. Tasks are fixed blocks of rows
(`Target.cpu_task` elements), so the partition, the
lanes and every fold order depend on the shapes only: bit-identical for any thread count. The
CUDA driver is the same loop over the stages' CUDA drivers (their parts contiguous rows too);
a CUDA plan does not use row kernels (`codegen` emits the stages as separate launches there).
None when a member is not covered by the C++ path: the members then launch one by one.
"""

from __future__ import annotations

import hashlib
import math
from typing import Any

from dpt_ir.backends.base import Target
from dpt_ir.backends.cxx import drivers, kernels, units
from dpt_ir.backends.cxx.common import C_TYPES
from dpt_ir.backends.cxx.drivers import Layout
from dpt_ir.backends.cxx.nest import cover
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup, RowSet, plan_of
from dpt_ir.ir.row_access import row_local
from dpt_ir.ir.traits import is_view

# A full-shape value two stages compute, at this work per element or more (`OpDef.work`: a
# transcendental's), is computed by the first only and read from a row buffer by the later
# ones (`shared_members`): a row-buffer load in L1 costs less than recomputing it.
REUSE_WORK = 8


def stage_layout(graph: Graph, group: KernelGroup, row: int) -> Layout | None:
    """The layout of ``group`` as a stage of rows of ``row`` elements: task ``t`` is row ``t``
    (pointwise: its elements; row reduction: its output; a reduction over ``m`` rows per
    output: part ``t`` of ``m``). None when the group is not covered or reduces columns."""
    nest = cover(graph, group)
    if nest is None or nest.columns:
        return None
    rows = nest.size // row
    if not nest.roots:
        return Layout(rows, row)
    per = nest.inner // row  # rows per output
    if per * row != nest.inner:
        return None
    return Layout(rows, row) if per == 1 else Layout(rows, row, per)


def row_kernels(
    graph: Graph, rset: RowSet, name: str, slots: list[Any], checks: bool, prefix: str, target: Target
) -> tuple[list[Any], dict[str, tuple[str, str]]] | None:
    """The launches of row set ``rset`` (the row kernel, then the final folds of stages with
    partials) and their native definitions; None when a member is not covered."""
    plan = plan_of(graph)
    members = shared_members(graph, [plan.group(g) for g in rset.groups])
    row = rset.row
    layouts = [stage_layout(graph, g, row) for g in members]
    if any(lay is None for lay in layouts):
        return None
    mark = len(slots)
    stages, natives, finals = [], {}, []
    for g, lay in zip(members, layouts, strict=True):
        built = kernels.group_kernels(graph, g, f"{prefix}_{g.id}", slots, checks, target, stage=lay)
        if built is None:
            del slots[mark:]  # nothing of the set is emitted: its members take the slots again
            return None
        launches, more = built
        fn = next(iter(more))
        natives[fn] = (more[fn][0], "")  # the stage's C++ only: the row kernel calls its drivers
        natives.update({k: v for k, v in more.items() if k != fn})
        stages.append((fn, launches[0]))
        finals += launches[1:]
    internal = row_local_values(graph, rset, members)
    main = _row_launch(rset, name, members[0], stages, checks, internal, target)
    fn, cxx, stub = _row_source(graph, rset, members, stages, main, checks, internal, target)
    natives[fn] = (cxx, stub)
    return [main, *finals], natives


def _tasks(rset: RowSet, target: Target) -> tuple[int, int]:
    """The set's rows, and the rows per task (one task per `Target.cpu_task` elements of rows)."""
    return math.prod(rset.space) // rset.row, max(1, target.cpu_task // rset.row)


def _row_launch(
    rset: RowSet,
    name: str,
    first: KernelGroup,
    stages: list[tuple[str, Any]],
    checks: bool,
    internal: list[str],
    target: Target,
) -> Any:
    """The row kernel's `KernelSource`: the stages' parameters in first-use order but the
    row-local ``internal`` values, one task per `Target.cpu_task` elements of rows."""
    from dpt_ir.backends.launches import KernelSource

    params: list[str] = []
    partials: dict[str, tuple[str, int]] = {}
    for _, k in stages:
        params += [p for p in _values(k, checks) if p not in params and p not in internal]
        partials.update(k.partials)
    rows, per_task = _tasks(rset, target)
    dim = -(-rows // per_task)
    base = stages[0][1].status_base
    return KernelSource(name, "", params, dim, first.id, partials, {}, "", base)


def _values(k: Any, checks: bool) -> list[str]:
    """A stage launch's buffer parameters (without the status word, its base and the task)."""
    return k.params[: len(k.params) - (3 if checks else 1)]


def _row_source(
    graph: Graph,
    rset: RowSet,
    members: list[KernelGroup],
    stages: list[tuple[str, Any]],
    main: Any,
    checks: bool,
    internal: list[str],
    target: Target,
) -> tuple[str, str, str]:
    """The row drivers' hashed name, C++ and Warp stub (the ``internal`` values in row
    buffers of the task); sets ``main``'s kernel text and params."""
    outputs = {v for g in members for v in g.outputs}
    written = {p for _, k in stages for p in k.params if p in k.partials or p in outputs}
    unit = units.Unit(graph, main.params, written, main.partials)
    rows, per_task = _tasks(rset, target)
    sig = f"{unit.sig()}, int* st, int sb, int t"
    row = rset.row
    names = {p: f"a{main.params.index(p)}" for p in main.params}
    names.update({v: f"w{k}" for k, v in enumerate(internal)})
    # A value only the set reads lives in a row buffer of the task: stages index it by the
    # flat element i = o * row + j, so each row sees the buffer at offset -o * row (integer
    # arithmetic: the pointer itself never leaves the buffer's bounds).
    buffers = [f"{C_TYPES[graph.types[v].dtype]} wb{k}[{row}];" for k, v in enumerate(internal)]
    views = [
        f"    {C_TYPES[graph.types[v].dtype]}* const w{k} = ({C_TYPES[graph.types[v].dtype]}*)"
        f"((size_t)wb{k} - (size_t)o * {row} * sizeof(wb{k}[0]));"
        for k, v in enumerate(internal)
    ]
    body = {}
    for device in ("cpu", "cuda"):
        calls = []
        for fn, k in stages:
            args = ", ".join(names[p] for p in _values(k, checks))
            calls.append(f"    {fn}_{device}({args}, st, sb + {k.status_base - main.status_base}, o);")
        body[device] = [
            f"const int o1 = {drivers.c_min(f'(t + 1) * {per_task}', rows)};",
            *buffers,
            f"for (int o = t * {per_task}; o < o1; ++o) {{",
            *views,
            *calls,
            "}",
        ]
    text = drivers.driver_pair(sig, body["cpu"], body["cuda"])
    fn = "dpk_" + hashlib.sha256(text.encode()).hexdigest()[:16]
    cxx = text.replace("F_cpu", f"{fn}_cpu").replace("F_cuda", f"{fn}_cuda") + "\n"
    main.text = unit.kernel(main.name, fn, checks)
    main.params = unit.launch_params(checks)
    main.function = main.name
    return fn, cxx, unit.stub(fn, f"{fn}_cpu", f"{fn}_cuda", checks)


def row_local_values(graph: Graph, rset: RowSet, members: list[KernelGroup]) -> list[str]:
    """The full-shape values the set's ``members`` (`shared_members`) write that nothing
    outside the set reads (no other group, no graph output): they live in a row buffer of the
    task, never in memory."""
    size = math.prod(rset.space)
    ids = set(rset.groups)
    outputs = {o.value for o in graph.outputs}
    outside = {v for g in plan_of(graph).groups if g.id not in ids for v in g.inputs}
    written = [v for g in members for v in g.outputs]
    return [v for v in dict.fromkeys(written) if graph.types[v].size == size and v not in outputs | outside]


def shared_members(graph: Graph, members: list[KernelGroup]) -> list[KernelGroup]:
    """The row set's ``members`` with every full-shape value that a stage computes at its
    element and later stages recompute, at a work per element of at least `REUSE_WORK`
    (`OpDef.work` of its full-shape cone: a transcendental), computed once: the first stage
    writes it (a row-local value: `row_local_values`), the later ones read it at their own
    element. Values are taken largest first (a shared expression before its pieces); a
    stage the C++ path would no longer cover keeps its own copy."""
    space = tuple(members[0].space)
    a = members[0].axes[0]  # the first row axis: a row set starts at a row reduction
    out = list(members)
    for k in range(len(out)):
        for v in reversed(_at_element(graph, out[k], space)):
            readers = [j for j in range(k + 1, len(out)) if v in out[j].nodes and v not in out[j].outputs]
            if not readers or _work(graph, out[k], v, space) < REUSE_WORK:
                continue
            writer = out[k].with_(outputs=(*out[k].outputs, v))
            reading = {j: _reading(graph, out[j], v) for j in readers}
            groups = [writer, *reading.values()]
            if all(row_local(graph, g, {v}, a) for g in reading.values()) and all(
                cover(graph, g) is not None for g in groups
            ):
                out[k] = writer
                for j, g in reading.items():
                    out[j] = g
    return out


def _at_element(graph: Graph, group: KernelGroup, space: tuple[int, ...]) -> list[str]:
    """The full-shape elementwise members ``group`` computes at its iteration element (read
    by a reduction it roots or a store, through full-shape elementwise members), in order."""
    members = set(group.nodes)
    full = {n for n in members if tuple(graph.types[n].shape) == space}
    seeds = [graph.node_map[r].inputs[0] for r in group.roots if graph.node_map[r].opdef.kind == "reduction"]
    stack, seen = [*seeds, *(v for v in group.outputs if v in full)], set()
    while stack:
        v = stack.pop()
        if v in seen or v not in full or graph.node_map[v].opdef.kind != "elementwise":
            continue
        seen.add(v)
        stack += graph.node_map[v].inputs
    return [n for n in group.nodes if n in seen]


def _work(graph: Graph, group: KernelGroup, value: str, space: tuple[int, ...]) -> int:
    """The work per element of recomputing ``value`` in ``group``: `OpDef.work` of each
    full-shape member of its cone once (views and constants: none)."""
    members, total, seen, stack = set(group.nodes), 0, set(), [value]
    while stack:
        v = stack.pop()
        if v in seen or v not in members:
            continue
        seen.add(v)
        node = graph.node_map[v]
        if tuple(node.type.shape) == space and not is_view(node):
            total += node.opdef.work
        stack += node.inputs
    return total


def _reading(graph: Graph, group: KernelGroup, value: str) -> KernelGroup:
    """``group`` reading ``value`` instead of computing it: the members it still needs, the
    inputs they read, and ``value``."""
    members = set(group.nodes) - {value}
    need: set[str] = set()
    stack = [*group.roots, *group.epilogue, *group.outputs]
    while stack:
        v = stack.pop()
        if v in need or v not in members:
            continue
        need.add(v)
        stack += graph.node_map[v].inputs
    nodes = tuple(n for n in group.nodes if n in need)
    read = {i for n in nodes for i in graph.node_map[n].inputs}
    inputs = (*(i for i in group.inputs if i in read), value)
    return group.with_(nodes=nodes, inputs=inputs)


def starting_at(
    graph: Graph, group: KernelGroup, prefix: str, slots: list[Any], checks: bool, target: Target
) -> tuple[list[Any], dict[str, tuple[str, str]], dict[str, str], list[str]] | None:
    """When ``group`` starts a row set and ``target`` is a CPU: the set's launches, their
    natives, a header line per launch, and the member ids (the groups they replace)."""
    rset = next((r for r in plan_of(graph).rows if r.groups[0] == group.id), None)
    if rset is None or target.kind != "cpu":
        return None
    name = f"{prefix}_{rset.id}"
    built = row_kernels(graph, rset, name, slots, checks, prefix, target)
    if built is None:
        return None
    launches, natives = built
    heads = {
        k.name: f"# {k.name}: [cxx] row kernel of {', '.join(rset.groups)}, rows of {rset.row} element(s)"
        if k.name == name
        else f"# {k.name}: [cxx] the ordered fold of {k.group}'s per-row partials"
        for k in launches
    }
    return launches, natives, heads, list(rset.groups)

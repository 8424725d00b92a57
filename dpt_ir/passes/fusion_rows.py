"""Row-local fusion: kernels that one row task can run back to back over the same row.

Assumes: the kernel plan from `fusion._annotate` (`kernel_ir.plan_of`: groups in a valid
order). Guarantees: `annotate` adds the plan's ``rows`` (`kernel_ir.RowSet`), one per
**row set**: groups
of one phase over one space ``S`` that a CPU task can run row after row, every member over the
row before the next row, while the row's data is in L1/L2, instead of one pass over memory per
group. A set starts at a reduction over trailing axes ``a..n-1`` (``a >= 1``: a row of ``C``
elements per output, the row axes); its later members are pointwise groups over ``S`` or
reductions over a trailing block that holds the row axes (a reduction over more axes, such as
the whole space, folds per-row partials in order), and each reads what earlier members write
only **within the same row**: a full-shape value at its own element, a per-row result at its
row (proved on the coordinate forms of every read, through the op table's views:
`OpDef.view_affine`; no op is named). Every value read from memory that no member writes comes
from a group placed before the set, so the set can run where its first member does; groups
that sat between members move after the set (they never feed a member). A set holds at least
two groups and fits the row budget (`CompileOptions.row_budget`, from the backend's `Target`;
`ROW_BUDGET` by default): the bytes of one row of every full-shape value its members read or
write. Decisions use op kinds, view maps and shapes only. The schedule treats a
set as one kernel for buffer liveness (`util.live_ranges`): its members' rows interleave.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup, RowSet, plan_of, with_plan
from dpt_ir.ir.row_access import row_local

# The default row budget (bytes of one row of all the full-shape values a row set reads or
# writes) when the options name none: the CPU `Target.row_budget`, which `dp.compile` passes.
ROW_BUDGET = 32 * 1024


def _row_axis(group: KernelGroup) -> int | None:
    """The first row axis ``a`` of a reduction over the trailing axes ``a..n-1`` (``a >= 1``),
    or None when ``group`` cannot start a row set."""
    space, axes = tuple(group.space), tuple(group.axes)
    if group.kind != "reduction" or not axes or group.epilogue:
        return None
    if axes != tuple(range(axes[0], len(space))) or axes[0] < 1:
        return None
    return axes[0]


def _fits_axes(group: KernelGroup, a: int) -> bool:
    """Can ``group`` run row by row over rows of axes ``a..``: pointwise, or a reduction over a
    trailing block holding the row axes; no epilogue (it would run per output, after rows)."""
    if group.epilogue:
        return False
    if group.kind == "pointwise":
        return True
    axes, n = tuple(group.axes), len(group.space)
    return group.kind == "reduction" and bool(axes) and axes == tuple(range(axes[0], n)) and axes[0] <= a


def _row_bytes(graph: Graph, groups: Sequence[KernelGroup], space: tuple[int, ...], row: int) -> int:
    """One row of every full-shape value the groups read or write, in bytes."""
    size = math.prod(space)
    values = {v for g in groups for v in (*g.inputs, *g.outputs) if graph.types[v].size == size}
    return sum(graph.types[v].nbytes // size * row for v in values)


def _grow(graph: Graph, groups: list[KernelGroup], start: int, taken: set[str], budget: int) -> list[int] | None:
    """The positions of the row set that starts at ``groups[start]``, or None."""
    first = groups[start]
    a = _row_axis(first)
    if a is None:
        return None
    space = tuple(first.space)
    row = math.prod(space[a:])
    if row < 2 or math.prod(space[:a]) < 2:
        return None
    members = [start]
    written = set(first.outputs)
    position = {v: k for k, g in enumerate(groups) for v in g.outputs}
    for k in range(start + 1, len(groups)):
        g = groups[k]
        if g.id in taken or g.phase != first.phase or tuple(g.space) != space or not _fits_axes(g, a):
            continue
        reads = set(g.inputs)
        if not reads & written:
            continue
        if any(position.get(v, -1) > start and v not in written for v in reads):
            continue  # it reads a group placed after the set's start that is not a member
        if not row_local(graph, g, written, a):
            continue
        if _row_bytes(graph, [groups[m] for m in members] + [g], space, row) > budget:
            break
        members.append(k)
        written |= set(g.outputs)
    return members if len(members) > 1 else None


def annotate(graph: Graph, budget: int = ROW_BUDGET) -> Graph:
    """``graph`` with ``meta["rows"]`` (the row sets, each with its reason; no key when there
    is none) and its groups reordered so that every set's members are consecutive; each set's
    row of full-shape values fits ``budget`` bytes."""
    plan = plan_of(graph)
    groups = list(plan.groups)
    sets: list[RowSet] = []
    taken: set[str] = set()
    k = 0
    while k < len(groups):
        found = _grow(graph, groups, k, taken, budget)
        if found is None:
            k += 1
            continue
        members = [groups[m] for m in found]
        between = [g for m, g in enumerate(groups) if found[0] < m < found[-1] and m not in found]
        groups[found[0] : found[-1] + 1] = [*members, *between]
        taken |= {g.id for g in members}
        sets.append(_record(graph, members, len(sets), budget))
        k = found[0] + len(members)
    if not sets:
        return graph  # no row set: the plan (and its meta records) as fusion left it
    return with_plan(graph, plan.with_(groups=tuple(groups), rows=tuple(sets), schedule=None))


def _record(graph: Graph, members: list[KernelGroup], k: int, budget: int) -> RowSet:
    first = members[0]
    space = tuple(first.space)
    a = _row_axis(first)
    assert a is not None  # `_grow` started the set there
    row = math.prod(space[a:])
    live = _row_bytes(graph, members, space, row)
    ids = [g.id for g in members]
    return RowSet(
        id=f"rows{k}",
        groups=tuple(ids),
        space=space,
        axes=tuple(range(a, len(space))),
        row=row,
        row_bytes=live,
        reason=(
            f"each of {', '.join(ids[1:])} reads what the groups before it write only within the same row of "
            f"{row} element(s); one row of their full-shape values is {live} B (budget {budget} B): "
            "one task runs them row by row while the row is in cache"
        ),
    )

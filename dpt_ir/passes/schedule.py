"""schedule: kernel order, buffer liveness and reuse, workspace size.

Assumes: the kernel plan of `fusion` (`kernel_ir.plan_of`), its groups listed in a valid
order (producers first, forward before backward); none: no kernels.
Guarantees: the plan's `kernel_ir.Schedule` holds ``order`` (group ids), ``buffers`` (each with its
dtype, element count, bytes and the values that share it over disjoint live ranges),
``assignment`` (value -> buffer), ``workspace_bytes`` (intermediates, reused) and
``output_bytes`` (graph outputs, never reused). A value lives from the kernel that
writes it to the last kernel that reads it (a row set, `fusion_rows`, counts as one
kernel: its members' rows interleave); saved values therefore live across the
phase boundary. Program inputs and cotangent inputs are the caller's and get no buffer.
"""

from __future__ import annotations

import heapq
from typing import Any

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import Buffer, Schedule, has_plan, plan_of, with_plan
from dpt_ir.passes.util import live_ranges

NAME = "schedule"


def run(graph: Graph, options: Any = None) -> Graph:
    if not has_plan(graph):
        raise ContractError(f"schedule: graph {graph.name!r} has no kernel plan; expected the fusion pass to run first")
    plan = plan_of(graph)
    groups = plan.groups
    outputs = {o.value for o in graph.outputs}
    written, last_read = live_ranges(groups, plan.rows)  # a row set is one kernel
    buffers: list[dict[str, Any]] = []  # Buffer fields, values still growing
    pools: dict[tuple[str, int], _Pool] = {}
    for v in sorted(written, key=lambda v: (written[v], v)):
        t = graph.types[v]
        start = written[v]
        end = len(groups) if v in outputs else last_read.get(v, start)
        pool = None if v in outputs else pools.setdefault((t.dtype, t.size), _Pool())
        slot = None if pool is None else pool.take(start)
        if slot is None:
            buffers.append(
                {"id": f"buf{len(buffers)}", "dtype": t.dtype, "size": t.size, "bytes": t.nbytes,
                 "output": v in outputs, "values": []}
            )  # fmt: skip
            slot = len(buffers) - 1
        if pool is not None:
            pool.hold(slot, end)
        buffers[slot]["values"].append(v)
    made = tuple(Buffer(**b) for b in buffers)
    schedule = Schedule(
        order=tuple(g.id for g in groups),
        buffers=made,
        assignment=Schedule.held(made),
        workspace_bytes=sum(b.bytes for b in made if not b.output),
        output_bytes=sum(b.bytes for b in made if b.output),
    )
    return with_plan(graph, plan.with_(schedule=schedule))


class _Pool:
    """The reusable buffers of one dtype and size: first fit, the lowest-numbered buffer
    free before kernel ``start``. Values arrive in order of the kernel writing them, so a
    buffer free for one stays free for every later one until taken: heaps give the first
    fit in O(log n), where scanning every buffer per value was quadratic on long chains."""

    def __init__(self) -> None:
        self._busy: list[tuple[int, int]] = []  # (kernel after which it is free, buffer)
        self._free: list[int] = []

    def take(self, start: int) -> int | None:
        """The lowest-numbered buffer whose last use ends before kernel ``start``, if any."""
        while self._busy and self._busy[0][0] < start:
            heapq.heappush(self._free, heapq.heappop(self._busy)[1])
        return heapq.heappop(self._free) if self._free else None

    def hold(self, slot: int, end: int) -> None:
        """Buffer ``slot`` is in use until kernel ``end``."""
        heapq.heappush(self._busy, (end, slot))

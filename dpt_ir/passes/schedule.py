"""schedule: kernel order, buffer liveness and reuse, workspace size.

Assumes: ``meta["groups"]`` from `fusion`, listed in a valid order (producers first,
forward before backward).
Guarantees: ``meta["schedule"]`` holds ``order`` (group ids), ``buffers`` (each with its
dtype, element count, bytes and the values that share it over disjoint live ranges),
``assignment`` (value -> buffer), ``workspace_bytes`` (intermediates, reused) and
``output_bytes`` (graph outputs, never reused). A value lives from the kernel that
writes it to the last kernel that reads it; saved values therefore live across the
phase boundary. Program inputs and cotangent inputs are the caller's and get no buffer.
"""

from __future__ import annotations

from typing import Any

from dpt_ir.graph import Graph
from dpt_ir.passes.util import live_ranges

NAME = "schedule"


def run(graph: Graph, options: Any = None) -> Graph:
    groups = graph.meta.get("groups", [])
    order = [g["id"] for g in groups]
    outputs = {o.value for o in graph.outputs}
    written, last_read = live_ranges(groups)
    buffers: list[dict[str, Any]] = []
    free_at: list[int] = []  # per buffer: the kernel index after which it is free
    assignment: dict[str, str] = {}
    for v in sorted(written, key=lambda v: (written[v], v)):
        t = graph.types[v]
        start = written[v]
        end = len(groups) if v in outputs else last_read.get(v, start)
        slot = None
        if v not in outputs:
            for b, buf in enumerate(buffers):
                same = (buf["dtype"], buf["size"]) == (t.dtype, t.size) and not buf["output"]
                if same and free_at[b] < start:
                    slot = b
                    break
        if slot is None:
            buffers.append(
                {
                    "id": f"buf{len(buffers)}",
                    "dtype": t.dtype,
                    "size": t.size,
                    "bytes": t.nbytes,
                    "output": v in outputs,
                    "values": [],
                }
            )
            free_at.append(end)
            slot = len(buffers) - 1
        buffers[slot]["values"].append(v)
        free_at[slot] = end
        assignment[v] = buffers[slot]["id"]
    schedule = {
        "order": order,
        "buffers": buffers,
        "assignment": assignment,
        "workspace_bytes": sum(b["bytes"] for b in buffers if not b["output"]),
        "output_bytes": sum(b["bytes"] for b in buffers if b["output"]),
    }
    return graph.replace(meta={**graph.meta, "schedule": schedule})

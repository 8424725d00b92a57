"""The sort stages of a ``sort`` scatter on the C++ path: count, scan and place launches that
build the destination-sorted CSR of the positions before the sum launch (see `scatter`).

Assumes: a scatter group `nest.scatter_covers` lowers with form ``sort``. Guarantees: a
stable counting sort into the scratch arrays (`scatter.sort_scratch`), one task per chunk of
positions (`csr.chunks`), integer counters, no atomics; a position out of range under
``raise`` raises the node's flag and is clamped.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpt_ir.backends.cxx import gathers, scatter
from dpt_ir.backends.cxx.common import PRECISE_TRIG, TOKEN
from dpt_ir.backends.cxx.csr import chunks
from dpt_ir.backends.cxx.drivers import driver_pair
from dpt_ir.backends.cxx.emit import ElementWriter
from dpt_ir.backends.cxx.nest import positions_nest
from dpt_ir.backends.cxx.units import Unit, hashed, launch
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.indexing import Affine
from dpt_ir.ir.kernel_ir import KernelGroup
from dpt_ir.ir.registry import ScatterLayout

Flag = Callable[[str], str]  # a condition -> the statement raising a status flag when it holds


def _position(p: str, size: int, mode: str, flag: Flag | None) -> list[str]:
    """Statements normalising int ``p`` in place along an axis of ``size`` (`GatherSite`'s
    modes); under ``raise`` an out-of-range position raises ``flag`` and is clamped."""
    out = [flag(f"{p} < {-size} || {p} >= {size}")] if mode == "raise" and flag else []
    return [*out, f"{p} = {gathers.position(p, size, mode)};"]


def _render(form: Affine, names: list[str]) -> str:
    """C++ of ``form`` over the named integer coordinates."""
    terms = [str(form.b)] if form.b else []
    terms += [n if x == 1 else f"{n} * {x}" for x, n in zip(form.w, names, strict=True) if x]
    return f"({' + '.join(terms)})" if terms else "0"


@dataclass(frozen=True)
class _Sort:
    """What the sort stages of a scatter read: its layout, the ``shape`` of its positions (an
    int32 value), the destination rows ``n`` and the fixed chunks (``parts`` of ``chunk``)."""

    layout: ScatterLayout
    shape: tuple[int, ...]
    n: int
    parts: int
    chunk: int

    @property
    def count(self) -> int:
        return math.prod(self.shape)


def _scan_body(s: _Sort, rows: str, hist: str) -> list[str]:
    """One task: the counters become offsets, destination-major then chunk (stable)."""
    n = s.n
    return [
        "int running = 0;",
        f"for (int d = 0; d < {n}; ++d) {{ {rows}[d] = running;",
        f"    for (int q = 0; q < {s.parts}; ++q) {{ const int c = {hist}[q * {n} + d];"
        f" {hist}[q * {n} + d] = running; running += c; }} }}",
        f"{rows}[{n}] = running;",
    ]


def _chunk_body(s: _Sort, stage: str, a: dict[str, str], position: list[str], flag: Flag | None) -> list[str]:
    """Task ``t`` walks chunk ``t`` of the positions in order: ``count`` zeroes its row of
    counters and counts each position's destination row; ``place`` writes each position
    element at its destination's next offset. ``position``: statements setting ``p`` from
    element ``i`` (a read, or the producers' element code); ``flag``: where an
    out-of-range position raises (``raise``): a condition -> its statement, or None."""
    n, chunk = s.n, s.chunk
    body = ["const int q = t;"]
    if stage == "count":
        body.append(f"for (int d = 0; d < {n}; ++d) {a['hist']}[q * {n} + d] = 0;")
    body.append(f"for (int j = q * {chunk}; j < q * {chunk} + {chunk} && j < {s.count}; ++j) {{")
    names = [f"c{d}" for d in range(len(s.shape))]
    rank = len(s.shape) + 1
    form = s.layout.key_form(tuple(idx.axis(d, rank) for d in range(rank - 1)), idx.axis(rank - 1, rank))  # type: ignore[misc]
    axes = zip(names, idx.strides(s.shape), s.shape, form.padded(rank).w, strict=False)
    body += [f"    const int {c} = (j / {st}) % {e};" for c, st, e, x in axes if x]  # the key's coordinates
    body += ["    const int i = j; (void)i;", *("    " + x for x in position)]
    body += ["    " + x for x in _position("p", s.layout.size, s.layout.mode, flag)]
    body.append(f"    const int slot = q * {n} + {_render(form, [*names, 'p'])};")
    if stage == "count":
        body.append(f"    {a['hist']}[slot] += 1;")
    else:
        body.append(f"    const int at = {a['hist']}[slot]; {a['cols']}[at] = j; {a['hist']}[slot] = at + 1;")
    body.append("}")
    return body


def sort_launches(
    graph: Graph, group: KernelGroup, name: str, slots: list[Any], checks: bool
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The count, scan and place launches of a ``sort`` group (before its sum launch) and
    their native definitions; each is one task body, the same for the CPU and CUDA drivers."""
    (root,) = group.roots
    node = graph.node_map[root]
    layout = scatter.scatter_layout(graph, node)
    positions = node.inputs[layout.indices]
    shape, size = tuple(graph.types[positions].shape), layout.size
    parts = chunks(math.prod(shape), layout.rows)
    s = _Sort(layout, shape, layout.rows, parts, -(-math.prod(shape) // parts))
    scratch = scatter.sort_scratch(graph, node, layout)
    rows, cols, hist = scratch
    made = positions_nest(graph, group)
    launches, natives = [], {}
    for stage in ("count", "scan", "place"):
        params = [rows, hist] if stage == "scan" else [hist, *([cols] if stage == "place" else [])]
        a = {"rows": "a0", "hist": "a1"} if stage == "scan" else {"hist": "a0", "cols": "a1"}
        slot_base = len(slots)
        flags = "bool fl[1] = {false}; (void)fl;"
        tables: list[str] = []  # the producers' constant tables (C++ arrays of this function)
        constants: dict[str, tuple[str, Any]] = {}  # and those bound at launch (`gathers.table_ref`)
        if stage == "scan":
            body = _scan_body(s, a["rows"], a["hist"])
        else:
            # Flags (the producers' domain checks, an out-of-range position) in the count stage only.
            w = ElementWriter(graph, made, params, slots, f"{name}_{stage}", checks and stage == "count")
            w.edge = True  # every read at its rendered offset over the positions' element i
            w.lines.append(f"int p = {w.value(positions)};")
            position, w.lines = w.lines, []
            flag = None
            if checks and stage == "count" and layout.mode == "raise":
                flag = functools.partial(w.flag, root, node.opdef.name, "domain", detail=gathers.raise_detail(size))
            body = _chunk_body(s, stage, a, position, flag)
            nf = max(len(slots) - slot_base, 1)
            flags = f"bool fl[{nf}] = {{false}}; (void)fl; {PRECISE_TRIG}"
            if len(slots) > slot_base:
                body.append(f"for (int k = 0; k < {nf}; ++k) if (fl[k]) st[sb + k] = 1;")
            tables, constants = w.table_definitions(), w.constants
        unit = Unit(graph, params, {rows, hist, cols} & set(params), scratch, constants)
        body = ["(void)st; (void)sb; (void)t;", flags, *body]
        driver = driver_pair(f"{unit.sig()}, int* st, int sb, int t", body, body)
        fn, cxx = hashed("\n".join([*tables, driver]).replace("F_", f"{TOKEN}_") + "\n")
        natives[fn] = (cxx, unit.stub(fn, f"{fn}_cpu", f"{fn}_cuda", checks))
        used = {p: v for p, v in scratch.items() if p in params}
        dim = 1 if stage == "scan" else parts
        launches.append(launch(f"{name}_{stage}", unit, fn, checks, dim, group.id, used, slot_base))
    return launches, natives

"""Scatter groups (``add_at``) on the C++ path: the plan of `dpt_ir.backends.warp.scatter`
(an ordered gather over a destination-sorted CSR of the positions) as C++ element code.

Assumes: a fusion group of kind ``scatter`` (one root whose op has a `ScatterLayout` with
``key_form`` / ``row_form``; ``group["scatter"]["form"]``), float32 or float64 data. Guarantees:

- `covers`: the group is lowered when its only output is the root, the data are floats and,
  for the ``sort`` form, the positions are an int32 value read from memory (positions made in
  the group stay on the Warp-Python path); `evaluated`: the members the sum reads (a
  ``transpose`` form's position producers are evaluated at compile time, not in a kernel);
- the root is a pointwise member of its output space (`nest.cover`): output ``o`` is
  ``base[o]`` plus the values of its CSR row (`row_sum`), in CSR order (the increasing
  flat order of the position elements: ``np.add.at``'s), float32 in float64, rounded once;
  the base's and values' producers are element code, the values evaluated inside the loop;
- ``transpose``: the CSR is built at compile time (`warp.scatter.constant_csr`) and bound as
  launch constants; ``sort``: `sort_launches` builds it per evaluation with a stable counting
  sort (count, scan, place: one task per chunk of positions, integer counters, no atomics)
  into scratch arrays (``$partial:<root>:rows|cols|hist``); a position out of range under
  ``raise`` raises the node's flag and is clamped, so every read stays in bounds.

The chunks are fixed by the shapes (`warp.scatter.chunks`), each CPU or CUDA task runs one
chunk, and each output element sums its own row on one thread: bit-identical for any
thread count.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dpt_ir.graph import Graph, Node, origin_of
from dpt_ir.ops import indexing as idx
from dpt_ir.ops.indexing import Affine, Coords
from dpt_ir.ops.registry import ScatterLayout

FLOATS = ("float32", "float64")


def is_scatter(op: Any) -> bool:
    """Whether the op is a scatter with a `ScatterLayout`."""
    return op.scatter is not None


def _layout(graph: Graph, node: Node) -> ScatterLayout:
    from dpt_ir.backends.warp.scatter import layout_of

    return layout_of(graph, node.name)


def covers(graph: Graph, group: dict[str, Any]) -> bool:
    """Whether the C++ path lowers scatter group ``group`` (see the module docstring)."""
    (root,) = group["roots"]
    node = graph.node_map[root]
    layout = _layout(graph, node)
    if layout.key_form is None or layout.row_form is None or list(group["outputs"]) != [root]:
        return False
    values, base = graph.types[node.inputs[layout.values]], graph.types[node.inputs[layout.base]]
    if node.type.dtype not in FLOATS or values.dtype != node.type.dtype or base.dtype != node.type.dtype:
        return False
    positions = node.inputs[layout.indices]
    if group["scatter"]["form"] == "sort":
        return positions not in group["nodes"] and graph.types[positions].dtype == "int32"
    return True


def evaluated(graph: Graph, group: dict[str, Any]) -> list[str]:
    """The members a kernel of the group evaluates, in the group's order: for a scatter
    group, the root and the members its base and values need; every member otherwise."""
    if group.get("kind") != "scatter":
        return list(group["nodes"])
    (root,) = group["roots"]
    node = graph.node_map[root]
    layout = _layout(graph, node)
    members, needed = set(group["nodes"]), {root}
    stack = [node.inputs[layout.base], node.inputs[layout.values]]
    while stack:
        v = stack.pop()
        if v in members and v not in needed:
            needed.add(v)
            stack.extend(graph.node_map[v].inputs)
    return [n for n in group["nodes"] if n in needed]


def _position_coords(shape: tuple[int, ...], new: Any) -> Coords:
    """Coordinates of a position element, each a new coordinate (`new(stride, extent)`)."""
    return tuple(new(s, n) for s, n in zip(idx.strides(shape), shape, strict=True))


def children(graph: Graph, node: Node, coords: Coords, variable: Any) -> list[tuple[str, Coords]]:
    """What the root reads at output ``coords`` (for `sites.walk`): the base there, and the
    values at their source for a position element (new coordinates, `variable`)."""
    layout = _layout(graph, node)
    positions = tuple(graph.types[node.inputs[layout.indices]].shape)
    j = _position_coords(positions, lambda _s, n: variable(idx.zero(0), 0, n))
    return [(node.inputs[layout.base], coords), (node.inputs[layout.values], layout.source_at(coords, j))]


def _csr(w: Any, node: Node, layout: ScatterLayout, form: str) -> tuple[str, str]:
    """The parameters of the CSR offsets and columns: launch constants (``transpose``) or
    the sort's scratch arrays (``sort``)."""
    from dpt_ir.backends.warp.scatter import constant_csr, constant_positions

    if form == "transpose":
        positions = constant_positions(w.graph, node.inputs[layout.indices])
        offsets, order = constant_csr(layout, positions, node.name)
        w.constants[f"$rows:{node.name}"] = ("wp.int32", offsets)
        w.constants[f"$cols:{node.name}"] = ("wp.int32", order)
        return w.param(f"$rows:{node.name}"), w.param(f"$cols:{node.name}")
    scratch = _scratch(w.graph, node, layout)
    w.scratch.update(scratch)
    rows, cols, _ = scratch
    return w.param(rows), w.param(cols)


def _scratch(graph: Graph, node: Node, layout: ScatterLayout) -> dict[str, tuple[str, int]]:
    """The sort's scratch arrays: CSR offsets, columns, and per-chunk counters."""
    from dpt_ir.backends.warp.scatter import chunks

    count = graph.types[node.inputs[layout.indices]].size
    parts = chunks(count, layout.rows)
    return {
        f"$partial:{node.name}:rows": ("wp.int32", layout.rows + 1),
        f"$partial:{node.name}:cols": ("wp.int32", max(count, 1)),
        f"$partial:{node.name}:hist": ("wp.int32", parts * layout.rows),
    }


def row_sum(w: Any, node: Node, coords: Coords) -> str:
    """Emit the root at output ``coords`` into `ElementWriter` ``w``: the base plus the
    values of the output's CSR row, in order; the C++ variable holding it."""
    from dpt_ir.backends.cxx.nest import C_TYPES

    layout = _layout(w.graph, node)
    rows, cols = _csr(w, node, layout, w.nest.group["scatter"]["form"])
    out_t = C_TYPES[node.type.dtype]
    base = w.value(node.inputs[layout.base], coords)
    o = w.render(layout.row_form(coords))  # type: ignore[misc]
    n = len(w.lines)
    s, k = f"sc{n}", f"k{n}"
    w.lines.append(f"double {s} = (double){base};")
    w.lines.append(f"for (int {k} = {rows}[{o}]; {k} < {rows}[{o} + 1]; ++{k}) {{")
    outside = dict(w.vars)  # the row's values stay in the loop's scope
    positions = tuple(w.graph.types[node.inputs[layout.indices]].shape)
    j = _position_coords(positions, lambda st, e: w._variable(f"(({cols}[{k}] / {st}) % {e})", e))
    v = w.value(node.inputs[layout.values], layout.source_at(coords, j))
    w.lines.append(f"{s} = {s} + (double){v};")
    w.lines.append("}")
    w.vars = outside
    return w._define(out_t, f"({out_t}){s}")


def _position(p: str, size: int, mode: str, flag: str | None) -> list[str]:
    """Statements normalising int ``p`` in place along an axis of ``size`` (`GatherSite`'s
    modes); under ``raise`` an out-of-range position ORs into ``flag`` and is clamped."""
    if mode == "wrap":
        return [f"{p} = (({p} % {size}) + {size}) % {size};"]
    out = []
    if mode == "raise":
        if flag:
            out.append(f"{flag} |= (int)({p} < {-size} || {p} >= {size});")
        out.append(f"{p} = {p} < 0 ? {p} + {size} : {p};")
    return [*out, f"{p} = dp_clampi({p}, 0, {size - 1});"]


def _render(form: Affine, names: list[str]) -> str:
    """C++ of ``form`` over the named integer coordinates."""
    terms = [str(form.b)] if form.b else []
    terms += [n if x == 1 else f"{n} * {x}" for x, n in zip(form.w, names, strict=True) if x]
    return f"({' + '.join(terms)})" if terms else "0"


@dataclass(frozen=True)
class _Sort:
    """What the sort stages of a scatter read: its layout, positions (an int32 value of
    ``shape``), the destination rows ``n`` and the fixed chunks (``parts`` of ``chunk``)."""

    layout: ScatterLayout
    positions: str
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


def _chunk_body(s: _Sort, stage: str, a: dict[str, str], flagged: bool) -> list[str]:
    """Task ``t`` walks chunk ``t`` of the positions in order: ``count`` zeroes its row of
    counters and counts each position's destination row; ``place`` writes each position
    element at its destination's next offset."""
    n, chunk = s.n, s.chunk
    body = ["const int q = t; int fl[1] = {0}; (void)fl;"]
    if stage == "count":
        body.append(f"for (int d = 0; d < {n}; ++d) {a['hist']}[q * {n} + d] = 0;")
    body.append(f"for (int j = q * {chunk}; j < q * {chunk} + {chunk} && j < {s.count}; ++j) {{")
    names = [f"c{d}" for d in range(len(s.shape))]
    axes = zip(names, idx.strides(s.shape), s.shape, strict=True)
    body += [f"    const int {c} = (j / {st}) % {e};" for c, st, e in axes]
    body.append(f"    int p = {a['positions']}[j];")
    body += ["    " + x for x in _position("p", s.layout.size, s.layout.mode, "fl[0]" if flagged else None)]
    rank = len(s.shape) + 1
    form = s.layout.key_form(tuple(idx.axis(d, rank) for d in range(rank - 1)), idx.axis(rank - 1, rank))  # type: ignore[misc]
    body.append(f"    const int slot = q * {n} + {_render(form, [*names, 'p'])};")
    if stage == "count":
        body.append(f"    {a['hist']}[slot] += 1;")
    else:
        body.append(f"    const int at = {a['hist']}[slot]; {a['cols']}[at] = j; {a['hist']}[slot] = at + 1;")
    body.append("}")
    return body + (["if (fl[0]) st[sb] = 1;"] if flagged else [])


def sort_launches(
    graph: Graph, group: dict[str, Any], name: str, slots: list[Any], checks: bool
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The count, scan and place launches of a ``sort`` group (before its sum launch) and
    their native definitions; each is one task body, the same for the CPU and CUDA drivers."""
    from dpt_ir.backends.cxx.drivers import _pair
    from dpt_ir.backends.cxx.emit import TOKEN
    from dpt_ir.backends.cxx.kernels import Unit, _hashed, _launch
    from dpt_ir.backends.warp.launches import StatusSlot
    from dpt_ir.backends.warp.scatter import chunks

    (root,) = group["roots"]
    node = graph.node_map[root]
    layout = _layout(graph, node)
    positions = node.inputs[layout.indices]
    shape = tuple(graph.types[positions].shape)
    parts = chunks(math.prod(shape), layout.rows)
    s = _Sort(layout, positions, shape, layout.rows, parts, -(-math.prod(shape) // parts))
    scratch = _scratch(graph, node, layout)
    rows, cols, hist = scratch
    launches, natives = [], {}
    for stage in ("count", "scan", "place"):
        params = [rows, hist] if stage == "scan" else [positions, hist, *([cols] if stage == "place" else [])]
        unit = Unit(graph, params, {p for p in params if p != positions}, scratch)
        roles = ("rows", "hist") if stage == "scan" else ("positions", "hist", "cols")[: len(params)]
        a = dict(zip(roles, unit.args().split(", "), strict=True))  # role -> its C++ parameter
        slot_base, flagged = len(slots), checks and stage == "count" and layout.mode == "raise"
        if flagged:
            detail = f"a position outside [{-layout.size}, {layout.size}) along an axis of size {layout.size}"
            slots.append(StatusSlot(f"{name}_{stage}", root, node.opdef.name, "domain", detail + " (mode 'raise')",
                                    origin_of(graph, root)))  # fmt: skip
        body = _scan_body(s, a["rows"], a["hist"]) if stage == "scan" else _chunk_body(s, stage, a, flagged)
        body = ["(void)st; (void)sb; (void)t;", *body]
        fn, cxx = _hashed(_pair(f"{unit.sig()}, int* st, int sb, int t", body, body).replace("F_", f"{TOKEN}_") + "\n")
        natives[fn] = (cxx, unit.stub(fn, f"{fn}_cpu", f"{fn}_cuda", checks))
        used = {p: v for p, v in scratch.items() if p in params}
        dim = 1 if stage == "scan" else parts
        launches.append(_launch(f"{name}_{stage}", unit, fn, checks, dim, group["id"], used, slot_base))
    return launches, natives

"""Scatter groups (``add_at``) on the C++ path: an ordered gather over a destination-sorted CSR
of the positions (`dpt_ir.backends.cxx.csr`), as C++ element code.

Assumes: a fusion group of kind ``scatter`` (one root whose op has a `ScatterLayout` with
``key_form`` / ``row_form``; ``group.scatter.form``), float32 or float64 data. Guarantees:

- `covers`: the group is lowered when its only output is the root, the data are floats and,
  for the ``sort`` form, the positions are int32, read from memory or made in the group by
  producers `nest.cover` lowers (element code of the count and place stages); `evaluated`: the members the sum reads (a
  ``transpose`` form's position producers are evaluated at compile time, not in a kernel);
- the root is a pointwise member of its output space (`nest.cover`): output ``o`` is
  ``base[o]`` plus the values of its CSR row (`row_sum`), in CSR order (the increasing
  flat order of the position elements: ``np.add.at``'s), float32 in float64, rounded once;
  the base's and values' producers are element code, the values evaluated inside the loop;
- ``transpose``: the CSR is built at compile time (`csr.constant_csr`) and bound as
  launch constants; ``sort``: `sort_launches` builds it per evaluation with a stable counting
  sort (count, scan, place: one task per chunk of positions, integer counters, no atomics)
  into scratch arrays (``$partial:<root>:rows|cols|hist``); a position out of range under
  ``raise`` raises the node's flag and is clamped, so every read stays in bounds.

The chunks are fixed by the shapes (`csr.chunks`), each CPU or CUDA task runs one
chunk, and each output element sums its own row on one thread: bit-identical for any
thread count.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from dpt_ir.backends.cxx import gathers
from dpt_ir.backends.cxx.common import C_TYPES, PRECISE_TRIG, TOKEN
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.indexing import Affine, Coords
from dpt_ir.ir.kernel_ir import KernelGroup
from dpt_ir.ir.registry import ScatterLayout
from dpt_ir.ir.types import FLOAT_DTYPES

Flag = Callable[[str], str]  # a condition -> the statement raising a status flag when it holds


def is_scatter(op: Any) -> bool:
    """Whether the op is a scatter with a `ScatterLayout`."""
    return op.scatter is not None


def _layout(graph: Graph, node: Node) -> ScatterLayout:
    from dpt_ir.backends.cxx.csr import layout_of

    return layout_of(graph, node.name)


def covers(graph: Graph, group: KernelGroup) -> bool:
    """Whether the C++ path lowers scatter group ``group`` (see the module docstring)."""
    (root,) = group.roots
    node = graph.node_map[root]
    layout = _layout(graph, node)
    if layout.key_form is None or layout.row_form is None or list(group.outputs) != [root]:
        return False
    values, base = graph.types[node.inputs[layout.values]], graph.types[node.inputs[layout.base]]
    if node.type.dtype not in FLOAT_DTYPES or values.dtype != node.type.dtype or base.dtype != node.type.dtype:
        return False
    positions = node.inputs[layout.indices]
    if group.scatter.form == "sort":
        if graph.types[positions].dtype != "int32":
            return False
        return _positions_nest(graph, group) is not None
    return True


def _positions_nest(graph: Graph, group: KernelGroup) -> Any:
    """The nest over the positions' shape that reads a ``sort`` scatter's positions, or
    evaluates them when they are made inside the group (casts, arithmetic, views of data);
    None when `nest.cover` refuses their producers."""
    from dpt_ir.backends.cxx.nest import cover

    (root,) = group.roots
    node = graph.node_map[root]
    positions = node.inputs[_layout(graph, node).indices]
    members, needed, stack = set(group.nodes), set(), [positions]
    while stack:
        v = stack.pop()
        if v in members and v not in needed:
            needed.add(v)
            stack.extend(graph.node_map[v].inputs)
    nodes = [n for n in group.nodes if n in needed]
    inputs = sorted({i for n in nodes for i in graph.node_map[n].inputs if i not in needed})
    space = list(graph.types[positions].shape)
    sub = {**group.model_dump(), "kind": "pointwise", "space": space, "nodes": nodes, "roots": [], "scatter": None}
    sub.update(outputs=[positions], inputs=inputs, axes=[], epilogue=[])
    return cover(graph, KernelGroup.model_validate(sub))


def evaluated(graph: Graph, group: KernelGroup) -> list[str]:
    """The members a kernel of the group evaluates, in the group's order: for a scatter
    group, the root and the members its base and values need; every member otherwise."""
    if group.kind != "scatter":
        return list(group.nodes)
    (root,) = group.roots
    node = graph.node_map[root]
    layout = _layout(graph, node)
    members, needed = set(group.nodes), {root}
    stack = [node.inputs[layout.base], node.inputs[layout.values]]
    while stack:
        v = stack.pop()
        if v in members and v not in needed:
            needed.add(v)
            stack.extend(graph.node_map[v].inputs)
    return [n for n in group.nodes if n in needed]


def _position_coords(shape: tuple[int, ...], new: Any) -> Coords:
    """Coordinates of a position element, each a new coordinate (`new(stride, extent)`)."""
    return tuple(new(s, n) for s, n in zip(idx.strides(shape), shape, strict=True))


def children(graph: Graph, node: Node, coords: Coords, variable: Any) -> list[tuple[str, Coords]]:
    """What the root reads at output ``coords`` (for `sites.walk`): the base there, and the
    values at their source for a position element (new coordinates, `variable`)."""
    layout = _layout(graph, node)
    positions = tuple(graph.types[node.inputs[layout.indices]].shape)
    j = _position_coords(positions, lambda _s, n: variable(idx.zero(0), n, str))
    return [(node.inputs[layout.base], coords), (node.inputs[layout.values], layout.source_at(coords, j))]


def _csr(w: Any, node: Node, layout: ScatterLayout, form: str) -> tuple[str, str]:
    """The parameters of the CSR offsets and columns: launch constants (``transpose``) or
    the sort's scratch arrays (``sort``)."""
    from dpt_ir.backends.cxx.csr import constant_csr, constant_positions

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
    from dpt_ir.backends.cxx.csr import chunks

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
    layout = _layout(w.graph, node)
    rows, cols = _csr(w, node, layout, w.nest.group.scatter.form)
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
    from dpt_ir.backends.cxx.csr import chunks
    from dpt_ir.backends.cxx.drivers import driver_pair
    from dpt_ir.backends.cxx.emit import ElementWriter
    from dpt_ir.backends.cxx.units import Unit, hashed, launch

    (root,) = group.roots
    node = graph.node_map[root]
    layout = _layout(graph, node)
    positions = node.inputs[layout.indices]
    shape, size = tuple(graph.types[positions].shape), layout.size
    parts = chunks(math.prod(shape), layout.rows)
    s = _Sort(layout, shape, layout.rows, parts, -(-math.prod(shape) // parts))
    scratch = _scratch(graph, node, layout)
    rows, cols, hist = scratch
    made = _positions_nest(graph, group)
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

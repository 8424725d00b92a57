"""Scatter groups (``add_at``) on the C++ path: an ordered gather over a destination-sorted CSR
of the positions (`dpt_ir.backends.cxx.csr`), as C++ element code.

Assumes: a fusion group of kind ``scatter`` (one root whose op has a `ScatterLayout` with
``key_form`` / ``row_form``; ``group.scatter.form``), float32, float64, int32 or uint8 data.
Guarantees:

- `nest.scatter_covers`: the group is lowered when its only output is the root, base, values
  and result share one numeric dtype and,
  for the ``sort`` form, the positions are int32, read from memory or made in the group by
  producers `nest.cover` lowers (element code of the count and place stages); `evaluated`: the members the sum reads (a
  ``transpose`` form's position producers are evaluated at compile time, not in a kernel);
- the root is a pointwise member of its output space (`nest.cover`): output ``o`` is
  ``base[o]`` plus the values of its CSR row (`row_sum`), in CSR order (the increasing
  flat order of the position elements: ``np.add.at``'s), float32 in float64, rounded once,
  integers in ``unsigned int`` (wrapping as ``np.add.at`` does; exact, so any order agrees);
  the base's and values' producers are element code, the values evaluated inside the loop;
  where the nest walks rows and the output index moves one along the row, the loop runs only
  in rows whose outputs have entries (the element function's ``S``: `drivers.row_class`,
  `Nest.csr_row`), so the rows without any vectorise; the values are the same;
- ``transpose``: the CSR is built at compile time (`csr.constant_csr`) and bound as
  launch constants; ``sort``: `sort_stages.sort_launches` builds it per evaluation with a stable counting
  sort (count, scan, place: one task per chunk of positions, integer counters, no atomics)
  into scratch arrays (``$partial:<root>:rows|cols|hist``); a position out of range under
  ``raise`` raises the node's flag and is clamped, so every read stays in bounds.

The chunks are fixed by the shapes (`csr.chunks`), each CPU or CUDA task runs one
chunk, and each output element sums its own row on one thread: bit-identical for any
thread count.
"""

from __future__ import annotations

from typing import Any

from dpt_ir.backends.cxx.common import C_TYPES
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.indexing import Coords
from dpt_ir.ir.kernel_ir import KernelGroup
from dpt_ir.ir.registry import ScatterLayout
from dpt_ir.ir.types import FLOAT_DTYPES


def is_scatter(op: Any) -> bool:
    """Whether the op is a scatter with a `ScatterLayout`."""
    return op.scatter is not None


def scatter_layout(graph: Graph, node: Node) -> ScatterLayout:
    """The `ScatterLayout` of scatter member ``node``."""
    from dpt_ir.backends.cxx.csr import layout_of

    return layout_of(graph, node.name)


def evaluated(graph: Graph, group: KernelGroup) -> list[str]:
    """The members a kernel of the group evaluates, in the group's order: for a scatter
    group, the root and the members its base and values need; every member otherwise."""
    if group.kind != "scatter":
        return list(group.nodes)
    (root,) = group.roots
    node = graph.node_map[root]
    layout = scatter_layout(graph, node)
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
    layout = scatter_layout(graph, node)
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
        w.constants[f"$rows:{node.name}"] = ("int32", offsets)
        w.constants[f"$cols:{node.name}"] = ("int32", order)
        return w.param(f"$rows:{node.name}"), w.param(f"$cols:{node.name}")
    scratch = sort_scratch(w.graph, node, layout)
    w.scratch.update(scratch)
    rows, cols, _ = scratch
    return w.param(rows), w.param(cols)


def _moves_along_row(nest: Any, form: idx.Affine) -> bool:
    """Whether the output index ``form`` of a row-walked nest is its row's start plus the
    position along the row (weight 1 on the last axis, none on coordinates past the space's):
    a row's outputs are then consecutive CSR rows (`Nest.csr_row`)."""
    rank = len(nest.space)
    w = form.padded(rank).w
    return bool(nest.row_position) and w[rank - 1] == 1 and not any(w[rank:])


def sort_scratch(graph: Graph, node: Node, layout: ScatterLayout) -> dict[str, tuple[str, int]]:
    """The sort's scratch arrays: CSR offsets, columns, and per-chunk counters."""
    from dpt_ir.backends.cxx.csr import chunks

    count = graph.types[node.inputs[layout.indices]].size
    parts = chunks(count, layout.rows)
    return {
        f"$partial:{node.name}:rows": ("int32", layout.rows + 1),
        f"$partial:{node.name}:cols": ("int32", max(count, 1)),
        f"$partial:{node.name}:hist": ("int32", parts * layout.rows),
    }


def row_sum(w: Any, node: Node, coords: Coords) -> str:
    """Emit the root at output ``coords`` into `ElementWriter` ``w``: the base plus the
    values of the output's CSR row, in order; the C++ variable holding it."""
    layout = scatter_layout(w.graph, node)
    rows, cols = _csr(w, node, layout, w.nest.group.scatter.form)
    out_t = C_TYPES[node.type.dtype]
    # float32 sums in float64, rounded once; integers in unsigned int, which wraps as
    # np.add.at's int32 and uint8 do (the cast back is modular)
    acc = "double" if node.type.dtype in FLOAT_DTYPES else "unsigned int"
    base = w.value(node.inputs[layout.base], coords)
    form = layout.row_form(coords)  # type: ignore[misc]
    o = w.render(form)
    n = len(w.lines)
    s, k = f"sc{n}", f"k{n}"
    w.lines.append(f"{acc} {s} = ({acc}){base};")
    classed = not w.edge and _moves_along_row(w.nest, form)
    if classed:  # only a row with entries loops over them (`drivers.row_class`); `(acc)base` rounds back exactly
        w.nest.csr_row = w.nest.csr_row or (rows, o)  # the element function's (written first)
        w.lines.append("if (S)")
    w.lines.append(f"for (int {k} = {rows}[{o}]; {k} < {rows}[{o} + 1]; ++{k}) {{")
    outside = dict(w.vars)  # the row's values stay in the loop's scope
    positions = tuple(w.graph.types[node.inputs[layout.indices]].shape)
    j = _position_coords(positions, lambda st, e: w.variable(f"(({cols}[{k}] / {st}) % {e})", e))
    v = w.value(node.inputs[layout.values], layout.source_at(coords, j))
    w.lines.append(f"{s} = {s} + ({acc}){v};")
    w.lines.append("}")
    w.vars = outside
    return w.define(out_t, f"({out_t}){s}")

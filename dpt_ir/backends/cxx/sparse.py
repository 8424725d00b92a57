"""Constant sparse linear maps on the C++ path: ``SparseRows`` members (resample, its adjoint,
radon) as an ordered row loop in the element function.

Assumes: a member whose op has ``OpDef.sparse_rows`` (the destination-sorted CSR of the node,
backend-neutral NumPy data: no target syntax), float32 or float64 data. Guarantees:

- `children` (for `sites.walk`) reads the member's input at new coordinates (one per input
  axis, or one flat coordinate for an input that is read from memory), so every read inside
  the row is a per-element (``gather``) read and fusion's producers of the input are evaluated
  inside the loop, at the column's element;
- `row_sum` (for `ElementWriter.value`) emits ``s = sum(vals[k] * x[cols[k]])`` over the
  output element's CSR row in CSR order, float32 data in float64 (the weights are float64),
  plus the bias, rounded once: the sum of the NumPy reference's order, term for term (each
  product is its own statement, so no compiler contracts it into an FMA on the CPU). The
  arrays are launch constants (``$rowptr:<node>``, ``$cols:``, ``$vals:``, ``$bias:``),
  bound per launch, so kernels of equal structure share their text.

One element sums its own row, on one thread: the result never depends on the thread count.
"""

from __future__ import annotations

import math
from typing import TYPE_CHECKING, Any

from dpt_ir.backends.cxx.common import C_TYPES, DTYPE_OF_C, flat_index, offset
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.indexing import Coords
from dpt_ir.ir.registry import SparseRows
from dpt_ir.ir.types import FLOAT_DTYPES

if TYPE_CHECKING:
    from dpt_ir.backends.cxx.sites import Variable



def is_sparse(op: Any) -> bool:
    """Whether the op is a constant sparse linear map (`SparseRows`)."""
    return op.sparse_rows is not None


def covers(graph: Graph, node: Node) -> bool:
    """A sparse member the C++ path lowers: float data in and out."""
    source = graph.types[node.inputs[0]]
    return node.type.dtype in FLOAT_DTYPES and source.dtype == node.type.dtype and len(source.shape) >= 1


def rows_of(node: Node) -> SparseRows:
    op = node.opdef
    return op.sparse_rows(op.parse_attrs(node.attrs, node.name), tuple(node.type.shape))  # type: ignore[misc]


def _flat_read(members: set[str], node: Node, in_shape: tuple[int, ...]) -> bool:
    """Whether the input is read at one flat coordinate (a memory read of a flat map)."""
    return node.inputs[0] not in members or len(in_shape) <= 1


def _source_coords(coords: Coords, in_shape: tuple[int, ...], flat: bool, new: Any) -> Coords:
    """The input coordinates of a row's column: ``new(expr_part, extent)`` makes a coordinate
    from the column (``None``: the column itself; else (stride, extent) of one axis of it)."""
    if flat:
        return (new(None, math.prod(in_shape)),)
    return tuple(new((s, n), n) for s, n in zip(idx.strides(in_shape), in_shape, strict=True))


def children(graph: Graph, node: Node, coords: Coords, variable: Variable) -> list[tuple[str, Coords]]:
    """The input (and coordinates) a sparse member reads at ``coords``, for `sites.walk`: a
    new coordinate (``variable``) per input axis the column sets. Every read below it is per
    element, so the walk's forms need not be the ones `row_sum` renders (a memory read there
    takes the flat column directly)."""
    in_shape = tuple(graph.types[node.inputs[0]].shape)

    def new(_part: Any, extent: int) -> Any:
        return variable(idx.zero(0), extent, str)

    return [(node.inputs[0], _source_coords(coords, in_shape, len(in_shape) <= 1, new))]


def _flat_coords(at: Coords, in_shape: tuple[int, ...]) -> Coords:
    """Coordinates of a flat column ``q`` in an input of ``in_shape`` whose flat offset is
    ``q``: the last axis carries it (only the flat offset of a memory read matters)."""
    if not in_shape:
        return ()
    (q,) = at
    return (*(idx.zero(len(q.w)) for _ in in_shape[:-1]), q)


def row_sum(w: Any, node: Node, coords: Coords) -> str:
    """Emit the row loop of sparse member ``node`` at ``coords`` into `ElementWriter` ``w``;
    the C++ variable holding its value."""
    graph = w.graph
    rows = rows_of(node)
    out_t = C_TYPES[node.type.dtype]
    acc = "double"  # float32 sums in float64, float64 in float64 (the weights are float64)
    in_shape = tuple(graph.types[node.inputs[0]].shape)
    arrays: dict[str, tuple[str, Any]] = {"rowptr": ("int", rows.rowptr), "cols": ("int", rows.cols)}
    arrays["vals"] = (acc, rows.vals)
    if rows.bias is not None:
        arrays["bias"] = (acc, rows.bias)
    p = {}
    for part, (c_type, values) in arrays.items():
        key = f"${part}:{node.name}"
        w.constants[key] = (DTYPE_OF_C[c_type], values)
        p[part] = w.param(key)
    o = _row_index(w, node, coords)
    n = len(w.lines)
    s, k = f"sp{n}", f"k{n}"
    w.lines.append(f"{acc} {s} = 0.0;")
    w.lines.append(f"for (int {k} = {p['rowptr']}[{o}]; {k} < {p['rowptr']}[{o} + 1]; ++{k}) {{")
    outside = dict(w.vars)  # the row's values stay in the loop's scope
    flat = _flat_read(set(w.nest.group.nodes), node, in_shape)

    def new(part: tuple[int, int] | None, extent: int) -> Any:
        col = f"{p['cols']}[{k}]"
        return w.variable(col if part is None else f"(({col} / {part[0]}) % {part[1]})", extent)

    at = _source_coords(coords, in_shape, flat, new)
    if flat and len(in_shape) != 1:
        at = _flat_coords(at, in_shape)
    v = w.value(node.inputs[0], at)
    w.lines.append(f"const {acc} t{n} = {p['vals']}[{k}] * ({acc}){v};")
    w.lines.append(f"{s} = {s} + t{n};")
    w.lines.append("}")
    w.vars = outside
    if rows.bias is not None:
        w.lines.append(f"{s} = {s} + {p['bias']}[{o}];")
    return w.define(out_t, f"({out_t}){s}")


def _row_index(w: Any, node: Node, coords: Coords) -> str:
    """The CSR row of the output element at ``coords``: its flat offset."""
    form = offset(coords, tuple(node.type.shape), w.ext())
    if not w.at_output and not w.edge and form == flat_index(w.space()):
        return "i"
    return w.render(form)

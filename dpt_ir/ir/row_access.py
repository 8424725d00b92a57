"""Row access: does a kernel group read what earlier groups write only within the row of the
element it computes? The fact that row sets rest on, asked by the row-local fusion pass
(`dpt_ir.passes.fusion_rows`) when it forms a set and by the C++ backend
(`dpt_ir.backends.cxx.rows`) when it decides which values stay in a task's row buffer.

Assumes: a fused graph and one of its plan's groups. Guarantees: a proof on the coordinate forms
of every read, through the op table's views (`OpDef.view_affine`); no op is named. The walk is
iterative.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from dpt_ir.ir import indexing as idx
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.indexing import Affine, Coords
from dpt_ir.ir.kernel_ir import KernelGroup


def _row_form(space: Sequence[int], a: int) -> Affine:
    """The flat offset of the row of an element of ``space`` (rows over axes ``0..a-1``)."""
    n = len(space)
    return idx.flat(tuple(idx.axis(k, n) for k in range(a)), tuple(space[:a]), n)


def _identity(space: Sequence[int]) -> Coords:
    return tuple(idx.axis(k, len(space)) for k in range(len(space)))


def row_local(graph: Graph, group: KernelGroup, written: set[str], a: int) -> bool:
    """Does ``group`` read every value in ``written`` (by earlier members) within the row of the
    element it computes? Walks its members from its seeds (reduction inputs, full-shape stores)
    at the space's coordinates, through elementwise reads (NumPy-aligned) and view maps; any
    other member on the way to a written value (a stencil, a gather, a reduction) refuses."""
    space = tuple(group.space)
    n, size = len(space), math.prod(space)
    members, roots = set(group.nodes), set(group.roots)
    full, row = idx.canonical(idx.flat(_identity(space), space, n), space), idx.canonical(_row_form(space, a), space)
    seeds = [graph.node_map[r].inputs[0] if graph.node_map[r].opdef.kind == "reduction" else r for r in roots]
    stack = [(v, _identity(space)) for v in seeds if tuple(graph.types[v].shape) == space]
    seen: set[tuple[str, Coords]] = set()
    while stack:
        value, coords = stack.pop()
        if (value, coords) in seen:
            continue
        seen.add((value, coords))
        shape = tuple(graph.types[value].shape)
        if value not in members:
            if value in written:
                at = idx.canonical(idx.flat(coords, shape, n), space)
                if at != (full if graph.types[value].size == size else row):
                    return False
            continue
        node = graph.node_map[value]
        op = node.opdef
        if op.kind == "elementwise":
            stack += [(i, idx.aligned_coords(coords, shape, graph.types[i].shape)) for i in node.inputs]
        elif op.view_affine is not None and len(node.inputs) == 1:
            attrs = op.parse_attrs(node.attrs, value)
            in_shape = tuple(graph.types[node.inputs[0]].shape)
            mapped = op.view_affine(attrs, in_shape, shape, coords, space)
            if mapped is None:
                return False
            stack.append((node.inputs[0], tuple(mapped)))
        elif node.inputs and _reaches(graph, value, members, written):
            return False
    return True


def _reaches(graph: Graph, value: str, members: set[str], written: set[str]) -> bool:
    """Does member ``value`` read (through members) a value in ``written``? Iterative."""
    stack, seen = [value], set()
    while stack:
        v = stack.pop()
        if v in seen:
            continue
        seen.add(v)
        if v in written:
            return True
        if v in members:
            stack += list(graph.node_map[v].inputs)
    return False

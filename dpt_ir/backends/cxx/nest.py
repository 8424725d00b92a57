"""Which fusion groups the C++ path covers, and how their loop nest reads.

Assumes: a scheduled graph whose ``meta["groups"]`` are fusion's groups (``kind``, ``space``,
``axes``, ``nodes`` in topological order, ``roots``, ``outputs``, ``epilogue``), and the op
table's ``cxx`` / ``cxx_domain`` / ``cxx_reduce`` fields. Guarantees: `cover` accepts a group
only when every member is an elementwise op with a C++ expression or a reduction over
trailing axes with a C++ lane template, every value is float32, int32, uint8 or bool, an
epilogue (if any) has one shape, and every read is at the iteration index, a scalar, or a
broadcast whose
offset is a per-row base plus (or not) the inner counter; anything else stays on the
Warp-Python path (`dpt_ir.backends.warp.codegen`). The loop nest is rows x inner, the inner
axes contiguous and innermost, and no read divides or takes the modulus of the inner counter.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dpt_ir.graph import Graph
from dpt_ir.ops.registry import CxxReduce

C_TYPES = {"float32": "float", "int32": "int", "uint8": "unsigned char", "bool": "bool"}
WP_TYPES = {"float32": "wp.float32", "int32": "wp.int32", "uint8": "wp.uint8", "bool": "wp.bool"}
FLOAT = "float"


@dataclass(frozen=True)
class Read:
    """A value read from memory: ``mode`` ``full`` (at the iteration index ``i``), ``scalar``
    (element 0) or ``row`` (``rb[k] (+ j)``: a base per row, plus the inner counter when
    ``inner``); ``strides``: per outer axis, the value's element stride (0: broadcast)."""

    value: str
    mode: str
    inner: bool = False
    strides: tuple[int, ...] = ()


@dataclass
class Nest:
    """A covered group's loop nest: ``rows`` x ``inner`` elements over the outer shape
    ``outer``; reduction groups reduce the inner axes (one row per output element)."""

    group: dict[str, Any]
    space: tuple[int, ...]
    outer: tuple[int, ...]
    inner: int
    reads: dict[str, Read]
    roots: list[str]  # reduction roots
    stores: list[str]  # values written at the iteration index
    templates: dict[str, CxxReduce] = field(default_factory=dict)
    main: set[str] = field(default_factory=set)  # members computed per element
    after: list[str] = field(default_factory=list)  # epilogue outputs, computed per output element
    after_shape: tuple[int, ...] = ()
    sub: int = 1  # elements of a sub-row: reads are a base per sub-row plus (or not) the position in it
    base_outer: tuple[int, ...] = ()  # the shape the sub-rows are numbered over (row bases)

    @property
    def rows(self) -> int:
        return math.prod(self.outer)

    @property
    def size(self) -> int:
        return self.rows * self.inner


def aligned(shape: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return (1,) * (ndim - len(shape)) + tuple(shape)


def _read(value: str, shape: tuple[int, ...], space: tuple[int, ...], k: int) -> Read | None:
    """How ``value`` (of ``shape``) is read in a nest whose inner axes are the last ``k`` of
    ``space``; None when its inner part is neither all of the space's nor broadcast."""
    s = aligned(shape, len(space))
    cut = len(space) - k
    if s == tuple(space):
        return Read(value, "full")
    if math.prod(s) == 1:
        return Read(value, "scalar")
    inner = s[cut:]
    if inner != tuple(space[cut:]) and any(d != 1 for d in inner):
        return None
    strides = []
    for a in range(cut):
        strides.append(0 if s[a] == 1 else math.prod(s[a + 1 :]))
    return Read(value, "row", inner == tuple(space[cut:]) and math.prod(inner) > 1, tuple(strides))


def _types_ok(graph: Graph, values: list[str]) -> bool:
    return all(graph.types[v].dtype in C_TYPES for v in values)


def cover(graph: Graph, group: dict[str, Any]) -> Nest | None:
    """The loop nest of ``group`` on the C++ path, or None when the group stays on the
    Warp-Python path (see the module docstring for what is covered)."""
    kind, space = group.get("kind"), tuple(group["space"])
    if kind not in ("pointwise", "reduction") or not 0 < math.prod(space) < 2**31:
        return None
    members = set(group["nodes"])
    roots, templates = [], {}
    for name in group["nodes"]:
        node = graph.node_map[name]
        op = node.opdef
        if op.kind == "reduction" and kind == "reduction" and op.cxx_reduce is not None:
            src = graph.types[node.inputs[0]]
            if src.dtype not in C_TYPES or node.type.dtype not in C_TYPES or src.shape != space:
                return None
            t = op.cxx_reduce(C_TYPES[src.dtype], C_TYPES[node.type.dtype])
            if t is None:
                return None
            roots.append(name)
            templates[name] = t
        elif op.kind != "elementwise" or op.cxx is None:
            return None
    if not _types_ok(graph, [*group["nodes"], *group["inputs"]]):
        return None
    late = _descendants(graph, members, roots)  # computed from finished reductions: the epilogue
    after = [v for v in group["outputs"] if v in late]
    stores = [v for v in group["outputs"] if v not in roots and v not in late]
    main = _ancestors(graph, members, [*(graph.node_map[r].inputs[0] for r in roots), *stores])
    if any(tuple(graph.types[v].shape) != space for v in stores):
        return None
    after_shape = _after_shape(graph, members - main - set(roots), roots)
    if after_shape is None:
        return None
    if kind == "reduction":
        axes = tuple(group["axes"])
        if axes != tuple(range(len(space) - len(axes), len(space))) or not roots:
            return None
        k = len(axes)
    else:
        k = _inner_axes(graph, group, space, main | set(roots), len(space))
    cut = len(space) - k
    k_read = k if kind == "pointwise" else _inner_axes(graph, group, space, main | set(roots), k)
    reads = {}
    for v in _reads(graph, group, main | set(roots)):
        r = _read(v, tuple(graph.types[v].shape), space, k_read)
        if r is None:
            return None
        reads[v] = r
    inner = math.prod(space[cut:])
    sub_rows = (math.prod(space[len(space) - k_read :]), space[: len(space) - k_read])
    return Nest(group, space, space[:cut], inner, reads, roots, stores, templates, main, after, after_shape, *sub_rows)


def _ancestors(graph: Graph, members: set[str], seeds: list[str]) -> set[str]:
    """``seeds`` and the members they depend on, within ``members`` (iteratively)."""
    out: set[str] = set()
    stack = [v for v in seeds if v in members]
    while stack:
        v = stack.pop()
        if v in out:
            continue
        out.add(v)
        stack += [i for i in graph.node_map[v].inputs if i in members and i not in out]
    return out


def _descendants(graph: Graph, members: set[str], roots: list[str]) -> set[str]:
    """The members computed from ``roots`` (not the roots themselves), iteratively."""
    out: set[str] = set()
    stack = list(roots)
    while stack:
        v = stack.pop()
        for user in graph.consumers[v]:
            if user in members and user not in out:
                out.add(user)
                stack.append(user)
    return out


def _after_shape(graph: Graph, epilogue: set[str], roots: list[str]) -> tuple[int, ...] | None:
    """The one shape of the epilogue's nodes (constants aside), of the reductions' output
    size; () when there is no epilogue; None when they differ."""
    shapes = {tuple(graph.types[v].shape) for v in epilogue if graph.node_map[v].inputs}
    if not shapes:
        return ()
    if len(shapes) > 1 or not roots:
        return None
    (shape,) = shapes
    return shape if math.prod(shape) == graph.types[roots[0]].size else None


def _reads(graph: Graph, group: dict[str, Any], members: set[str]) -> list[str]:
    """Values the group's nodes in ``members`` read from memory, by first use in node order."""
    out: list[str] = []
    for name in group["nodes"]:
        if name not in members:
            continue
        for i in graph.node_map[name].inputs:
            if i not in group["nodes"] and i not in out:
                out.append(i)
    return out


def _inner_axes(graph: Graph, group: dict[str, Any], space: tuple[int, ...], members: set[str], most: int) -> int:
    """The most trailing axes (at most ``most``) over which every read is either whole or
    broadcast (at least the last axis: each read is either of the space's length or 1 there)."""
    best = min(1, most)
    for k in range(1, most + 1):
        if all(_read(v, tuple(graph.types[v].shape), space, k) for v in _reads(graph, group, members)):
            best = k
        else:
            break
    return best

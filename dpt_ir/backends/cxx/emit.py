"""Which fusion groups the C++ path covers, how their loop nest reads, and their element function.

Assumes: a scheduled graph whose ``meta["groups"]`` are fusion's groups (``kind``, ``space``,
``axes``, ``nodes`` in topological order, ``roots``, ``outputs``, ``epilogue``), and the op
table's ``cxx`` / ``cxx_domain`` / ``cxx_reduce`` fields. Guarantees: `cover` accepts a group
only when every member is an elementwise op with a C++ expression or a reduction over
trailing axes with a C++ lane template, every value is float32, int32, uint8 or bool, no
epilogue is needed, and every read is at the iteration index, a scalar, or a broadcast whose
offset is a per-row base plus (or not) the inner counter; anything else stays on the
Warp-Python path (`dpt_ir.backends.warp.codegen`). The loop nest is rows x inner, the inner
axes contiguous and innermost, and no read divides or takes the modulus of the inner counter.

`element_function` returns name-free C++ (parameters by position, values numbered), so that
structurally identical groups give identical text (kernel sharing).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

from dpt_ir.graph import Graph, origin_of
from dpt_ir.ops.registry import CxxReduce, CxxSite

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


def _aligned(shape: tuple[int, ...], ndim: int) -> tuple[int, ...]:
    return (1,) * (ndim - len(shape)) + tuple(shape)


def _read(value: str, shape: tuple[int, ...], space: tuple[int, ...], k: int) -> Read | None:
    """How ``value`` (of ``shape``) is read in a nest whose inner axes are the last ``k`` of
    ``space``; None when its inner part is neither all of the space's nor broadcast."""
    s = _aligned(shape, len(space))
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


class ElementWriter:
    """Builds the element function of a covered group: every member at element ``i``
    (inner counter ``j``), flags ORed into ``fl``, stores when ``W``, and the reduction
    inputs as out-parameters ``y<q>``."""

    def __init__(self, graph: Graph, nest: Nest, params: list[str], slots: list[Any], kernel: str, checks: bool):
        self.graph, self.nest, self.params, self.slots = graph, nest, params, slots
        self.kernel, self.checks = kernel, checks
        self.slot_base = len(slots)
        self.lines: list[str] = []
        self.vars: dict[str, str] = {}
        self.uses_big = False
        self.at_output = False  # computing an epilogue (at output o), not an element (at i)

    def param(self, value: str) -> str:
        if value not in self.params:
            self.params.append(value)
        return f"a{self.params.index(value)}"

    def flag(self, node: str, op: str, kind: str, bad: str, detail: str = "") -> str:
        from dpt_ir.backends.warp.codegen import StatusSlot

        self.slots.append(StatusSlot(self.kernel, node, op, kind, detail, origin_of(self.graph, node)))
        return f"fl[{len(self.slots) - 1 - self.slot_base}] |= (int)({bad});"

    def nonfinite(self, value: str, var: str) -> str | None:
        if not self.checks or C_TYPES[self.graph.types[value].dtype] != FLOAT:
            return None
        node = self.graph.node_map.get(value)
        return self.flag(value, node.opdef.name if node else "input", "nonfinite", f"dp_nonfinite({var})")

    def load(self, value: str) -> str:
        if self.at_output:
            at = self._output_offset(tuple(self.graph.types[value].shape))
        else:
            r = self.nest.reads[value]
            at = {"full": "i", "scalar": "0"}.get(r.mode) or (f"rb[{self._row(value)}]" + (" + j" if r.inner else ""))
        var = f"r{len(self.vars)}"
        self.lines.append(f"const {C_TYPES[self.graph.types[value].dtype]} {var} = {self.param(value)}[{at}];")
        return var

    def _row(self, value: str) -> int:
        rows = [v for v, r in self.nest.reads.items() if r.mode == "row"]
        return rows.index(value)

    def coords(self, shape: tuple[int, ...]) -> tuple[str, ...]:
        """C++ coordinates of the current element (``i``, or ``o`` in an epilogue) in a value
        of ``shape`` (div/mod: sources such as iota, and epilogue reads, only)."""
        space, at = (self.nest.after_shape, "o") if self.at_output else (self.nest.space, "i")
        s = _aligned(shape, len(space))
        out = []
        for a in range(len(space) - len(shape), len(space)):
            stride = math.prod(space[a + 1 :])
            out.append("0" if s[a] == 1 else f"(({at} / {stride}) % {space[a]})")
        return tuple(out)

    def _output_offset(self, shape: tuple[int, ...]) -> str:
        space = self.nest.after_shape
        s = _aligned(shape, len(space))
        if s == tuple(space):
            return "o"
        strides = [math.prod(s[a + 1 :]) for a in range(len(s))]
        terms = [f"{c} * {strides[a]}" for a, c in enumerate(self.coords(s)) if c != "0"]
        return " + ".join(terms) or "0"

    def epilogue(self, results: dict[str, str]) -> list[str]:
        """Statements computing and storing the epilogue outputs at output ``o`` from the
        finished reductions (``results``: root -> its C++ variable)."""
        saved, self.vars, self.lines, self.at_output = self.vars, dict(results), [], True
        for v in self.nest.after:
            var = self.value(v)
            check = self.nonfinite(v, var)
            self.lines.append(f"{self.param(v)}[o] = {var};{' ' + check if check else ''}")
        lines, self.vars, self.lines, self.at_output = self.lines, saved, [], False
        return lines

    def value(self, name: str) -> str:
        if name in self.vars:
            return self.vars[name]
        if name not in self.nest.group["nodes"] and (self.at_output or name in self.nest.reads):
            self.vars[name] = self.load(name)
            return self.vars[name]
        node = self.graph.node_map[name]
        op = node.opdef
        attrs = op.parse_attrs(node.attrs, name)
        args = tuple(self.value(i) for i in node.inputs)
        in_types = tuple(C_TYPES[self.graph.types[i].dtype] for i in node.inputs)
        out_t = C_TYPES[node.type.dtype]
        fmt = {"T": out_t, **{f"T{k}": t for k, t in enumerate(in_types)}}
        site = CxxSite(attrs, args, out_t, in_types, tuple(node.type.shape), self.coords(tuple(node.type.shape)))
        expr = op.cxx(site) if callable(op.cxx) else op.cxx.format(*args, **fmt)  # type: ignore[union-attr]
        self.uses_big = self.uses_big or "big" in expr
        if op.cxx_domain and self.checks:
            detail = str(getattr(attrs, "message", ""))
            self.lines.append(self.flag(name, op.name, "domain", f"!({op.cxx_domain.format(*args, **fmt)})", detail))
        var = f"v{len(self.vars)}"
        self.lines.append(f"const {out_t} {var} = {expr};")
        self.vars[name] = var
        return var

    def body(self) -> list[str]:
        """Statements of the element function, in the group's node order."""
        for name in self.nest.group["nodes"]:
            if name in self.nest.main:
                self.value(name)
        for q, root in enumerate(self.nest.roots):
            self.lines.append(f"y{q} = {self.value(self.graph.node_map[root].inputs[0])};")
        for v in self.nest.stores:
            var = self.value(v)
            check = self.nonfinite(v, var)
            self.lines.append(f"if (W) {{ {self.param(v)}[i] = {var};{' ' + check if check else ''} }}")
        return self.lines

"""The element function of a covered group (`dpt_ir.backends.cxx.nest.cover`): the op
table's C++ expressions for every member, in node order.

Assumes: a `Nest` of the group. Guarantees: the text is name-free (parameters by position,
values numbered), so structurally identical groups give identical text (kernel sharing);
domain and non-finite checks OR into ``fl`` (status slots registered in emission order);
epilogues are computed at output ``o`` from the finished reductions.
"""

from __future__ import annotations

import math
from typing import Any

from dpt_ir.backends.cxx.nest import C_TYPES, FLOAT, Nest, aligned
from dpt_ir.graph import Graph, origin_of
from dpt_ir.ops.registry import CxxSite


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
        from dpt_ir.backends.warp.launches import StatusSlot

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
        s = aligned(shape, len(space))
        out = []
        for a in range(len(space) - len(shape), len(space)):
            stride = math.prod(space[a + 1 :])
            out.append("0" if s[a] == 1 else f"(({at} / {stride}) % {space[a]})")
        return tuple(out)

    def _output_offset(self, shape: tuple[int, ...]) -> str:
        space = self.nest.after_shape
        s = aligned(shape, len(space))
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

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

from dpt_ir.backends.cxx import sites
from dpt_ir.backends.cxx.nest import C_TYPES, FLOAT, Nest
from dpt_ir.backends.cxx.sites import flat_index
from dpt_ir.errors import ContractError
from dpt_ir.graph import Graph, origin_of
from dpt_ir.ops.indexing import Affine, Coords
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
        self.vars: dict[tuple[str, Affine], str] = {}  # (value, flat offset) -> its C++ variable
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

    def space(self) -> tuple[int, ...]:
        return self.nest.after_shape if self.at_output else self.nest.space

    def load(self, value: str, at: Affine) -> str:
        """A read of ``value`` at flat offset ``at`` (over the current space)."""
        if self.at_output:
            where = self.render(at)
        else:
            r = self.nest.reads[(value, at)]
            where = {"full": "i", "scalar": str(r.offset)}.get(r.mode) or f"rb[{self._row(value, at)}]"
            if r.mode == "row" and r.step:
                where += " + j" if r.step == 1 else f" + j * {r.step}"
        var = f"r{len(self.vars)}"
        self.lines.append(f"const {C_TYPES[self.graph.types[value].dtype]} {var} = {self.param(value)}[{where}];")
        return var

    def _row(self, value: str, at: Affine) -> int:
        rows = [site for site, r in self.nest.reads.items() if r.mode == "row"]
        return rows.index((value, at))

    def render(self, form: Affine) -> str:
        """C++ of an affine form over the current space's coordinates (``i``, or ``o`` in an
        epilogue; div/mod: sources such as iota, and epilogue reads, only)."""
        space, at = self.space(), ("o" if self.at_output else "i")
        terms = [str(form.b)] if form.b else []
        for a, x in enumerate(form.w):
            if x:
                stride = math.prod(space[a + 1 :])
                c = at if stride == 1 else f"({at} / {stride})"
                c = c if a == 0 else f"({c} % {space[a]})"
                terms.append(c if x == 1 else f"{c} * {x}")
        return f"({' + '.join(terms)})" if len(terms) > 1 else (terms[0] if terms else "0")

    def epilogue(self, results: dict[str, str]) -> list[str]:
        """Statements computing and storing the epilogue outputs at output ``o`` from the
        finished reductions (``results``: root -> its C++ variable)."""
        saved, self.lines, self.at_output = self.vars, [], True
        self.vars = {(r, flat_index(self.nest.after_shape)): var for r, var in results.items()}
        for v in self.nest.after:
            var = self.value(v)
            check = self.nonfinite(v, var)
            self.lines.append(f"{self.param(v)}[o] = {var};{' ' + check if check else ''}")
        lines, self.vars, self.lines, self.at_output = self.lines, saved, [], False
        return lines

    def value(self, name: str, coords: Coords | None = None) -> str:
        """The C++ variable of ``name`` at ``coords`` (default: where it broadcasts to the
        current element); each (value, flat offset) is computed once."""
        space, shape = self.space(), tuple(self.graph.types[name].shape)
        coords = sites.identity(shape, space) if coords is None else coords
        if coords is None:  # cover's walk proved every seed broadcasts to its space
            raise ContractError(f"C++ kernel {self.kernel}: value {name!r} of shape {list(shape)} is not in {space}")
        key = (name, sites.offset(coords, shape, space))
        if key in self.vars:
            return self.vars[key]
        if name not in self.nest.group["nodes"]:
            self.vars[key] = self.load(*key)
            return self.vars[key]
        node = self.graph.node_map[name]
        op = node.opdef
        ins = [sites.input_coords(self.graph, node, k, coords, space) for k in range(len(node.inputs))]
        args = tuple(self.value(i, c) for i, c in zip(node.inputs, ins, strict=True))
        if op.kind == "shape":  # a layout view: the element it reads
            self.vars[key] = args[0]
            return args[0]
        attrs = op.parse_attrs(node.attrs, name)
        in_types = tuple(C_TYPES[self.graph.types[i].dtype] for i in node.inputs)
        out_t = C_TYPES[node.type.dtype]
        fmt = {"T": out_t, **{f"T{k}": t for k, t in enumerate(in_types)}}
        site = CxxSite(attrs, args, out_t, in_types, shape, tuple(self.render(c) for c in coords))
        expr = op.cxx(site) if callable(op.cxx) else op.cxx.format(*args, **fmt)  # type: ignore[union-attr]
        self.uses_big = self.uses_big or "big" in expr
        if op.cxx_domain and self.checks:
            detail = str(getattr(attrs, "message", ""))
            self.lines.append(self.flag(name, op.name, "domain", f"!({op.cxx_domain.format(*args, **fmt)})", detail))
        var = f"v{len(self.vars)}"
        self.lines.append(f"const {out_t} {var} = {expr};")
        self.vars[key] = var
        return var

    def body(self) -> list[str]:
        """Statements of the element function: the reduction inputs, then the stores."""
        for q, root in enumerate(self.nest.roots):
            self.lines.append(f"y{q} = {self.value(self.graph.node_map[root].inputs[0])};")
        for v in self.nest.stores:
            var = self.value(v)
            check = self.nonfinite(v, var)
            self.lines.append(f"if (W) {{ {self.param(v)}[i] = {var};{' ' + check if check else ''} }}")
        return self.lines

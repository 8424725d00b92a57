"""The element functions of a covered group (`dpt_ir.backends.cxx.nest.cover`): the op
table's C++ expressions for every member the seeds need, evaluated at coordinates
(`sites`: views, joins and stencil taps are coordinate maps, not code of their own).

Assumes: a `Nest` of the group. Guarantees: the text is name-free (parameters by position,
values numbered, tables named under the kernel's hashed name), so structurally identical
groups give identical text (kernel sharing); each (value, flat offset) is computed once;
domain and non-finite checks OR into ``fl``, one status slot per (node, kind) in first-use
order; epilogues are computed at output ``o`` from the finished reductions. With guards, a
second function (`ElementWriter.edge_body`) evaluates per-axis views through their image
tables and is valid at every element; the first reads their interior shift only.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from typing import Any

import numpy as np

from dpt_ir.backends.cxx import gathers, scatter, sites, sparse
from dpt_ir.backends.cxx.common import C_TYPES, PRECISE_TRIG, TOKEN, flat_index, offset
from dpt_ir.backends.cxx.nest import Nest
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.indexing import Affine, Coords
from dpt_ir.ir.mirror import MirrorSum
from dpt_ir.ir.records import origin_of
from dpt_ir.ir.registry import CXX_FLOATS, CxxSite
from dpt_ir.ops.elementwise import cxx_literal


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
        self.edge = False  # the edge function: per-axis views through their tables
        self.ends = False  # the row ends' function (`row_ends`): clamped reads, the pads' selects
        # The element and edge functions of a nest whose drivers walk rows of its last axis
        # (`Nest.row_position`, set by `kernels.group_kernels`): ``j`` is the position in the
        # row (`render`). Other writers (the sort stages) bind ``i`` and ``j`` their own way.
        self.rows = False
        self.extra: list[int] = []  # extents of the edge's table coordinates q0, q1...
        self.tables: dict[str, str] = {}  # C++ table contents -> name
        self.slot_of: dict[tuple[str, str, str], int] = {}  # (node, kind, detail) -> status slot
        self.constants: dict[str, tuple[str, Any]] = {}  # launch constants: param -> (dtype, values)
        self.scratch: dict[str, tuple[str, int]] = {}  # scratch arrays (a scatter's sort): param -> (dtype, size)
        self.loads: dict[str, str] = {}  # variable of a parameter read at element i -> the parameter
        self.direct: dict[int, str] = {}  # root q whose input is such a read -> its parameter (`body`)

    def param(self, value: str) -> str:
        if value not in self.params:
            self.params.append(value)
        return f"a{self.params.index(value)}"

    def flag(self, node: str, op: str, kind: str, bad: str, detail: str = "") -> str:
        """OR ``bad`` into the status slot of (node, kind): one slot however many places
        (taps, the edge function) evaluate the node."""
        from dpt_ir.backends.launches import StatusSlot

        key = (node, kind, detail)
        if key not in self.slot_of:
            self.slots.append(StatusSlot(self.kernel, node, op, kind, detail, origin_of(self.graph, node)))
            self.slot_of[key] = len(self.slots) - 1 - self.slot_base
        return f"fl[{self.slot_of[key]}] |= (bool)({bad});"

    def nonfinite(self, value: str, var: str) -> str | None:
        if not self.checks or C_TYPES[self.graph.types[value].dtype] not in CXX_FLOATS:
            return None
        node = self.graph.node_map.get(value)
        return self.flag(value, node.opdef.name if node else "input", "nonfinite", f"dp_nonfinite({var})")

    def space(self) -> tuple[int, ...]:
        return self.nest.after_shape if self.at_output else self.nest.space

    def ext(self) -> tuple[int, ...]:
        """The extents of the forms' coordinates: the space's, then the edge's variables."""
        return self.space() + tuple(self.extra)

    def load(self, value: str, at: Affine) -> str:
        """A read of ``value`` at flat offset ``at`` (over the current space)."""
        r = None if self.at_output or self.edge else self.nest.reads.get((value, at))
        if r is None or r.mode == "gather":  # (None: a sparse map's or scatter's row, at new coordinates)
            where = self.render(at)
        else:
            where = {"full": "i", "scalar": str(r.offset)}.get(r.mode) or f"rb[{self._row(value, at)}]"
            clamp = self.nest.ends.get((value, at)) if self.ends and self.nest.ends else None
            if clamp is not None:  # a row end: in its own row, what a pad outside its interior discards
                where += f" + dp_clampi(j, {clamp[0]}, {clamp[1]})"
            elif r.mode == "row" and r.step:
                where += " + j" if r.step == 1 else f" + j * {r.step}"
        var = f"r{len(self.vars)}"
        member_table = value in self.nest.group.nodes and gathers.is_table(self.graph, value)
        array = gathers.table_ref(self, value) if member_table else self.param(value)
        self.lines.append(f"const {C_TYPES[self.graph.types[value].dtype]} {var} = {array}[{where}];")
        if where == "i" and not member_table:
            self.loads[var] = array
        return var

    def _row(self, value: str, at: Affine) -> int:
        rows = [site for site, r in self.nest.reads.items() if r.mode == "row"]
        return rows.index((value, at))

    def render(self, form: Affine) -> str:
        """C++ of an affine form over the current space's coordinates (``i``, or ``o`` in an
        epilogue; div/mod: sources such as iota, and epilogue reads, only). Where the rows
        are the last axis (`rows`), its coordinate is ``j`` and the others come
        from the row's start ``i - j``: the same values, constant along the row, so clang
        hoists them out of the vectorised loop instead of dividing every lane."""
        space, at = self.space(), ("o" if self.at_output else "i")
        rows = self.rows and not self.at_output
        terms = [str(form.b)] if form.b else []
        for a, x in enumerate(form.w):
            if x and a >= len(space):  # a table coordinate of the edge
                terms.append(f"q{a - len(space)}" if x == 1 else f"q{a - len(space)} * {x}")
            elif x:
                stride = math.prod(space[a + 1 :])
                if rows and a == len(space) - 1:
                    c = "j"
                else:
                    start = "(i - j)" if rows else at
                    c = start if stride == 1 else f"({start} / {stride})"
                    c = c if a == 0 else f"({c} % {space[a]})"
                terms.append(c if x == 1 else f"{c} * {x}")
        return f"({' + '.join(terms)})" if len(terms) > 1 else (terms[0] if terms else "0")

    def epilogue(self, results: dict[str, str]) -> list[str]:
        """Statements computing and storing the epilogue outputs at output ``o`` from the
        finished reductions (``results``: root -> its C++ variable)."""
        saved, self.lines, self.at_output = self.vars, [], True
        uses_big = self.uses_big
        self.vars = {(r, flat_index(self.nest.after_shape)): var for r, var in results.items()}
        for v in self.nest.after:
            var = self.value(v)
            check = self.nonfinite(v, var)
            self.lines.append(f"{self.param(v)}[o] = {var};{' ' + check if check else ''}")
        lines, self.vars, self.lines, self.at_output = self.lines, saved, [], False
        self.uses_big = uses_big  # the element loop's rerun logic is not the epilogue's concern
        if not lines:
            return lines
        return ["{ " + PRECISE_TRIG, *("    " + s for s in lines), "}"]  # once per output

    def value(self, name: str, coords: Coords | None = None, operands: list[tuple[str, Coords]] | None = None) -> str:
        """The C++ variable of ``name`` at ``coords`` (default: where it broadcasts to the
        current element); each (value, flat offset) is computed once. ``operands``: an
        elementwise member's, already evaluated (`_operands_first`)."""
        space, shape, ext = self.space(), tuple(self.graph.types[name].shape), self.ext()
        coords = sites.identity(shape, space) if coords is None else coords
        if coords is None:  # cover's walk proved every seed broadcasts to its space
            raise ContractError(f"C++ kernel {self.kernel}: value {name!r} of shape {list(shape)} is not in {space}")
        key = (name, offset(coords, shape, ext))
        if key in self.vars:
            return self.vars[key]
        if sites.reads_memory(self.graph, self.nest.group.nodes, name):
            self.vars[key] = self.load(*key)
            return self.vars[key]
        node = self.graph.node_map[name]
        op = node.opdef
        if op.kind == "elementwise" and operands is None:
            operands = self._operands_first(name, coords)
        mapped = self.ends and self.nest.mapped_ends  # the row ends through the guarded axes' tables
        if op.axis_images is not None and (self.edge or self.at_output or mapped):  # epilogues: no interior split
            var = self._images(node, coords)
        elif op.gather_affine is not None:
            var = gathers.element(self, node, coords)
        elif sparse.is_sparse(op):  # a constant sparse map: its row loop (`sparse`)
            var = sparse.row_sum(self, node, coords)
        elif scatter.is_scatter(op):  # a scatter's root: base plus its CSR row (`scatter`)
            var = scatter.row_sum(self, node, coords)
        else:
            rows = None if self.edge or self.at_output else self._row_image
            found = operands or sites.children(
                self.graph, node, coords, ext, [], self._fresh, len(self.space()), self.nest.digits, rows,
                self.nest.group.nodes,
            )
            if found is None:  # cover walked the same coordinates
                raise ContractError(f"C++ kernel {self.kernel}: {name!r} cannot be read at {coords}")
            args = tuple(self.value(i, c) for i, c in found)
            if op.kind == "elementwise":
                var = self._element(node, args, coords)
            elif op.weights is not None:
                var = self._taps(node, args)
            elif op.join_axis is not None:
                var = self._select(node, coords, args)
            elif op.axis_images is not None:  # its interior read (its row images' sum), selects' fill
                var = self._interior_view(node, coords, args)
            else:  # a view: the element it reads
                var = args[0]
        self.vars[key] = var
        return var

    def _operands(self, name: str, coords: Coords) -> list[tuple[str, Coords]] | None:
        """The (operand, coordinates) elementwise member ``name`` reads at ``coords``, as
        `value` finds them (`sites.children`; an elementwise node makes no new coordinates)."""
        return sites.children(self.graph, self.graph.node_map[name], coords, self.ext(), [], None)

    def _pending(self, name: str, coords: Coords) -> bool:
        """Whether ``name`` at ``coords`` is an elementwise member not evaluated yet."""
        node = self.graph.node_map.get(name)
        if node is None or name not in self.nest.group.nodes or node.opdef.kind != "elementwise":
            return False
        return (name, offset(coords, tuple(self.graph.types[name].shape), self.ext())) not in self.vars

    def _operands_first(self, name: str, coords: Coords) -> list[tuple[str, Coords]] | None:
        """Evaluate the operands of elementwise member ``name`` at ``coords``, and theirs, with
        an explicit stack instead of `value`'s recursion (a chain of elementwise members is as
        deep as its kernel is long): post-order, operands left to right, so every value is
        defined where the recursion would define it and the text is the same. Other members
        met on the way are `value`'s (their own operands go through here again). Returns
        ``name``'s operands (None where it cannot be read there: `value` reports it)."""
        first = self._operands(name, coords)
        if first is None:
            return None
        stack: list[tuple[str, Coords, list[tuple[str, Coords]], int]] = [(name, coords, first, 0)]
        while stack:
            n, c, operands, k = stack[-1]
            if k == len(operands):
                stack.pop()
                if stack:  # the first node is `value`'s own, evaluated when this returns
                    self.value(n, c, operands)
                continue
            stack[-1] = (n, c, operands, k + 1)
            child, at = operands[k]
            if not self._pending(child, at):
                self.value(child, at)  # cached, read from memory, or not elementwise
                continue
            found = self._operands(child, at)
            if found is None:
                self.value(child, at)
            else:
                stack.append((child, at, found, 0))
        return first

    def _element(self, node: Any, args: tuple[str, ...], coords: Coords) -> str:
        op, name = node.opdef, node.name
        attrs = op.parse_attrs(node.attrs, name)
        in_types = tuple(C_TYPES[self.graph.types[i].dtype] for i in node.inputs)
        out_t = C_TYPES[node.type.dtype]
        fmt = {"T": out_t, **{f"T{k}": t for k, t in enumerate(in_types)}}
        site = CxxSite(attrs, args, out_t, in_types, tuple(node.type.shape), tuple(self.render(c) for c in coords))
        expr = op.cxx(site) if callable(op.cxx) else op.cxx.format(*args, **fmt)
        self.uses_big = self.uses_big or "big" in expr
        if op.cxx_domain and self.checks:
            detail = str(getattr(attrs, "message", ""))
            self.lines.append(self.flag(name, op.name, "domain", f"!({op.cxx_domain.format(*args, **fmt)})", detail))
        return self.define(C_TYPES[node.type.dtype], expr)

    def define(self, c_type: str, expr: str) -> str:
        """A new C++ constant of ``c_type`` holding ``expr``, appended to the element code; its name."""
        var = f"v{len(self.vars)}_{len(self.lines)}"
        self.lines.append(f"const {c_type} {var} = {expr};")
        return var

    def _fresh(self, form: Affine, n: int, cxx: Callable[[str], str]) -> Affine:
        return self.variable(cxx(self.render(form)), n)

    def _row_image(self, node: str, axis: int, form: Affine, ax: Any, n: int) -> tuple[Affine, ...] | None:
        """The coordinates of the row image's slots the nest's walk found there (`row_images`), if any."""
        found = self.nest.row_images.lookup(node, axis, form, ax) if self.nest.row_images else None
        return None if found is None else tuple(idx.axis(r.coord, r.coord + 1) for r in found)

    def _select(self, node: Any, coords: Coords, args: tuple[str, ...]) -> str:
        """A join: the input whose range along the axis holds the element (each input was
        read at its clamped local index, so every read is in bounds)."""
        at = self.render(coords[sites.join_axis(node)])
        ranges = sites.join_ranges(self.graph, node)
        expr = args[-1]
        for (_, lo, n), a in zip(reversed(ranges[:-1]), reversed(args[:-1]), strict=True):
            expr = f"(({at}) < {lo + n} ? {a} : {expr})"
        return self.define(C_TYPES[node.type.dtype], expr)

    def _interior_view(self, node: Any, coords: Coords, reads: tuple[str, ...]) -> str:
        """A per-axis view in the element function: the input at the interior shift, or the
        fill where a selected axis (`sites.selected`, no guard of its own) is outside its
        interior. Its row images' slots (`row_images`: ``reads`` holds one read per combination
        of them) are summed where the row has them, as `_images` sums an index's images (in
        order, float64 for float32); a row with none reads the fill."""
        in_shape = tuple(self.graph.types[node.inputs[0]].shape)
        conds = []
        for c, lo, hi in sites.selects(node, coords, in_shape):
            at = self.render(c)
            conds.append(f"{lo} <= ({at}) && ({at}) <= {hi}")
        has = self._has_images(node, coords, in_shape)
        ends = self._in_interior(node, coords, in_shape) if self.ends else []
        out_t = C_TYPES[node.type.dtype]
        fill = cxx_literal(sites.image_map(node, in_shape).fill, out_t)
        if len(reads) == 1:
            conds += has[0] + ends
            return self.define(out_t, f"({' && '.join(conds)}) ? {reads[0]} : {fill}") if conds else reads[0]
        acc = "double" if out_t in CXX_FLOATS else out_t
        var = f"s{len(self.vars)}_{len(self.lines)}"
        first, cond = f"({acc}){reads[0]}", " && ".join(has[0])
        self.lines.append(f"{acc} {var} = ({cond}) ? {first} : ({acc}){fill};" if cond else f"{acc} {var} = {first};")
        for flags, v in zip(has[1:], reads[1:], strict=True):
            cond = " && ".join(["S", *flags])  # a later slot: only in a row that sums (`drivers.row_class`)
            self.lines.append(f"{var} = ({cond}) ? {var} + ({acc}){v} : {var};" if cond else f"{var} += ({acc}){v};")
        total, conds = f"({out_t}){var}", conds + ends
        return self.define(out_t, f"({' && '.join(conds)}) ? {total} : {fill}" if conds else total)

    def _has_images(self, node: Any, coords: Coords, in_shape: tuple[int, ...]) -> list[list[str]]:
        """Per combination of the view's row-image slots at ``coords`` (`row_images`, in the
        order `sites.children` reads them; one combination without any), the row's flags of
        having each slot's image (``rb`` past the row reads): a slot every index has needs none."""
        if self.nest.row_images is None:
            return [[]]
        m = sites.image_map(node, in_shape)
        base = len(self.nest.row_reads)
        images = {r.coord: k for k, r in enumerate(self.nest.images)}
        per_axis: list[list[str | None]] = []
        for d, (c, ax) in enumerate(zip(sites.per_axis(node, coords), m.axes, strict=False)):
            found = None if ax.plain else self.nest.row_images.lookup(node.name, d, c, ax)
            if found is not None:
                per_axis.append([None if r.has_all(ax) else f"rb[{base + 2 * images[r.coord]}]" for r in found])
        return [[f for f in combo if f] for combo in itertools.product(*per_axis)]

    def _in_interior(self, node: Any, coords: Coords, in_shape: tuple[int, ...]) -> list[str]:
        """At a row end (`row_ends`): per guarded axis of the view (neither a row image nor a
        select, nor read in its interior only), the condition of the element being in it."""
        m, out = sites.image_map(node, in_shape), []
        for d, (c, ax, n) in enumerate(zip(sites.per_axis(node, coords), m.axes, in_shape, strict=False)):
            lo, hi = c.bounds(self.ext())
            if ax.plain or sites.selected(ax, n) or ax.lo <= lo <= hi <= ax.hi:
                continue
            if self.nest.row_images is not None and self.nest.row_images.lookup(node.name, d, c, ax):
                continue
            at = self.render(c)
            out.append(f"{ax.lo} <= ({at}) && ({at}) <= {ax.hi}")
        return out

    def _taps(self, node: Any, args: tuple[str, ...]) -> str:
        """sum_t w[t] * x[at + t] over the non-zero taps in row-major order, accumulated in
        float64 for float32 data (as the reference), rounded once; weights are literals.
        ``accumulate="dtype"`` on float32 data: the ordered chain ``w0 * x0`` then one
        ``fmaf`` a tap, weights rounded to float32 (the reference's `_fma_chain`; explicit
        fmaf, so no compiler contracts or reorders it on either device). A float32 stencil
        whose weights are a mirrored line pairs its taps instead (`_mirror_taps`)."""
        out_t = C_TYPES[node.type.dtype]
        weights = [w for _, w in sites.taps(self.graph, node)]
        if out_t == "float" and sites.tap_accumulation(node) == "dtype":
            s = self.define(out_t, f"(float){weights[0].hex()} * {args[0]}")
            for w, a in zip(weights[1:], args[1:], strict=True):
                s = self.define(out_t, f"fmaf((float){w.hex()}, {a}, {s})")
            return s
        mirror = sites.mirrored(node) if out_t == "float" else None
        if mirror is not None and mirror[0].axis == node.type.ndim - 1:
            return self._mirror_taps(*mirror, args)
        acc = "double" if out_t in CXX_FLOATS else out_t
        terms = [f"{w.hex()} * ({acc}){a}" for w, a in zip(weights, args, strict=True)]
        return self.define(out_t, f"({out_t})({' + '.join(terms)})")

    def _mirror_taps(self, m: MirrorSum, at: dict[int, int], args: tuple[str, ...]) -> str:
        """float32 data, a symmetric or antisymmetric line of taps along the last axis
        (`sites.mirrored`): in double, the centre's product, then from the outermost pair in
        one FMA of the pair's sum (or difference) and its weight, rounded once to float: an
        add and an FMA a pair where the row-major chain has a multiply and an add each tap
        (docs/backend.md: a 13-tap pass along rows at 1024², 1.08 -> 0.85 ms). Not along
        another axis (a pass down the columns of two blurs in one loop measured slower, 2.85 ->
        3.2 ms), nor for float64 data (slower too). The reference sums the same pairs in the
        same order without the FMA (`dpt_ir.ir.mirror`). ``args`` are the non-zero taps' reads
        in row-major order, ``at`` their flat tap positions' indices in it."""
        op = "+" if m.sign > 0 else "-"
        s = None
        if m.centre is not None:
            s = self.define("double", f"{m.centre[1].hex()} * (double){args[at[m.centre[0]]]}")
        for lo, hi, w in m.pairs:
            pair = self.define("double", f"(double){args[at[lo]]} {op} (double){args[at[hi]]}")
            s = self.define("double", f"{pair} * {w.hex()}" if s is None else f"dp_fma_d({pair}, {w.hex()}, {s})")
        return self.define("float", f"(float)({s if s is not None else '0.0'})")

    def _images(self, node: Any, coords: Coords) -> str:
        """A per-axis view at any element (the edge): per axis, the input indices of the
        output index come from a constant table (a variable each); the images are summed
        in order (float64 for float32), an element with none is the fill value. At mapped
        row ends (`row_ends`), an axis that is a row image reads its slots and one read in
        its interior at every element its shift: the same images in the same order."""
        m = sites.image_map(node, tuple(self.graph.types[node.inputs[0]].shape))
        in_shape = tuple(self.graph.types[node.inputs[0]].shape)
        per_axis: list[list[tuple[Affine, str | None]]] = []
        for d, (c, ax) in enumerate(zip(coords, m.axes, strict=True)):
            lo, hi = c.bounds(self.ext())
            if ax.plain or (self.ends and in_shape[d] > 1 and ax.lo <= lo <= hi <= ax.hi):
                per_axis.append([(c.shifted(ax.shift), None)])
                continue
            slots = self._slots(node.name, d, c, ax) if self.ends else None
            if slots is not None:
                per_axis.append(slots)
                continue
            width = ax.tables.width
            table, counts = self._table(f"{node.name}:{d}", ax)
            at = self.render(c)
            opts = []
            for k in range(width):
                # An input axis of length 1 is read at 0, as the interior walk reads it (`sites.children`).
                table_q = f"{table}[{at} * {width} + {k}]"
                q = self.variable(table_q, in_shape[d]) if in_shape[d] > 1 else idx.zero(len(self.ext()))
                always = ax.tables.least > k
                opts.append((q, None if always else f"({counts}[{at}] > {k})"))
            per_axis.append(opts)
        out_t = C_TYPES[node.type.dtype]
        terms = []
        for combo in itertools.product(*per_axis):
            conds = [c for _, c in combo if c]
            terms.append((" && ".join(conds), self.value(node.inputs[0], tuple(f for f, _ in combo))))
        fill = cxx_literal(m.fill, out_t)
        if len(terms) == 1:
            cond, v = terms[0]
            return self.define(out_t, f"({cond}) ? {v} : {fill}" if cond else v)
        if not terms:
            return self.define(out_t, fill)
        acc = "double" if out_t in CXX_FLOATS else out_t
        var = f"s{len(self.vars)}_{len(self.lines)}"
        cond, v = terms[0]
        self.lines.append(f"{acc} {var} = " + (f"({cond}) ? ({acc}){v} : ({acc}){fill};" if cond else f"({acc}){v};"))
        for cond, v in terms[1:]:
            self.lines.append(f"{var} = ({cond}) ? {var} + ({acc}){v} : {var};" if cond else f"{var} += ({acc}){v};")
        return self.define(out_t, f"({out_t}){var}")

    def _slots(self, node: str, axis: int, form: Affine, ax: Any) -> list[tuple[Affine, str | None]] | None:
        """A row image's slots (`row_images`) as `_images`' options: each slot's coordinate
        and, unless every index has it, its row's flag (a later slot also needs the row class
        that sums: ``S``)."""
        found = self.nest.row_images.lookup(node, axis, form, ax) if self.nest.row_images else None
        if found is None:
            return None
        base, number = len(self.nest.row_reads), {r.coord: k for k, r in enumerate(self.nest.images)}
        out: list[tuple[Affine, str | None]] = []
        for r in found:
            flags = [*(["S"] if r.slot else []), *([] if r.has_all(ax) else [f"rb[{base + 2 * number[r.coord]}]"])]
            out.append((idx.axis(r.coord, r.coord + 1), f"({' && '.join(flags)})" if flags else None))
        return out

    def _table(self, key: str, ax: Any) -> tuple[str, str]:
        """Constant tables of an axis's images (``width`` per index, unused slots 0) and of
        their counts (axis ``key``: node and axis), defined once per kernel (named under the
        kernel's hashed name), or, past `gathers.TABLE_MAX` elements, launch constants
        (``$images:<key>``, ``$counts:<key>``): a table the size of a large field would
        otherwise be megabytes of C++ on every build of the module."""
        names = []
        tables = (("images", ax.tables.images), ("counts", ax.tables.counts))
        for kind, values in tables:
            if len(values) > gathers.TABLE_MAX:
                param = f"${kind}:{key}"
                self.constants[param] = ("int32", np.asarray(values, dtype=np.int32))
                names.append(self.param(param))
                continue
            text = ", ".join(map(str, values or [0]))
            if text not in self.tables:
                self.tables[text] = f"{TOKEN}_t{len(self.tables)}"
            names.append(self.tables[text])
        return names[0], names[1]

    def variable(self, expr: str, extent: int) -> Affine:
        """A new coordinate (an index from a table, in [0, extent)) of the edge's forms."""
        q = len(self.extra)
        self.extra.append(extent)
        self.lines.append(f"const int q{q} = {expr};")
        return idx.axis(len(self.space()) + q, len(self.ext()))

    def table_definitions(self) -> list[str]:
        return [f"DP_CONST int {name}[] = {{{values}}};" for values, name in self.tables.items()]

    def edge_body(self) -> list[str]:
        """Statements of the edge function (per-axis views through their images, valid at
        every element), after `body`: the same parameters and status slots."""
        self.vars, self.lines, self.edge, self.extra = {}, [], True, []
        lines = self.body()
        self.vars, self.lines, self.edge, self.extra = {}, [], False, []
        return lines

    def ends_body(self) -> list[str]:
        """Statements of the row ends' function (`row_ends`), after `body`: the element
        function with each moving read clamped into its row and each constant pad's select."""
        self.vars, self.lines, self.ends = {}, [], True
        lines = self.body()
        self.vars, self.lines, self.ends = {}, [], False
        return lines

    def body(self) -> list[str]:
        """Statements of the element function: the reduction inputs, then the stores.

        A root whose input is a parameter read at element ``i`` gets no out-parameter: it goes
        to `direct` (q -> the parameter), and the drivers' lane and column loops read the
        array itself (``direct`` of `drivers.reduction_drivers` and `columns.column_drivers`),
        so the element loop copies nothing into a block buffer (clang made that copy a
        ``memcpy`` call per block: 13% of softmax_xent's step). Not with guards (the edge
        function reads through image tables)."""
        direct_ok, self.loads = not self.nest.guards, {}
        interior = not self.edge and self.nest.row_images is not None
        if interior:  # the row images' indices: coordinates past the space (`row_images`)
            self.extra = [r.extent for r in self.nest.images]
            base = len(self.nest.row_reads)
            self.lines += [f"const int q{m} = rb[{base + 2 * m + 1}]; (void)q{m};" for m in range(len(self.extra))]
        for q, root in enumerate(self.nest.roots):
            var = self.value(self.graph.node_map[root].inputs[0])
            if direct_ok and var in self.loads:
                self.direct[q] = self.loads[var]
            else:
                self.lines.append(f"y{q} = {var};")
        for v in self.nest.stores:
            var = self.value(v)
            check = self.nonfinite(v, var)
            self.lines.append(f"if (W) {{ {self.param(v)}[i] = {var};{' ' + check if check else ''} }}")
        if interior:
            self.extra = []
        return self.lines


def element_functions(nest: Nest, sig: str, ys: str, bodies: dict[str, list[str] | None]) -> list[str]:
    """The definitions of a nest's element functions (``elem``, and ``edge`` / ``ends`` where
    given): templates over ``P`` (trig's precise path) and ``W`` (stores written), taking the
    unit's parameters ``sig``, the element ``i``, the inner counter ``j``, the row bases ``rb``,
    the huge-trig flag, the status flags and the roots' out-parameters ``ys``."""
    ix = nest.index
    head = f"({sig}, {ix} i, {ix} j, const {ix}* rb, bool& big, bool* fl{ys}) {{"
    out: list[str] = []
    for fn, lines in bodies.items():
        if lines is not None:
            macro = "DP_COLD" if fn == "edge" else "DP_FN"
            # S: whether the row images' later slots and CSR entries are summed (`drivers.row_class`).
            summed = ", bool S = true" if nest.classed and fn != "edge" else ""
            out += [f"template <bool P, bool W{summed}>", f"{macro} void {TOKEN}_{fn}{head}"]
            out += ["    (void)i; (void)j; (void)rb; (void)big; (void)fl;", *("    " + s for s in lines), "}"]
    return out

"""C++ drivers around a covered group's element function: a vectorised CPU driver, a CUDA
driver, and the ordered combine of reduction partials.

Assumes: a `Nest` from `dpt_ir.backends.cxx.nest.cover` and the element function that
`ElementWriter` wrote for it, with the signature ``elem<P, W>(a0.., i, j, rb, big, fl, y0..)``
(an out-parameter ``y<q>`` for each root whose input the element function computes; a root
whose input is a parameter read at element ``i`` has none: `ElementWriter.direct`).
Guarantees:

- A launch runs tasks ``t`` of a partition fixed by the shapes and the device (`Layout`),
  never by the thread count: pointwise groups cut the flat space into chunks; reductions give
  each task whole rows, or, for one output, a chunk of its row and a partial per task. An
  output's row is its reduced elements in order: for non-adjacent reduced axes, sub-rows
  found through the nest's row map (`rowmap`), whose flat index and row bases are computed
  once per sub-row.
- CPU: element loops (each after ``DP_VEC_LOOP``, empty unless a build defines a loop
  pragma there: the vectorisation guard's scalar build) carry no floating-point state. Elements go through blocks of
  `Target.block`, computed reduction inputs into stack buffers (an input read as it is:
  straight from its array), then into 8 lanes fixed by the element's
  position (`LanePass`; the loop over the 8 lanes is the vectorised one), merged in a fixed tree;
  status flags are ``bool`` ORs (see `kernels.group_kernels`). A block in which a
  trig argument was huge (``big``) is recomputed with the precise functions (``P``).
- CUDA: one element per thread for pointwise groups; a reduction thread with partials folds
  the positions ``p, p + parts, ...`` of its row (consecutive threads read consecutive
  elements) into the same lanes, element by element, lane = iteration mod 8; the partials
  of an output are combined in order by the final kernel (both devices; on CUDA in two fixed
  levels past `Target.combine_group` partials, `kernels._combine_kernel`), so a result is the
  same for any thread count.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from dpt_ir.backends.base import Target
from dpt_ir.backends.cxx import row_images
from dpt_ir.backends.cxx.common import INDEX_LIMIT
from dpt_ir.backends.cxx.nest import Nest, reads_past
from dpt_ir.ir.registry import LanePass


@dataclass(frozen=True)
class Layout:
    """How a group's elements map onto launch indices: ``chunk`` flat elements per task
    (pointwise); for reductions ``parts`` partials per output (> 1: on the CPU chunks of
    ``chunk`` reduced elements, on CUDA the positions ``p + k parts``; combined by a final
    kernel) or ``rows`` whole rows per task."""

    dim: int
    chunk: int
    parts: int = 1
    rows: int = 1


@dataclass(frozen=True)
class DriverSpec:
    """What every driver of one kernel shares; the drivers' per-call values (an element's
    index expression, its out-parameters, the row counter) stay their own arguments."""

    nest: Nest
    """The covered group (`nest.cover`): space, reads, roots, guards."""
    layout: Layout
    """How the group's elements map onto launch tasks."""
    target: Target
    """The device: its `Target.block` is the CPU driver's element block."""
    args: str
    """The C++ argument list passing the kernel's parameters to the element function."""
    sig: str
    """The drivers' C++ parameter list (the unit's parameters, the status word, its base, ``t``)."""
    uses_big: bool
    """Whether the element function takes trig's fast path and may ask for a precise rerun."""
    nflags: int
    """The status flags the element function raises (0: none)."""
    checks: bool
    """Whether raised flags are stored into the status array."""
    x_types: tuple[str, ...] = ()
    """The C++ input type of each reduction root, by root position."""
    finish: tuple[str, ...] = ()
    """Reductions: the statements after a unit's passes (finalize and store, or store partials)."""
    strided: bool = True
    """Reductions with partials: CUDA threads stride by the parts (False: a row kernel's stage)."""
    direct: Mapping[int, str] = field(default_factory=dict)
    """The roots whose input is a parameter read at the element (`ElementWriter.direct`)."""

    @property
    def nf(self) -> int:
        """The length of the flag arrays: at least 1, so that C++ declares them."""
        return max(self.nflags, 1)


def layout(nest: Nest, target: Target) -> Layout:
    """The layout of ``nest`` on ``target``: CPU tasks of `Target.cpu_task` elements (rows,
    or chunks of one output's row); CUDA: one element or row per thread, a long row split
    into `Target.partial_count` partials."""
    task = target.cpu_task
    if not nest.roots:
        # CUDA: one element per thread, or, past 32-bit task indices, the fewest per thread that fit them.
        chunk = task if target.kind == "cpu" else -(-nest.size // INDEX_LIMIT)
        return Layout(-(-nest.size // chunk), chunk)
    count, n_out = nest.inner, nest.rows
    if target.kind == "cpu":
        parts = -(-count // task) if n_out == 1 else 1
        rows = max(1, task // max(count, 1))
    else:
        parts, rows = target.partial_count(n_out, count), 1
    if parts > 1:
        return Layout(n_out * parts, -(-count // parts), parts)
    return Layout(-(-n_out // rows), count, 1, rows)


def c_min(a: str, b: str | int) -> str:
    """C++ of the smaller of ``a`` and ``b``."""
    return f"(({a}) < ({b}) ? ({a}) : ({b}))"


def row_bases(nest: Nest, row: str, p: str = "") -> list[str]:
    """Statements setting ``rb[k]``, the base offset of each row read in row ``row``, after
    the row images' entries (`row_images.statements`: each image's index, and whether it has
    one, in ``rb`` past the reads), and, with guards, ``glo`` / ``ghi``: the row's interior
    ``[glo, ghi)`` of positions in it. ``p`` prefixes the names declared (``<p>rb``,
    ``<p>glo``, ``<p>ghi``, ``<p>rs``): a second row's bases beside the first's (`flat_rows`)."""
    rows = nest.row_reads
    classes = [f"bool {p}rs = false; (void){p}rs;"] if nest.classed else []
    if not rows and not nest.guards and not nest.images:
        return _csr_class(nest, row, p, classes)
    ix, rb = nest.index, f"{p}rb"
    size = max(len(rows) + 2 * len(nest.images), 1)
    out = [f"{ix} {rb}[{size}];", f"{ix} {p}glo = 0, {p}ghi = 0;", *classes]
    out.append(f"{{ {ix} q = {row};")
    for a in reversed(range(len(nest.base_outer))):
        out.append(f"const {ix} c{a} = q % {nest.base_outer[a]}; q /= {nest.base_outer[a]};")
    out.append("(void)q;")
    out += row_images.statements(nest.images, len(nest.space), len(rows), ix, rb)
    out += [f"{p}rs = {' || '.join(f'{rb}[{k}]' for k in nest.summed)};"] if nest.summed else []
    out = _csr_class(nest, row, p, out)
    for k, r in enumerate(rows):
        terms = [*([str(r.offset)] if r.offset else []), *(f"c{a} * {s}" for a, s in enumerate(r.strides) if s)]
        terms += [f"q{m} * {x}" if x != 1 else f"q{m}" for m, x in enumerate(r.images) if x]
        out.append(f"{rb}[{k}] = {' + '.join(terms) or '0'};")
    return out + (_interior(nest, p) if nest.guards else []) + ["}"]


def _interior(nest: Nest, p: str = "") -> list[str]:
    """``glo``, ``ghi`` (prefixed by ``p``) from the guards (lo <= form <= hi over the outer
    coordinates ``c<a>`` and the position in the row): a guard without the position decides
    the whole row, one with it (weight +-1) bounds the range, any other makes the row an edge."""
    last = len(nest.space) - 1
    out = [f"int ok = 1, lo = 0, hi = {nest.sub};"]
    for form, lo, hi in nest.guards:
        w = form.padded(last + 1).w
        rest = " + ".join([str(form.b), *(f"c{a} * {x}" for a, x in enumerate(w[:last]) if x)])
        u = w[last]
        if reads_past(form, last + 1):  # the coordinate of a join's input: decided per element
            out.append("ok = 0;")
        elif u == 0:
            out.append(f"ok &= (int)({lo} <= {rest} && {rest} <= {hi});")
        elif u in (1, -1):
            if u == 1:
                first, stop = f"{lo} - ({rest})", f"{hi} - ({rest}) + 1"
            else:
                first, stop = f"{rest} - {hi}", f"{rest} - {lo} + 1"
            out += [f"lo = {_max('lo', first)};", f"hi = {c_min('hi', stop)};"]
        else:
            out.append("ok = 0;")
    out.append(f"if (ok && lo < hi) {{ {p}glo = lo; {p}ghi = hi; }}")
    return out


def _max(a: str, b: str) -> str:
    return f"(({a}) > ({b}) ? ({a}) : ({b}))"


# The most elements of a group with bounded per-axis views (pads: a stencil) whose element
# loops take `DP_BOUNDED_LOOP` (two vectors in flight) instead of `DP_VEC_LOOP` (four). Below,
# the loop is bound by its registers (a value and its float64 image per tap and vector; four
# in flight spill); above, by memory, where four in flight hide more latency. Measured
# (2026-12-04, one thread, thread time, A/B in separate processes): the wave's forward, 128²
# 4.80-4.85 -> 4.49 ms and 256² 14.0-14.5 -> 13.2 ms, its value_and_grad at 128² 19.4-20.0 ->
# 17.3 ms; the imaging case's forward (a 13-tap blur) at 512² the same either way (1.12-1.16 ms),
# at 1024² 4.08-4.10 -> 4.33 ms with two in flight, hence the bound.
BOUNDED_MOST = 1 << 19
# The fewest nodes of a group whose element loops take `DP_LARGE_LOOP` (two vectors in flight)
# instead of `DP_VEC_LOOP` (four): four copies of a large body spill (dp_math.h). Measured
# (2026-12-08, one thread, min of 50): the 256² registration step's fused kernel, 281 nodes
# (order 3), 0.387 -> 0.363 ms with two; 86 nodes (order 1), 0.094 ms with four, 0.104 with two.
LARGE_BODY = 200


def _csr_class(nest: Nest, row: str, p: str, out: list[str]) -> list[str]:
    """``out`` then, for a scatter nest with a CSR row check (`Nest.csr_row`), ``<p>rs`` also
    set where row ``row``'s outputs have a CSR entry: its outputs ``o0 .. o0 + inner - 1``
    are consecutive, so the offsets there differ iff one has an entry."""
    if nest.csr_row is None:
        return out
    offsets, o = nest.csr_row
    at = f"{p}csr_o({row} * {nest.inner}, 0)"
    return [
        *out,
        f"const auto {p}csr_o = [&](int i, int j) {{ (void)i; (void)j; return {o}; }};",
        f"{p}rs = {p}rs || {offsets}[{at}] < {offsets}[{at} + {nest.inner}];",
    ]


def _split(nest: Nest, s0: str, s1: str, off: str, interior: str, edge: str) -> list[str]:
    """The loop ``for j in [s0, s1)``: interior positions (``[glo, ghi) + off``) run
    ``interior`` (vectorised), the others ``edge``; without guards, all ``interior``. With
    summed row images or CSR rows, per row class (`row_class`)."""
    if nest.classed:
        single = _loops(nest, s0, s1, off, *_unsummed(interior, edge))
        return row_class(_loops(nest, s0, s1, off, interior, edge), single)
    return _loops(nest, s0, s1, off, interior, edge)


def row_class(summed: list[str], single: list[str]) -> list[str]:
    """The loops of a row with summed row images or CSR entries (``rs``: a later slot is set
    in this row, `Nest.summed`, or an output of the row has a scatter entry, `Nest.csr_row`)
    and of one without: the element functions' instance ``S = false`` drops the sums, which
    would otherwise be computed and discarded at every element of every row (a pad's adjoint
    sums two images at its first and last rows only), and a scatter's loop over its entries,
    which keeps the whole row from vectorising (a point source touches one row of a field)."""
    return ["if (rs) {", *("    " + s for s in summed), "} else {", *("    " + s for s in single), "}"]


def _unsummed(*calls: str) -> tuple[str, ...]:
    """The calls of the element and row ends' functions with ``S = false``."""
    return tuple(re.sub(r"F_(elem|ends)<([^<>]*)>\(", r"F_\1<\2, false>(", c) for c in calls)


def _loops(nest: Nest, s0: str, s1: str, off: str, interior: str, edge: str) -> list[str]:
    vec = "DP_BOUNDED_LOOP" if (nest.guards or nest.images) and nest.size <= BOUNDED_MOST else _vec_loop(nest)
    if not nest.guards:
        return [f"{vec} for ({nest.index} j = {s0}; j < {s1}; ++j) {interior}"]
    return [
        f"{{ const int ilo = {c_min(_max(s0, f'glo + {off}'), s1)}, ihi = {_max('ilo', c_min(s1, f'ghi + {off}'))};",
        f"DP_SCALAR_LOOP for (int j = {s0}; j < ilo; ++j) {edge}",
        f"{vec} for (int j = ilo; j < ihi; ++j) {interior}",
        f"DP_SCALAR_LOOP for (int j = ihi; j < {s1}; ++j) {edge} }}",
    ]


def _vec_loop(nest: Nest) -> str:
    """The pragma of an element loop: `DP_LARGE_LOOP` (two vectors in flight) for a body of at
    least `LARGE_BODY` nodes, `DP_VEC_LOOP` (four) otherwise."""
    return "DP_LARGE_LOOP" if len(nest.group.nodes) >= LARGE_BODY else "DP_VEC_LOOP"


def _rb(nest: Nest) -> str:
    rb = any(r.mode == "row" for r in nest.reads.values()) or nest.guards or nest.images
    return "rb" if rb else f"(const {nest.index}*)0"


def _call(spec: DriverSpec, p: str, w: str, i: str, j: str, flags: str, ys: list[str], fn: str = "elem") -> str:
    extra = "".join(f", {y}" for y in ys)
    return f"F_{fn}<{p}, {w}>({spec.args}, {i}, {j}, {_rb(spec.nest)}, big, {flags}{extra});"


def _ends(nest: Nest) -> str:
    """The element function of the CPU's row ends (outside the interior split's range): the
    inlined ends function where the nest has one (`row_ends`), else the edge function."""
    return "ends" if nest.ends is not None or nest.mapped_ends else "edge"


def _anywhere(nest: Nest) -> str:
    """The element function valid at every element: the edge one when there are guards."""
    return "edge" if nest.guards else "elem"


def cuda_element(spec: DriverSpec, w: str, i: str, j: str, ys: list[str]) -> list[str]:
    """One element (CUDA) at index ``i``, inner counter ``j`` (``w``: whether stores are
    written; ``ys``: the roots' out-parameters), with its precise recomputation when a trig
    argument was huge."""
    fn, nf = _anywhere(spec.nest), spec.nf
    lines = [f"bool bf[{nf}] = {{false}}; bool big = false;", _call(spec, "false", w, i, j, "bf", ys, fn)]
    if spec.uses_big:
        rerun = _call(spec, "true", w, i, j, "bf", ys, fn)
        lines.append(f"if (big) {{ for (int k = 0; k < {nf}; ++k) bf[k] = false; {rerun} }}")
    lines.append(f"for (int k = 0; k < {nf}; ++k) fl[k] |= bf[k];")
    return lines


def cpu_block(spec: DriverSpec, w: str, i: str, ys: list[str], jr: str = "j", off: str = "0") -> list[str]:
    """One CPU block ``[jb, je)`` of elements at index ``i`` (``w``, ``ys``: as
    `cuda_element`): the element loop (split into interior and edges), rerun precisely if
    needed, flags ORed (``jr``: the inner counter row reads add to their base; ``off``: where
    the row's positions start in ``j``)."""
    nest, nf = spec.nest, spec.nf
    interior = _call(spec, "false", w, i, jr, "bf", ys)
    edge = _call(spec, "false", w, i, jr, "bf", ys, _ends(nest))
    lines = [f"bool bf[{nf}] = {{false}}; bool big = false;", *_split(nest, "jb", "je", off, interior, edge)]
    if spec.uses_big:
        lines.append(f"if (big) {{ for (int k = 0; k < {nf}; ++k) bf[k] = false;")
        scalar = f"DP_SCALAR_LOOP for ({nest.index} j = jb; j < je; ++j) "  # the rare path: compile it cheaply
        lines.append(scalar + _call(spec, "true", w, i, jr, "bf", ys, _anywhere(nest)) + " }")
    lines.append(f"for (int k = 0; k < {nf}; ++k) fl[k] |= bf[k];")
    return lines


def status_stores(spec: DriverSpec) -> list[str]:
    """Statements storing the raised flags ``fl[k]`` into the status array at ``sb``; none
    without checks."""
    if not spec.checks:
        return []
    return [f"for (int k = 0; k < {spec.nf}; ++k) if (fl[k]) st[sb + k] = 1;"]


def pointwise_drivers(spec: DriverSpec, runs: Callable[[DriverSpec, list[str]], list[str]] | None = None) -> str:
    """The CPU and CUDA drivers of a group without reductions: task ``t`` runs its chunk of
    the flat space, row by row (the CPU in blocks of `Target.block` when flags or a precise
    rerun need them). ``runs``: the CPU's loop over the task's rows instead of one row at a
    time, given the statements of one row ``row`` (`flat_rows.cpu_runs`)."""
    nest, lay = spec.nest, spec.layout
    ix = nest.index
    head = [
        f"const {ix} b = {nest.widen('t')} * {lay.chunk}, e = {c_min(f'b + {lay.chunk}', nest.size)};",
        f"bool fl[{spec.nf}] = {{false}};",
    ]
    row = _cpu_row(spec)
    cpu = [*head, *(runs(spec, row) if runs is not None else _cpu_rows(nest, row))]
    cpu += status_stores(spec)
    cuda = [*head, *_cuda_elements(spec)]
    cuda += status_stores(spec)
    return driver_pair(spec.sig, cpu, cuda)


def _cpu_row(spec: DriverSpec) -> list[str]:
    """The CPU statements of row ``row``'s elements in ``[b, e)``, flags ORed into ``fl``."""
    nest, inner, block, ix = spec.nest, spec.nest.inner, spec.target.block, spec.nest.index
    row = [*row_bases(nest, "row"), f"const {ix} j0 = (b > row * {inner}) ? (b - row * {inner}) : 0;"]
    row.append(f"const {ix} j1 = {c_min(f'e - row * {inner}', inner)};")
    if spec.uses_big or spec.nflags:
        row.append(f"for ({ix} jb = j0; jb < j1; jb += {block}) {{ const {ix} je = {c_min(f'jb + {block}', 'j1')};")
        row += cpu_block(spec, "true", f"row * {inner} + j", []) + ["}"]
    else:
        row.append("bool big = false; (void)big;")
        interior = _call(spec, "false", "true", f"row * {inner} + j", "j", "fl", [])
        row += _split(nest, "j0", "j1", "0", interior, interior.replace("F_elem<", f"F_{_ends(nest)}<"))
    return row


def _cpu_rows(nest: Nest, row: list[str]) -> list[str]:
    """The CPU loop over the rows that elements ``[b, e)`` touch, ``row`` the statements of one."""
    ix, inner = nest.index, nest.inner
    return [f"for ({ix} row = b / {inner}; row * {inner} < e; ++row) {{", *row, "}"]


def _cuda_elements(spec: DriverSpec) -> list[str]:
    """The CUDA loop over elements ``[b, e)``, one at a time, flags ORed into ``fl``."""
    nest, ix, inner = spec.nest, spec.nest.index, spec.nest.inner
    cuda = [f"for ({ix} i = b; i < e; ++i) {{", f"const {ix} row = i / {inner}, j = i - row * {inner};"]
    return [*cuda, *row_bases(nest, "row"), *cuda_element(spec, "true", "i", "j", []), "}"]


def range_function(spec: DriverSpec, name: str) -> str:
    """``F_<name>(<spec.sig>, b, e, fl)``: the elements ``[b, e)`` of a pointwise nest, stores
    written and flags ORed into ``fl`` (the caller stores them), by the CPU driver's row loop
    (clang) or the CUDA driver's element loop (NVRTC, and the host build of CUDA drivers): a
    matrix product's epilogue, run on each finished tile (`product_epilogue`)."""
    ix = spec.nest.index
    head = f"DP_FN void F_{name}({spec.sig}, {ix} b, {ix} e, bool* fl) {{"
    cpu = _cpu_rows(spec.nest, _cpu_row(spec))
    cuda = _cuda_elements(spec)
    cpu_fn, cuda_fn = ([head, *("    " + s for s in lines), "}"] for lines in (cpu, cuda))
    return "\n".join(["#ifndef DP_CUDA", *cpu_fn, "#else", *cuda_fn, "#endif"])


def driver_pair(sig: str, cpu: list[str], cuda: list[str]) -> str:
    """The two drivers, each compiled only by its own compiler (clang never parses the CUDA
    one, NVRTC never the CPU one: half the front-end work of a module)."""
    return "\n".join(
        [
            "#ifndef DP_CUDA",
            f"DP_FN void F_cpu({sig}) {{",
            *("    " + s for s in cpu),
            "}",
            "#else",
            f"DP_FN void F_cuda({sig}) {{",
            *("    " + s for s in cuda),
            "}",
            "#endif",
        ]
    )


def subst(nest: Nest, q: int) -> dict[str, str]:
    t = nest.templates[nest.roots[q]]
    out = {"count": str(nest.count), "x": "x", "r": "r"}
    for name, _ in t.state:
        out[f"p_{name}"], out[f"o_{name}"] = f"s{q}_{name}", f"o{q}_{name}"
    for p in t.passes:
        for name, _, _ in p.lanes:
            out[f"l_{name}"], out[f"a_{name}"] = f"ln{q}_{name}", f"ln{q}_{name}[l]"
    return out


def buffered(nest: Nest, direct: Mapping[int, str]) -> list[int]:
    """The roots whose input the element function computes and hands out as ``y<q>`` (into a
    block buffer on the CPU); the others, ``direct`` (`ElementWriter.direct`), are read from
    their array by the lane or column loop."""
    return [q for q in range(len(nest.roots)) if q not in direct]


def _lanes_update(
    nest: Nest,
    q: int,
    p: int,
    x_type: str,
    blocked: bool,
    step: int = 1,
    read: Callable[[str], str] | None = None,
) -> list[str]:
    """The lane update of root ``q`` in pass ``p``: per block (CPU), or per element (CUDA),
    where ``step`` is the stride of the thread's loop and the lane is its iteration count mod 8.
    ``read``: the C++ of the element at a position (``jb + <it>``, CPU; ``j``, CUDA): by
    default block buffer ``q`` (CPU) or the element function's ``y<q>`` (CUDA). A pass with a
    `LanePass.map` maps the block's elements first, into the block buffer ``mb<q>`` its driver
    declares (CPU), or inlines it (CUDA)."""
    lp = nest.templates[nest.roots[q]].passes[p]
    if not blocked:
        update = lp.inlined().format(**subst(nest, q))
        lane = "(j - j0) & 7" if step == 1 else f"((j - j0) / {step}) & 7"
        x = read("j") if read else f"y{q}"
        return [f"{{ const int l = {lane}; const {x_type} x = {x}; const {nest.index} r = j; {update} }}"]
    update = lp.update.format(**subst(nest, q))
    at: Callable[[str], str] = read or (lambda k: f"buf{q}[{k}]")
    if lp.map is not None:
        mapped = lp.map.format(**subst(nest, q))
        fill = f"DP_VEC_LOOP for (int k = 0; k < nb; ++k) {{ const {x_type} x = {at('k')}; mb{q}[k] = {mapped}; }}"
        return [fill, *_lanes_update_at(nest, q, lp, x_type, update, lambda k: f"mb{q}[{k}]")]
    return _lanes_update_at(nest, q, lp, x_type, update, at)


def _lanes_update_at(nest: Nest, q: int, lp: LanePass, x_type: str, update: str, at: Callable[[str], str]) -> list[str]:
    """A CPU block's lane update (`_lanes_update`), its element at block position ``k`` read by ``at``."""
    # The group loop stays scalar and the lane loop is the vector one (DP_LANE_LOOP, dp_math.h):
    # one 8-wide operation per group instead of clang's 4-wide, shuffled group loop.
    lanes = "DP_SCALAR_LOOP for (int k = 0; k < n8; k += 8) DP_LANE_LOOP for (int l = 0; l < 8; ++l) "
    tail = "for (int k = n8; k < nb; ++k) " + (
        f"{{ const int l = k - n8; const {x_type} x = {at('k')}; const {nest.index} r = jb + k; {update} }}"
    )
    if lp.fold is None:
        return [lanes + _group(nest, at, x_type, update), tail]
    return [*_two_sets(nest, q, lp, x_type, update, at), tail]


def _group(nest: Nest, at: Callable[[str], str], x_type: str, update: str, shift: str = "") -> str:
    """Lane ``l``'s element of the group at ``k`` (``shift``: `` + 8``, the next group) of
    the block, read by ``at`` (its position in the block -> C++), folded by ``update``."""
    k = f"k{shift} + l"
    return f"{{ const {x_type} x = {at(k)}; const {nest.index} r = jb + {k}; {update} }}"


def _two_sets(nest: Nest, q: int, lp: LanePass, x_type: str, update: str, at: Callable[[str], str]) -> list[str]:
    """The groups of a block with a `LanePass.fold`: groups ``2g`` into the lanes, ``2g + 1``
    into a second set ``<lane>_b`` (initialised per block), a last odd group into the lanes,
    then the second set folded into the lanes in lane order."""
    first = {f"a_{name}": f"ln{q}_{name}[l]" for name, _, _ in lp.lanes}
    second = {a: v.replace("[l]", "_b[l]") for a, v in first.items()}
    update_b = lp.update.format(**{**subst(nest, q), **second})
    fold = lp.fold.format(**first, **{"b" + a[1:]: v for a, v in second.items()})
    inits = [
        f"{ty} ln{q}_{name}_b[8]; for (int l = 0; l < 8; ++l) ln{q}_{name}_b[l] = {init};"
        for name, ty, init in lp.lanes
    ]
    groups = "DP_LANE_LOOP for (int l = 0; l < 8; ++l) "
    return [
        f"{{ {' '.join(inits)} int k = 0;",
        f"DP_SCALAR_LOOP for (; k + 16 <= n8; k += 16) {groups}"
        f"{{ {_group(nest, at, x_type, update)} {_group(nest, at, x_type, update_b, ' + 8')} }}",
        f"DP_SCALAR_LOOP for (; k < n8; k += 8) {groups}{_group(nest, at, x_type, update)}",
        f"for (int l = 0; l < 8; ++l) {{ {fold} }} }}",
    ]


def _units(nest: Nest, lay: Layout, blocked: bool, strided: bool = True) -> list[str]:
    """The head of a task's unit of work, opening its scope: output ``o`` and the positions
    ``[j0, j1)`` of its row it reads. With partials, the CPU task ``t`` takes part ``p`` as one
    contiguous chunk; the CUDA thread takes positions ``p, p + parts, ...`` (its loop strides
    by ``parts``), so consecutive threads read consecutive elements: coalesced loads; unless
    not ``strided`` (a stage of a row kernel, `rows`: part ``p`` is one row, on both devices)."""
    ix = nest.index
    if lay.parts > 1:
        part = [f"{{ const {ix} o = t / {lay.parts}, p = t - o * {lay.parts};"]
        if not blocked and strided:
            return [*part, f"const {ix} j0 = p, j1 = {nest.inner};"]
        first = f"const {ix} j0 = p * {lay.chunk};"
        return [*part, first, f"const {ix} j1 = {c_min(f'j0 + {lay.chunk}', nest.inner)};"]
    o1 = c_min(f"(t + 1) * {lay.rows}", nest.rows)
    loop = f"for ({ix} o = {nest.widen('t')} * {lay.rows}; o < {o1}; ++o) {{"
    return [loop, f"const {ix} j0 = 0, j1 = {nest.inner};"]


def _sub_row(nest: Nest) -> list[str]:
    """The row bases of sub-row ``sr`` of output ``o``: its row is ``o * per + sr`` when the
    reduced axes are one trailing block, else the row map's (``srow``, `rowmap`)."""
    if nest.row_map is None:
        return row_bases(nest, f"o * {nest.inner // nest.sub} + sr")
    return [*nest.row_map.statements("srow", "o", "sr"), *row_bases(nest, "srow")]


def reduction_drivers(spec: DriverSpec) -> str:
    """The CPU and CUDA drivers of a row reduction. ``spec.finish``: statements after the
    passes of a unit (finalize and store the row's results, or store the task's partials),
    reading ``s<q>_<name>``, ``o`` and ``t``; ``spec.strided``: see `_units`;
    ``spec.direct``: the roots whose input is a parameter read at element ``i``: their lane
    loops read it there, with no block buffer."""
    nest, lay, x_types = spec.nest, spec.layout, spec.x_types
    block, direct, strided = spec.target.block, spec.direct, spec.strided
    nf, ix = spec.nf, nest.index
    npass = max(len(t.passes) for t in nest.templates.values())
    step = lay.parts if lay.parts > 1 and strided else 1  # the CUDA loop's stride: the parts interleave
    whole = nest.sub == nest.inner and nest.row_map is None  # one base per output row (else per sub-row)
    jr = "j" if whole else f"j - sr * {nest.sub}"
    base = f"o * {nest.inner}" if nest.row_map is None else f"(srow - sr) * {nest.sub}"
    i = f"{base} + j"
    computed = buffered(nest, direct)

    def read(q: int, blocked: bool) -> Callable[[str], str] | None:
        if q not in direct:
            return None
        return (lambda k: f"{direct[q]}[{base} + jb + {k}]") if blocked else (lambda j: f"{direct[q]}[{base} + {j}]")

    out = {}
    for blocked in (True, False):
        units = _units(nest, lay, blocked, strided)
        body = [f"bool fl[{nf}] = {{false}};", *units, *(row_bases(nest, "o") if whole else [])]
        for q, root in enumerate(nest.roots):
            body += [f"{ty} s{q}_{name};" for name, ty in nest.templates[root].state]
        for p in range(npass):
            w = "true" if p == npass - 1 else "false"
            active = [q for q, root in enumerate(nest.roots) if p < len(nest.templates[root].passes)]
            for q in active:
                for name, ty, init in nest.templates[nest.roots[q]].passes[p].lanes:
                    body.append(f"{ty} ln{q}_{name}[8]; for (int l = 0; l < 8; ++l) ln{q}_{name}[l] = {init};")
            ys = [f"buf{q}[j - jb]" if blocked else f"y{q}" for q in computed]
            if blocked:
                s0, s1 = "j0", "j1"
                if not whole:
                    body.append(f"for ({ix} sr = j0 / {nest.sub}; sr * {nest.sub} < j1; ++sr) {{")
                    body += _sub_row(nest)
                    body.append(f"const {ix} s0 = (j0 > sr * {nest.sub}) ? j0 : sr * {nest.sub};")
                    body.append(f"const {ix} s1 = {c_min(f'(sr + 1) * {nest.sub}', 'j1')};")
                    s0, s1 = "s0", "s1"
                body.append(f"for ({ix} jb = {s0}; jb < {s1}; jb += {block}) {{")
                body.append(f"const {ix} je = {c_min(f'jb + {block}', s1)}, nb = je - jb, n8 = nb & ~7;")
                body += [f"{x_types[q]} buf{q}[{block}];" for q in computed]
                mapped = [q for q in active if nest.templates[nest.roots[q]].passes[p].map is not None]
                body += [f"{x_types[q]} mb{q}[{block}];" for q in mapped]  # `_lanes_update` fills them
                body += cpu_block(spec, w, i, ys, jr, "0" if whole else f"sr * {nest.sub}")
                for q in active:
                    body += _lanes_update(nest, q, p, x_types[q], True, read=read(q, True))
                body += [] if whole else ["}"]
            else:
                body.append(f"for ({ix} j = j0; j < j1; j += {step}) {{")
                if not whole:
                    body += [f"const {ix} sr = j / {nest.sub};", *_sub_row(nest)]
                body += [f"{x_types[q]} y{q};" for q in computed]
                body += cuda_element(spec, w, i, jr, ys)
                for q in active:
                    body += _lanes_update(nest, q, p, x_types[q], False, step, read(q, False))
            body.append("}")
            for q in active:
                body.append(nest.templates[nest.roots[q]].passes[p].merge.format(**subst(nest, q)))
        body += [*spec.finish, "}", *status_stores(spec)]
        out[blocked] = body
    return driver_pair(spec.sig, out[True], out[False])

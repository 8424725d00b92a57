"""Flat row runs: consecutive rows of a pointwise stencil nest run as one element loop.

A pointwise group with guards or row images (a stencil's pads) walks its space row by row:
per row its bases (`drivers.row_bases`), the ends outside the interior, and the vectorised
interior loop with its own prologue and remainder. On short rows (a 128-wide field) that
per-row work is a large part of the step. Where consecutive rows differ only by a row's
length in every base, the interiors of the whole run and the row ends between them form one
contiguous range of flat positions, so one loop covers them.

Assumes: a pointwise `Nest` whose drivers walk rows of its last axis (`Nest.row_position`)
and its element function's lines (`ElementWriter.body`); a kernel's outputs never share
memory with its inputs (the schedule gives a value a buffer only after the last kernel that
reads the buffer's earlier value, the loop runtime never writes a step into its inputs, and
programs refuse outputs aliasing inputs).

Guarantees:

- `eligible`: only for rows of at most `Target.flat_rows` elements, where every row read's base
  advances by a row per row (`_advances`: else no run could form, and the run check would
  cost every row), and where the element function reads the inner counter ``j`` nowhere but
  as a row read's offset (``rb[k] + j``, ``rb[k] + j * s``) and no row image index
  (``q<m>``) but its declaration: the function at flat position ``j`` of a run whose bases
  are row ``r0``'s then reads what it reads at row ``r0 + j / inner``, position
  ``j % inner``.
- `cpu_runs`: a run is found at run time: row ``r1`` joins the run of ``r0`` when every row
  read's base is ``r0``'s plus ``(r1 - r0) * inner * step``, every row image's "has one"
  flag and the interior ``[glo, ghi)`` are ``r0``'s, and the row
  lies whole in the task. The run's interior loop (over ``[glo, (n - 1) * inner + ghi)``, in
  segments of about `SEGMENT` elements) also evaluates the row ends between rows, with
  neighbours from the adjacent row; after each segment the ends of the rows it finished are
  recomputed with the ends function and overwrite them (reading only inputs, never the
  outputs: see above). A run whose loop raised a status flag or a huge trig argument is run
  again row by row, so flags and precise reruns are exactly the row walk's. Every element is
  computed by the same expression with the same operands as in the row walk: the same bits,
  for any partition.
"""

from __future__ import annotations

import re

from dpt_ir.backends.cxx.drivers import (
    BOUNDED_MOST,
    DriverSpec,
    _call,
    _ends,
    _unsummed,
    c_min,
    row_bases,
    row_class,
)
from dpt_ir.backends.cxx.nest import Nest, Read

# The element function's uses of the inner counter that a run keeps valid (a row read's offset)
# and its row images' index declarations (`row_images.statements`).
_ROW_OFFSET = re.compile(r"rb\[\d+\] \+ j(?: \* -?\d+)?(?![\w(])")
_INDEX_DECL = re.compile(r"const \w+ (q\d+) = rb\[\d+\]; \(void\)\1;")
_ROW_DEPENDENT = re.compile(r"\bj\b|\bq\d+\b")
# A run's loop goes in segments of about this many elements, each followed by the ends of the rows it
# finished, while their data is in cache (ends computed after a whole run of a 1024² blur's rows
# missed cache on every tap: its value_and_grad took 1.04-1.08x as long).
SEGMENT = 4096


def eligible(nest: Nest, elem: list[str], widest: int, params: list[str]) -> bool:
    """Whether ``nest``'s CPU driver may run flat row runs, given its element function's
    statements ``elem`` and parameters ``params`` (value ``params[k]`` is ``a<k>``): a
    pointwise nest walking rows of its last axis of at most ``widest`` elements
    (`Target.flat_rows`), with pads (guards or row images), rows of only row, full or scalar
    reads (a scatter's values may be read at their positions inside its loop over entries,
    which no row in a run takes: `_unsummed_lines`), and no other use of ``j`` or ``q<m>``."""
    if nest.roots or not nest.row_position or not (nest.guards or nest.images):
        return False
    if nest.inner > widest:
        return False  # the per-row work is a small share of a long row
    unsummed = "\n".join(_unsummed_lines(elem))
    for site, r in nest.reads.items():
        if r.mode in ("row", "full", "scalar"):
            continue
        name = f"a{params.index(site[0])}" if site[0] in params else None
        if name is None or not nest.csr_row or re.search(rf"\b{name}\[", unsummed):
            return False  # read outside the loop over entries: at an index computed per element
    if not all(_advances(nest, r) for r in nest.row_reads):
        return False  # a base that never advances a row per row: no run would form
    text = _INDEX_DECL.sub("", _ROW_OFFSET.sub("", unsummed))
    return _ROW_DEPENDENT.search(text) is None


def _unsummed_lines(elem: list[str]) -> list[str]:
    """The element function's statements in its ``S = false`` instance: without a scatter's
    loop over its CSR entries (the ``if (S)`` statement before it and its braced body), which
    only a row with entries runs, and such a row never joins a run (`same_row_class`)."""
    out, depth, skipping = [], 0, False
    for line in elem:
        if not skipping and line.strip() == "if (S)":
            skipping, depth = True, 0
            continue
        if skipping:
            depth += line.count("{") - line.count("}")
            skipping = depth > 0
            continue
        out.append(line)
    return out


def _advances(nest: Nest, r: Read) -> bool:
    """Whether row read ``r``'s base can advance by ``inner * step`` from a row to the next
    (the rows' fastest outer coordinate's stride; a base through row images moves with their
    indices, checked at run time)."""
    if any(r.images):
        return True
    return bool(r.strides) and len(r.strides) == len(nest.base_outer) and r.strides[-1] == nest.inner * r.step


def same_row_class(nest: Nest) -> str:
    """C++ of whether row ``r1``'s bases (``nrb``, ``nglo``, ``nghi``: `row_bases` with prefix
    ``n``) continue the run that starts at row ``row`` (``rb``, ``glo``, ``ghi``): each row
    read's base advanced by ``r1 - row`` rows of its step, each row image's flag the same, and
    the same interior. A read or flag that only a row summing later slots uses
    (`summed_only`) is compared only in such a row (``rs``, the same in both rows since their
    later slots' flags are): in the other rows the element function's ``S = false`` instance
    never reads it, and its index (0: no image) does not advance, so comparing it would end
    every run after one row (an adjoint of ``nearest`` pads: each edge row sums two images)."""
    only = summed_only(nest)
    base = len(nest.row_reads)

    def when_summed(term: str, used_only_summed: bool) -> str:
        return f"(!rs || {term})" if used_only_summed else term

    terms = []
    for k, r in enumerate(nest.row_reads):
        delta = nest.inner * r.step
        term = f"nrb[{k}] == rb[{k}]" + (f" + (r1 - row) * {delta}" if delta else "")
        terms.append(when_summed(term, any(x and m in only for m, x in enumerate(r.images))))
    for m, im in enumerate(nest.images):
        flag = base + 2 * m
        terms.append(when_summed(f"nrb[{flag}] == rb[{flag}]", m in only and not im.slot))
    if nest.guards:
        terms += ["nglo == glo", "nghi == ghi"]
    if nest.csr_row is not None:
        terms += ["!rs", "!nrs"]  # a row with scatter entries runs alone (its loop reads ``i - j``)
    return " && ".join(terms) or "true"


def summed_only(nest: Nest) -> set[int]:
    """The row images (by number) that only a row summing later slots reads: a later slot
    (an index's second or further image), or an image whose form reads such an image's index
    (a pad's image below a pad adjoint's second image). A nested image reads earlier images
    only (`row_images.statements`), so one pass in order finds every depth."""
    number = {im.coord: m for m, im in enumerate(nest.images)}
    only: set[int] = set()
    for m, im in enumerate(nest.images):
        if im.slot or any(x and number.get(c) in only for c, x in enumerate(im.form.w)):
            only.add(m)
    return only


def cpu_runs(spec: DriverSpec, row: list[str]) -> list[str]:
    """The CPU loop over task ``t``'s rows ``[b, e)`` in flat runs (see the module's
    guarantees), given the statements ``row`` of one row at a time (`drivers.pointwise_drivers`:
    row ``row``'s bases, its ends and interior), which run a row outside any run and a run
    whose loop raised a flag."""
    nest = spec.nest
    inner, block, nf, ix = nest.inner, spec.target.block, spec.nf, nest.index
    vec = "DP_BOUNDED_LOOP" if nest.size <= BOUNDED_MOST else "DP_VEC_LOOP"  # as `drivers._loops` with pads
    first, span = ("glo", f"(r1 - row - 1) * {inner} + ghi") if nest.guards else ("0", f"(r1 - row) * {inner}")
    element = _call(spec, "false", "true", f"row * {inner} + j", "j", "bf", [])
    seg = max(1, SEGMENT // inner) * inner
    loop = [
        f"for ({ix} jb = sb; jb < se; jb += {block}) {{ const {ix} je = {c_min(f'jb + {block}', 'se')};",
        f"bool bf[{nf}] = {{false}}; bool big = false;",
        f"{vec} for ({ix} j = jb; j < je; ++j) {element}",
        f"rbig |= big; for (int k = 0; k < {nf}; ++k) rf[k] |= bf[k]; }}",
    ]
    if nest.classed:
        loop = row_class(loop, list(_unsummed(*loop)))
    if nest.guards:  # the ends of the rows the segment finished, while their data is in cache
        loop += [
            f"const {ix} upto = se == span ? r1 : row + se / {inner};",
            "for (; ended < upto; ++ended) row_ends(ended);",
        ]
    out = [f"auto one_row = [&]({ix} row) {{", *row, "};", *_row_ends(spec)]
    whole = f"row * {inner} >= b && (row + 1) * {inner} <= e" + (" && glo < ghi" if nest.guards else "")
    out += [
        f"for ({ix} row = b / {inner}; row * {inner} < e; ) {{",
        f"{ix} r1 = row + 1;",
        "{",
        *row_bases(nest, "row"),
        f"if ({whole}) {{",
        f"for (; (r1 + 1) * {inner} <= e; ++r1) {{",
        *row_bases(nest, "r1", "n"),
        f"if (!({same_row_class(nest)})) break;",
        "}",
        "}",
        "if (r1 - row > 1) {",
        f"bool rf[{nf}] = {{false}}; bool rbig = false; {ix} ended = row; (void)ended;",
        f"const {ix} span = {span};",
        f"for ({ix} sb = {first}; sb < span; sb += {seg}) {{ const {ix} se = {c_min(f'sb + {seg}', 'span')};",
        *loop,
        "}",
        f"bool redo = rbig; for (int k = 0; k < {nf}; ++k) redo |= rf[k];",
        f"if (redo) {{ for ({ix} r = row; r < r1; ++r) one_row(r); }}",
        "}",
        "}",
        "if (r1 - row == 1) one_row(row);",
        "row = r1;",
        "}",
    ]
    return out


def _row_ends(spec: DriverSpec) -> list[str]:
    """``row_ends(row)``: a run's row ``row`` outside its interior, by the ends function (as the
    row walk computes them), its flags ORed into ``fl``; a huge trig argument there reruns the
    whole row (`drivers.cpu_block`'s precise path). Nothing without guards (no ends)."""
    nest = spec.nest
    if not nest.guards:
        return []
    ix, nf = nest.index, spec.nf
    call = _call(spec, "false", "true", f"row * {nest.inner} + j", "j", "bf", [], _ends(nest))
    ends = [
        f"DP_SCALAR_LOOP for ({ix} j = 0; j < glo; ++j) {call}",
        f"DP_SCALAR_LOOP for ({ix} j = ghi; j < {nest.inner}; ++j) {call}",
    ]
    if nest.classed:
        ends = row_class(ends, list(_unsummed(*ends)))
    rerun = ["if (big) { one_row(row); return; }"] if spec.uses_big else []
    return [
        f"auto row_ends = [&]({ix} row) {{",
        *row_bases(nest, "row"),
        f"bool bf[{nf}] = {{false}}; bool big = false; (void)big;",
        *ends,
        *rerun,
        f"for (int k = 0; k < {nf}; ++k) fl[k] |= bf[k];",
        "};",
    ]

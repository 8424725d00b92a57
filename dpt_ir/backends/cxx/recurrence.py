"""The C++ lowering of recurrence groups (line filters such as the spline prefilter): the
line program of a `Recurrence` run along whole lines, one C++ unit for CPU and CUDA.

Assumes: a fusion group of kind ``recurrence``: one node whose op has ``OpDef.recurrence``
(`dpt_ir.ir.recurrence`: the program, backend-neutral data), float32 or float64, reading its
materialised row-major input (fusion writes it first) and writing its output; flat buffers.
No op is named here: the program is the op's data.

Guarantees: each line is computed by one task or thread, in a float64 work line, with the
operations of `dpt_ir.ir.recurrence`'s formulas in their order, one product or one sum per
statement (so no compiler contracts them into an FMA on the CPU), rounded once to the
output type at the store: the NumPy reference's (`dpt_ir.reference.recurrence_ref`) bits, on
either device and for any thread count; no atomics. The boundary functionals' weights are one
float64 launch constant (``$rec:<node>``).

- CPU (`_entry` with `LANES` lanes): a task runs `LANES` neighbouring lines at once (line ``q``
  is ``(q / inner, q % inner)``: the lines of one outer index are neighbours in memory, so the
  lanes of a load are contiguous where ``inner`` is a multiple of the lane count), the work line
  lane-interleaved (``w[j * LANES + l]``) so the lane loops vectorise; lanes past the last line
  compute line 0 again and store nothing. 32 lanes: each step's loop carries four independent
  AVX-512 chains, and a lane-contiguous load or store moves 128 bytes per row of the input;
  with 8 lanes (one chain) the 256² order-3 prefilter took 0.094 + 0.090 ms, with 32 lanes
  0.032 + 0.065 ms, the work line (280 × 32 doubles) then in L2.
- Lines that are rows (the last axis) move between the input, the work line and the
  output in 8 x 8 register tiles (`_row_tiles`: dp_math.h's ``dp_rows_to_lanes8`` and
  ``dp_lanes_to_rows8``, CPU only, so the CPU entry is compiled for the CPU only); element by
  element, a gather or scatter of 32 rows per entry cost as much as the recursion (the 256²
  prefilter's axis 1: 0.058 -> 0.028 ms).
- Fewer passes over the work line, with the same statements: the leading ``scale`` steps and
  the ``init`` after them run as the line is loaded (`_load`), and a last ``anticausal`` step
  stores each entry as it finishes it (`_anticausal_stored`; not with row tiles, which store 8
  entries at once). The prefilter took 0.023 + 0.058 ms with these and before the row tiles.
- CUDA: one thread per line (the same code with one lane), the work line in local memory. A
  CUDA plan's CPU entry (the export's host replay) runs its partition: one line per task.

A work line holds at most `MAX_WORK` doubles per task (CPU stack, CUDA local memory): a
longer line is a ContractError naming the node.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpt_ir.backends.cxx.common import C_TYPES, INDEX_LIMIT, TOKEN
from dpt_ir.backends.cxx.units import Unit, single_launch, status_flag
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup
from dpt_ir.ir.records import origin_of
from dpt_ir.ir.recurrence import RecStep, Recurrence

LANES = 32  # CPU: lines per task (module docstring)
TILE = 8  # the side of a row tile (`_row_tiles`)
MAX_WORK = 32768  # doubles of work line per task: 256 KiB of stack or CUDA local memory


def recurrence_of(graph: Graph, root: str) -> Recurrence:
    """The `Recurrence` of node ``root`` (its op's program for its attributes and input shape)."""
    node = graph.node_map[root]
    op = node.opdef
    if op.recurrence is None:
        raise ContractError(f"node {root!r}: expected an op with a recurrence program, found op {op.name!r}")
    return op.recurrence(op.parse_attrs(node.attrs, root), tuple(graph.types[node.inputs[0]].shape))


def _check(graph: Graph, root: str, rec: Recurrence) -> None:
    """ContractError when a buffer overflows the 32-bit indices or a work line `MAX_WORK`."""
    sizes = [graph.types[v].size for v in (*graph.node_map[root].inputs, root)]
    who = origin_of(graph, root) or f"op {graph.node_map[root].opdef.name!r}"
    if max(sizes) > INDEX_LIMIT:
        raise ContractError(
            f"{who} (node {root!r}): the C++ backend indexes a recurrence's input and output with 32-bit "
            f"integers, at most {INDEX_LIMIT} elements each; found sizes {sizes}"
        )
    if rec.m > MAX_WORK:
        raise ContractError(
            f"{who} (node {root!r}): a recurrence's work line holds at most {MAX_WORK} elements on the C++ "
            f"path, found {rec.m} along axis {rec.axis}"
        )


def _lanes(rec: Recurrence) -> int:
    return max(1, min(LANES, MAX_WORK // max(rec.m, 1)))


def _lit(v: float) -> str:
    """A C++ double of ``v``: the shortest round-trip decimal (parsed back exactly), or
    dp_math.h's infinity and NaN."""
    v = float(v)
    if math.isnan(v):
        return "((double)dp_nan())"
    if math.isinf(v):
        return f"({'-' if v < 0 else ''}(double)dp_inf())"
    return f"({v!r})"


def _anticausal_entry(s: RecStep, L: int) -> str:
    """The statements of ``anticausal`` step ``s`` at entry ``i`` of lane ``l``."""
    return f"const double d = w[(i + 1) * {L} + l] - w[i * {L} + l]; w[i * {L} + l] = {_lit(s.z)} * d;"


def _step(s: RecStep, m: int, L: int, off: int) -> list[str]:
    """C++ statements of step ``s`` on ``w`` (``L`` lanes), its weights at ``wt[off + j]``."""
    lanes = f"for (int l = 0; l < {L}; ++l)"
    z = _lit(s.z)
    if s.kind == "scale":
        return [f"for (int j = 0; j < {m * L}; ++j) w[j] = {z} * w[j];"]
    if s.kind == "init":
        return [
            f"{{ double acc[{L}]; {lanes} acc[l] = 0.0;",
            f"  for (int j = {s.lo}; j < {s.hi}; ++j) {{ const double c = wt[{off} + j];",
            f"    {lanes} {{ const double p = c * w[j * {L} + l]; acc[l] = acc[l] + p; }} }}",
            f"  {lanes} w[{s.at * L} + l] = acc[l]; }}",
        ]
    if s.kind == "init_t":
        return [
            f"{{ double v[{L}]; {lanes} v[l] = w[{s.at * L} + l];",
            f"  for (int j = {s.lo}; j < {s.hi}; ++j) {{ if (j == {s.at}) continue; const double c = wt[{off} + j];",
            f"    {lanes} {{ const double p = c * v[l]; w[j * {L} + l] = w[j * {L} + l] + p; }} }}",
            f"  {lanes} w[{s.at * L} + l] = wt[{off + s.at}] * v[l]; }}",
        ]
    if s.kind == "causal":
        body = f"const double p = {z} * w[(i - 1) * {L} + l]; w[i * {L} + l] = w[i * {L} + l] + p;"
        return [f"for (int i = 1; i < {m}; ++i) {lanes} {{ {body} }}"]
    if s.kind == "causal_t":
        body = f"const double p = {z} * w[i * {L} + l]; w[(i - 1) * {L} + l] = w[(i - 1) * {L} + l] + p;"
        return [f"for (int i = {m - 1}; i > 0; --i) {lanes} {{ {body} }}"]
    if s.kind == "anticausal":
        return [f"for (int i = {m - 2}; i >= 0; --i) {lanes} {{ {_anticausal_entry(s, L)} }}"]
    if s.kind == "anticausal_t":
        body = (
            f"const double p = {z} * w[i * {L} + l]; w[(i + 1) * {L} + l] = w[(i + 1) * {L} + l] + p; "
            f"w[i * {L} + l] = {_lit(-s.z)} * w[i * {L} + l];"
        )
        return [f"for (int i = 0; i < {m - 1}; ++i) {lanes} {{ {body} }}"]
    raise ContractError(f"recurrence step: expected one of dpt_ir.ir.recurrence's kinds, found {s.kind!r}")


def _contiguous(rec: Recurrence, L: int) -> bool:
    """Whether a task's ``L`` lanes are ``L`` neighbouring lines of one outer index (``inner``
    a multiple of ``L``): lane ``l`` is then ``l`` elements after lane 0, and every lane is live."""
    return L > 1 and rec.inner % L == 0


def _row_tiles(rec: Recurrence, L: int, c_type: str) -> bool:
    """Whether the lines are rows moved through 8 x 8 register transposes (``dp_rows_to_lanes8``
    / ``dp_lanes_to_rows8`` in dp_math.h, float32 and float64: CPU only)."""
    return rec.inner == 1 and L % TILE == 0 and c_type in ("float", "double")


def _load(rec: Recurrence, L: int, scales: list[float], init: tuple[RecStep, int] | None, tiles: bool) -> list[str]:
    """``w`` from the input lines: lane ``l`` from ``xb[l]``, every lane (one past the last line
    reads line 0; its values are never stored), the leading ``scale`` steps' products applied to
    each value as it is loaded, and the ``init`` step that follows them (with its weights'
    offset) summed as the entries pass, in its ascending order; the entries before, inside and
    after the line, and inside and outside the init's range, in loops of their own, so that no
    loop tests where ``j`` is. With ``tiles`` (`_row_tiles`), the line's own entries move in
    8 x 8 blocks first and the products and the sum follow over the work line. Each product and
    sum is the step's own: the same bits as the steps run one after another."""
    a = min(max(rec.pad, 0), rec.m)
    b = min(max(rec.pad + rec.n_in, a), rec.m)
    lo_fill = "x[xb[l]]" if rec.fill is None else _lit(rec.fill)
    hi_fill = f"x[xb[l] + {(rec.n_in - 1) * rec.inner}]" if rec.fill is None else _lit(rec.fill)
    inside = f"x[{'xb[0] + l' if _contiguous(rec, L) else 'xb[l]'} + (j - {rec.pad}) * {rec.inner}]"
    lo, hi = (init[0].lo, init[0].hi) if init is not None else (0, 0)
    cuts = sorted({0, a, b, rec.m, *(min(max(v, 0), rec.m) for v in (lo, hi))})
    lines = [f"double acc[{L}]; for (int l = 0; l < {L}; ++l) acc[l] = 0.0;"] if init is not None else []

    def over(first: int, last: int, raw: str) -> str:  # the loop giving w[j] from raw, then its steps
        value = f"(double)({raw})"
        for z in scales:
            value = f"{_lit(z)} * ({value})"
        body = [f"const double v = {value};", f"w[j * {L} + l] = v;"]
        if init is not None and lo <= first and last <= hi:
            body.append(f"const double p = wt[{init[1]} + j] * v; acc[l] = acc[l] + p;")
        return f"for (int j = {first}; j < {last}; ++j) for (int l = 0; l < {L}; ++l) {{ {' '.join(body)} }}"

    for first, last in zip(cuts, cuts[1:], strict=False):
        if last <= first:
            continue
        if not (tiles and a <= first and last <= b and last - first >= TILE):
            lines.append(over(first, last, lo_fill if first < a else inside if first < b else hi_fill))
            continue
        cut = first + (last - first) // TILE * TILE
        lines.append(
            f"for (int j = {first}; j < {cut}; j += {TILE}) for (int g = 0; g < {L}; g += {TILE}) "
            f"dp_rows_to_lanes8(x, xb + g, j - {rec.pad}, w + j * {L} + g, {L});"
        )
        if scales or (init is not None and lo <= first and last <= hi):  # before the tail: j ascends
            lines.append(over(first, cut, f"w[j * {L} + l]"))
        if last > cut:
            lines.append(over(cut, last, inside))
    if init is not None:
        lines.append(f"for (int l = 0; l < {L}; ++l) w[{init[0].at * L} + l] = acc[l];")
    return lines


def _stored(rec: Recurrence, L: int, c_type: str, checks: bool, i: str, value: str) -> str:
    """The statement setting output entry ``i`` of lane ``l`` to ``value``, rounded once, and
    ORing its non-finite flag into ``bads[l]``."""
    at = f"y[{'yb[0] + l' if _contiguous(rec, L) else 'yb[l]'} + ({i}) * {rec.inner}]"
    return f"{at} = ({c_type}){value};" + (f" bads[l] |= dp_nonfinite({at});" if checks else "")


def _plain(rec: Recurrence) -> tuple[int, int]:
    """The output entries ``[lo, hi)`` stored as they are (the others are folded ends)."""
    return (1, rec.n_out - 1) if rec.fold and rec.crop else (0, rec.n_out)


def _store(rec: Recurrence, L: int, c_type: str, checks: bool, plain: bool, tiles: bool) -> list[str]:
    """The output lines of the live lanes (``l < nl``) from ``w``: the `_plain` entries (unless
    ``plain`` is False: `_anticausal_stored` stored them; with ``tiles``, `_row_tiles`, in 8 x 8
    blocks of whole groups of 8 live lanes), and under ``fold`` the two ends apart, each the
    ascending sum of the entries it folds. A lane's non-finite flags gather in ``bads[l]``, ORed
    once at the end (one OR across the lanes per entry cost more than the entry's store)."""
    n, c = rec.n_out, rec.crop
    lo, hi = _plain(rec)
    lines = []
    body = _stored(rec, L, c_type, checks, "i", f"w[(i + {c}) * {L} + l]")
    if plain and tiles and hi - lo >= TILE:
        cut, groups = lo + (hi - lo) // TILE * TILE, f"nl / {TILE} * {TILE}"
        lines += [
            f"for (int i = {lo}; i < {cut}; i += {TILE}) for (int g = 0; g < {groups}; g += {TILE}) "
            f"dp_lanes_to_rows8(w + (i + {c}) * {L} + g, {L}, y, yb + g, i, bads + g);",
            f"for (int i = {lo}; i < {cut}; ++i) for (int l = {groups}; l < nl; ++l) {{ {body} }}",
        ]
        lo = cut
    if plain and hi > lo:
        lines.append(f"for (int i = {lo}; i < {hi}; ++i) for (int l = 0; l < nl; ++l) {{ {body} }}")
    if rec.fold and c:
        for i, first, last in [(0, 0, rec.m)] if n == 1 else [(0, 0, c + 1), (n - 1, n - 1 + c, rec.m)]:
            total = f"double v = w[{first * L} + l]; for (int j = {first + 1}; j < {last}; ++j) v = v + w[j * {L} + l];"
            lines.append(f"for (int l = 0; l < nl; ++l) {{ {total} {_stored(rec, L, c_type, checks, str(i), 'v')} }}")
    return lines


def _anticausal_stored(rec: Recurrence, L: int, s: RecStep, c_type: str, checks: bool) -> list[str]:
    """The last step, an ``anticausal`` one, with the `_plain` output entries stored as the
    recursion finishes them (entry ``m - 1``, which it leaves as it is, first): the store no
    longer reads the work line again. The recursion's statements are `_anticausal_entry`'s, as `_step`'s."""
    m, c = rec.m, rec.crop
    lo, hi = (min(max(v + c, 0), m) for v in _plain(rec))  # work entries [lo, hi) are stored
    step = f"for (int l = 0; l < {L}; ++l) {{ {_anticausal_entry(s, L)} }}"
    store = f"for (int l = 0; l < nl; ++l) {{ {_stored(rec, L, c_type, checks, f'i - {c}', f'w[i * {L} + l]')} }}"
    lines = [f"{{ const int i = {m - 1}; {store} }}"] if lo <= m - 1 < hi else []
    for first, last, keep in ((hi, m - 1, False), (lo, min(hi, m - 1), True), (0, min(lo, m - 1), False)):
        if last > first:  # i from last - 1 down to first
            lines.append(f"for (int i = {last - 1}; i >= {first}; --i) {{ {step}{' ' + store if keep else ''} }}")
    return lines


def _fused_steps(rec: Recurrence) -> tuple[list[float], tuple[RecStep, int] | None, list[tuple[RecStep, int]]]:
    """The steps `_load` runs as it loads (the leading ``scale`` factors, then an ``init`` right
    after them, with its weights' offset in the launch constant) and the others, each with its
    weights' offset."""
    steps, off = [], 0
    for s in rec.steps:
        steps.append((s, off))
        off += rec.m if s.weights is not None else 0
    scales = []
    while steps and steps[0][0].kind == "scale":
        scales.append(steps.pop(0)[0].z)
    init = steps.pop(0) if steps and steps[0][0].kind == "init" else None
    return scales, init, steps


def _entry(rec: Recurrence, sig: str, args: tuple[str, str, str], c_type: str, checks: bool, L: int, fn: str) -> str:
    """Entry point ``fn``: task ``t`` runs lines ``t * L .. t * L + L - 1``, the first ``nl`` of
    them live (module docstring)."""
    x, wt, y = args
    scales, init, rest = _fused_steps(rec)
    tiles = _row_tiles(rec, L, c_type)
    live = str(L) if _contiguous(rec, L) else f"{rec.lines} - t * {L} < {L} ? {rec.lines} - t * {L} : {L}"
    body = [
        f"const {c_type}* x = {x}; {c_type}* y = {y}; const double* wt = {wt}; (void)wt;",
        f"double w[{max(rec.m, 1) * L}];",
        f"const int nl = {live};",
        f"int xb[{L}], yb[{L}], bad = 0, bads[{L}];",
        f"for (int l = 0; l < {L}; ++l) {{",
        f"    const int q = l < nl ? t * {L} + l : 0;",
        f"    xb[l] = q / {rec.inner} * {rec.n_in * rec.inner} + q % {rec.inner};",
        f"    yb[l] = q / {rec.inner} * {rec.n_out * rec.inner} + q % {rec.inner};",
        "    bads[l] = 0;",
        "}",
        *_load(rec, L, scales, init, tiles),
    ]
    fused = bool(rest) and rest[-1][0].kind == "anticausal" and not tiles  # tiles store 8 entries at once
    for k, (s, off) in enumerate(rest):
        last = fused and k == len(rest) - 1
        body += _anticausal_stored(rec, L, s, c_type, checks) if last else _step(s, rec.m, L, off)
    body += _store(rec, L, c_type, checks, not fused, tiles)
    body.append(f"for (int l = 0; l < {L}; ++l) bad |= bads[l];")
    body += status_flag(checks)
    return "\n".join([f"DP_FN void {fn}({sig}) {{", *("    " + s for s in body), "}"])


def recurrence_kernels(
    graph: Graph, group: KernelGroup, name: str, slots: list[Any], checks: bool, device: str
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The one launch of recurrence group ``group`` on ``device`` and its native definition
    (stub name -> C++ and stub text), as `dpt_ir.backends.cxx.kernels.group_kernels` gives them."""
    (root,) = group.roots
    node = graph.node_map[root]
    rec = recurrence_of(graph, root)
    _check(graph, root, rec)
    c_type = C_TYPES[graph.types[root].dtype]
    weights = [s.weights for s in rec.steps if s.weights is not None]
    key = f"$rec:{root}"
    constants = {key: ("float64", np.concatenate(weights))} if weights else {}
    params = [node.inputs[0], *constants, root]
    unit = Unit(graph, params, {root}, {}, constants)
    args = ("a0", "a1" if weights else "(const double*)0", f"a{len(params) - 1}")
    L = _lanes(rec) if device == "cpu" else 1  # a CUDA plan's CPU entry (host replay) takes its partition

    def drivers(sig: str) -> str:
        cpu = _entry(rec, sig, args, c_type, checks, L, f"{TOKEN}_cpu")  # CPU only: it may use row tiles
        return f"#ifndef DP_CUDA\n{cpu}\n#endif\n" + _entry(rec, sig, args, c_type, checks, 1, f"{TOKEN}_cuda") + "\n"

    dim = -(-rec.lines // L) if device == "cpu" else rec.lines
    return single_launch(unit, root, name, slots, checks, dim, group.id, drivers)

"""The C++ lowering of fan-beam projection groups (a `FanBeam` program and its transpose),
matrix-free, one C++ unit for CPU and CUDA.

Assumes: a fusion group of kind ``projection`` whose op's program (``OpDef.projection``) is a
`dpt_ir.ir.fanbeam.FanBeam`, float32 or float64, reading its materialised row-major input and
writing its output; flat buffers. No op is named here: the program is the op's data.

Guarantees: every tap is computed from the line table (the one launch constant,
``$fan:<node>``, 4 float64 per line) with `dpt_ir.ir.fanbeam`'s float64 expressions, one
operation per statement (no FMA contraction on the CPU), so the forward and the transpose
weigh every tap with the same bits; sums in float64, rounded once at the store. Each output
element is summed by one task or thread in a fixed order: no atomics, the same bits for any
thread count. No per-problem table beyond the lines (angles x detectors): the generated text
depends on the shapes only.

- Forward: task ``(slice, angle, block of `LANES` detectors)`` (one detector on CUDA); each line
  sums its samples in walk order (``k`` ascending, the tap at ``f`` then ``f + 1``) in a lane
  of its own, over the samples that can have a tap in the image.
- Transpose: task ``(slice, band)`` of `band_rows` image rows, summed in a float64 work block:
  lines in table order, each line's samples whose taps can reach the band (a row walk: the
  band's rows; a column walk: an interval of columns from the line's crossing, two spare at
  each end, every tap then tested exactly), ``k`` ascending, in chunks whose samples are
  computed first in a loop that vectorises, then added. The work block holds at most
  `MAX_WORK` doubles: a wider image is a ContractError naming the node.
"""

from __future__ import annotations

from typing import Any

from dpt_ir.backends.cxx.beams import check_index, culprit, program_launch, store_rows
from dpt_ir.backends.cxx.common import C_TYPES
from dpt_ir.backends.cxx.units import status_flag
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.fanbeam import FanBeam
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup

LANES = 8  # CPU forward: neighbouring lines per task (8 doubles: one AVX-512 register)
CHUNK = 64  # transpose: samples computed ahead of their adds
MAX_WORK = 32768  # doubles of a transpose task's work block: 256 KiB of stack or CUDA local memory
MAX_BAND = 32  # CPU transpose: image rows per task at most


def band_rows(b: FanBeam, device: str) -> int:
    """Image rows per transpose task: one on CUDA (a thread each), else as many as the work
    block holds, at most `MAX_BAND`."""
    return 1 if device != "cpu" else max(1, min(MAX_BAND, MAX_WORK // max(b.w, 1)))


def _check(graph: Graph, root: str, b: FanBeam) -> None:
    check_index(graph, root)
    if b.adjoint and b.w > MAX_WORK:
        raise ContractError(
            f"{culprit(graph, root)} (node {root!r}): a fan-beam transpose holds image rows of at most "
            f"{MAX_WORK} pixels on the C++ path (a band of one row), found width {b.w}"
        )


def _sample(cross: int | str) -> list[str]:
    """Statements of sample ``k`` (int) of the line ``(A, Bq, L)``: the cross index ``c0`` of its
    first tap, the weights ``w0 w1`` and validity ``v0 v1`` of its taps at ``c0`` and ``c0 + 1``
    (`dpt_ir.ir.fanbeam`'s expressions; ``c0`` is clamped so a far line converts safely)."""
    return [
        "const double kk = (double)k; const double bk0 = Bq * kk; const double e0 = A + bk0;",
        "const double k1 = kk + 1.0; const double bk1 = Bq * k1; const double e1 = A + bk1;",
        "const bool up = e0 < e1; const double lo = up ? e0 : e1; const double hi = up ? e1 : e0;",
        "const double f = dp_floor(lo); const double top = f + 1.0;",
        "const double sp = hi - lo; const double num = top - lo; const double q = num / sp;",
        "const double fr = sp > num ? q : 1.0; const double rest = 1.0 - fr;",
        "const double w0 = L * fr; const double w1 = L * rest;",
        f"const double fc = f < -2.0 ? -2.0 : (f > (double)({cross}) ? (double)({cross}) : f); const int c0 = (int)fc;",
        f"const bool v0 = c0 >= 0 && c0 < {cross} && w0 != 0.0;",
        f"const bool v1 = c0 + 1 >= 0 && c0 + 1 < {cross} && w1 != 0.0;",
    ]


def _crossing(lo: str, hi: str, n: str) -> list[str]:
    """``k0 k1``: the samples ``k`` in ``[0, n)`` (C++ expressions) whose crossing ``A + Bq k``
    can lie in ``[lo, hi)``, two spare at each end (every tap is then tested exactly); all of
    them when ``Bq`` is 0 and ``A`` lies there. A tap at cross index ``c`` has its sample's
    ``lo`` in ``[c - 1, c]``, so its crossing ``e0`` in ``[c - 1, c + 1]`` (``|Bq| <= 1``)."""
    return [
        f"const double lo_ = {lo} - A, hi_ = {hi} - A;",
        "int k0 = 0, k1 = 0;",
        "if (Bq == 0.0) {",
        f"    if (lo_ <= 0.0 && 0.0 < hi_) k1 = {n};",
        "} else {",
        "    const double ea = lo_ / Bq, eb = hi_ / Bq;",
        "    const double la = dp_floor(ea < eb ? ea : eb) - 2.0, ha = dp_floor(ea < eb ? eb : ea) + 3.0;",
        f"    k0 = la < 0.0 ? 0 : (la > (double)({n}) ? {n} : (int)la);",
        f"    k1 = ha < 0.0 ? 0 : (ha > (double)({n}) ? {n} : (int)ha);",
        "}",
    ]


def _line(r: str) -> list[str]:
    return [f"const double md = tb[{r} * 4], A = tb[{r} * 4 + 1], Bq = tb[{r} * 4 + 2], L = tb[{r} * 4 + 3];"]


def _forward(b: FanBeam, sig: str, args: tuple[str, str, str], c_type: str, checks: bool, lanes: int, fn: str) -> str:
    """Entry ``fn``: task ``t`` sums ``lanes`` neighbouring lines of one angle and slice, each in
    a lane of its own (the lane loop vectorises), over the samples any of them can have in the
    image (module docstring). A lane adds an exact +0.0 for a sample with no tap in the image
    (its sum is never -0.0), so each line's bits are those of its own walk; lanes past the last
    detector weigh nothing and are not stored."""
    x, tb, y = args
    h, w, na, nd = b.h, b.w, b.n_angles, b.n_det
    nb = -(-nd // lanes)
    setup = [
        f"const int d = cb * {lanes} + l, r = a * {nd} + (d < {nd} ? d : 0);",
        *_line("r"),
        f"const bool m1 = md != 0.0; const int n = m1 ? {w} : {h}, cr = m1 ? {h} : {w};",
        f"A_[l] = A; B_[l] = Bq; L_[l] = d < {nd} ? L : 0.0; m_[l] = m1; n_[l] = n; c_[l] = cr;",
        *_crossing("-1.0", "(double)(cr + 1)", "n"),
        "if (k1 > k0) { kmin = k0 < kmin ? k0 : kmin; kmax = k1 > kmax ? k1 : kmax; }",
    ]
    lane = [
        "const double A = A_[l], Bq = B_[l], L = L_[l]; const bool m1 = m_[l]; const int cr = c_[l];",
        *_sample("cr"),
        "const bool u0 = v0 && k < n_[l], u1 = v1 && k < n_[l];",
        f"const int o0 = u0 ? (m1 ? c0 * {w} + k : k * {w} + c0) : 0;",
        f"const int o1 = u1 ? (m1 ? (c0 + 1) * {w} + k : k * {w} + c0 + 1) : 0;",
        "const double p0 = u0 ? (double)img[o0] : 0.0; const double p1 = u1 ? (double)img[o1] : 0.0;",
        "const double t0 = w0 * p0; const double t1 = w1 * p1;",
        "acc[l] = acc[l] + t0; acc[l] = acc[l] + t1;",
    ]
    body = [
        f"const {c_type}* x = {x}; {c_type}* y = {y}; const double* tb = {tb};",
        f"const int s = t / {na * nb}, a = (t / {nb}) % {na}, cb = t % {nb};",
        f"const {c_type}* img = x + s * {b.image_size}; (void)img;",
        f"double acc[{lanes}], A_[{lanes}], B_[{lanes}], L_[{lanes}]; bool m_[{lanes}]; int n_[{lanes}], c_[{lanes}];",
        f"int kmin = {max(h, w)}, kmax = 0;",
        f"for (int l = 0; l < {lanes}; ++l) {{",
        "    acc[l] = 0.0;",
        *("    " + ln for ln in setup),
        "}",
        f"for (int k = kmin; k < {'kmax' if b.image_size else 'kmin'}; ++k) {{",
        f"    for (int l = 0; l < {lanes}; ++l) {{",
        *("        " + ln for ln in lane),
        "    }",
        "}",
        "int bad = 0;",
        f"for (int l = 0; l < {lanes}; ++l) {{",
        f"    const int d = cb * {lanes} + l;",
        f"    if (d >= {nd}) continue;",
        f"    {c_type}& out = y[s * {b.sinogram_size} + a * {nd} + d];",
        f"    out = ({c_type})acc[l];",
        *(["    bad |= dp_nonfinite(out);"] if checks else []),
        "}",
        *status_flag(checks),
    ]
    return "\n".join([f"DP_FN void {fn}({sig}) {{", *("    " + ln for ln in body), "}"])


def _adjoint(b: FanBeam, sig: str, args: tuple[str, str, str], c_type: str, checks: bool, B: int, fn: str) -> str:
    """Entry ``fn``: task ``t`` computes image rows ``band * B .. band * B + B - 1`` of one slice
    (module docstring)."""
    g_, tb, y = args
    h, w, lines = b.h, b.w, b.sinogram_size
    nb = -(-h // B) if h else 1

    def run(lo: str, hi: str, cross: int, offsets: tuple[str, str], band: tuple[str, str]) -> list[str]:
        """Samples ``k`` in ``[lo, hi)`` in chunks of `CHUNK`: first, in a loop that vectorises,
        each tap's place in the work block and its term (0 and place 0 where it is not a tap of
        the band: an exact +0.0 to a sum that is never -0.0); then the terms added, in order."""
        return [
            f"for (int c = {lo}; c < {hi}; c += {CHUNK}) {{",
            f"    const int m = {hi} - c < {CHUNK} ? {hi} - c : {CHUNK};",
            "    for (int j = 0; j < m; ++j) {",
            "        const int k = c + j;",
            *("        " + ln for ln in _sample(cross)),
            f"        const bool u0 = v0{band[0]}, u1 = v1{band[1]};",
            "        const double q0 = w0 * gv; const double q1 = w1 * gv;",
            f"        Q0[j] = u0 ? q0 : 0.0; O0[j] = u0 ? {offsets[0]} : 0;",
            f"        Q1[j] = u1 ? q1 : 0.0; O1[j] = u1 ? {offsets[1]} : 0;",
            "    }",
            "    for (int j = 0; j < m; ++j) {",
            "        double& p0 = work[O0[j]]; p0 = p0 + Q0[j]; double& p1 = work[O1[j]]; p1 = p1 + Q1[j];",
            "    }",
            "}",
        ]

    rows_walk = [  # a row walk's samples in the band are the band's rows (those that cross the image)
        *_crossing("-1.0", f"{w + 1}.0", str(h)),
        "const int r0 = k0 > R0 ? k0 : R0, r1 = k1 < R1 ? k1 : R1;",
        *run("r0", "r1", w, (f"(k - R0) * {w} + c0", f"(k - R0) * {w} + c0 + 1"), ("", "")),
    ]
    cols_walk = [  # a column walk: the columns whose crossing A + Bq k lies in [R0 - 1, R1 + 1)
        *_crossing("(double)(R0 - 1)", "(double)(R1 + 1)", str(w)),
        *run("k0", "k1", h, (f"(c0 - R0) * {w} + k", f"(c0 + 1 - R0) * {w} + k"),
             (" && c0 >= R0 && c0 < R1", " && c0 + 1 >= R0 && c0 + 1 < R1")),  # fmt: skip
    ]
    per_line = [
        *_line("r"),
        "const double gv = (double)sino[r];",
        "if (md == 0.0) {",
        *("    " + s for s in rows_walk),
        "} else {",
        *("    " + s for s in cols_walk),
        "}",
    ]
    body = [
        f"const {c_type}* gs = {g_}; {c_type}* y = {y}; const double* tb = {tb}; (void)tb;",
        f"const int s = t / {nb}, band = t % {nb};",
        f"const int R0 = band * {B}, R1 = R0 + {B} < {h} ? R0 + {B} : {h};",
        f"const {c_type}* sino = gs + s * {lines}; (void)sino;",
        f"double work[{max(B * w, 1)}];",
        f"for (int k = 0; k < {B * w}; ++k) work[k] = 0.0;",
        f"int O0[{CHUNK}], O1[{CHUNK}]; double Q0[{CHUNK}], Q1[{CHUNK}];",
        f"for (int r = 0; r < {lines if b.image_size else 0}; ++r) {{",
        *("    " + s for s in per_line),
        "}",
        *store_rows(c_type, b.image_size, w, "work[k]", checks),
    ]
    return "\n".join([f"DP_FN void {fn}({sig}) {{", *("    " + s for s in body), "}"])


def _tasks(b: FanBeam, device: str) -> int:
    if b.adjoint:
        return b.slices * (-(-b.h // band_rows(b, device)) if b.h else 1)
    return b.slices * b.n_angles * -(-b.n_det // (LANES if device == "cpu" else 1))


def fanbeam_kernels(
    graph: Graph, group: KernelGroup, b: FanBeam, name: str, slots: list[Any], checks: bool, device: str
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The one launch of fan-beam group ``group`` (program ``b``) on ``device`` and its native
    definition (stub name -> C++ and stub text), as `kernels.group_kernels` gives them."""
    (root,) = group.roots
    _check(graph, root, b)
    c_type = C_TYPES[graph.types[root].dtype]
    args = ("a0", "a1", "a2")

    def entry(sig: str, cpu: bool, fn: str) -> str:
        if b.adjoint:
            return _adjoint(b, sig, args, c_type, checks, band_rows(b, device if cpu else "cuda"), fn)
        return _forward(b, sig, args, c_type, checks, LANES if cpu and device == "cpu" else 1, fn)

    return program_launch(graph, group, name, slots, checks, f"$fan:{root}", b.table, _tasks(b, device), entry)

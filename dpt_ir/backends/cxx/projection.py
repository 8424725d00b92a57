"""The C++ lowering of projection groups (radon and its transpose): the `ParallelBeam`
program evaluated matrix-free, one C++ unit for CPU and CUDA.

Assumes: a fusion group of kind ``projection``: one node whose op has ``OpDef.projection``
(`dpt_ir.ir.projection`: the frame and the angle table, backend-neutral data), float32 or
float64, reading its materialised row-major input (fusion writes it first) and writing its
output; flat buffers. No op is named here: the program is the op's data.

Guarantees: every tap is computed from the angle table (the one launch constant,
``$beam:<node>``, 4 float64 per angle) with `dpt_ir.ir.projection`'s float64 expressions, one
product or one sum per statement (no FMA contraction on the CPU), so the forward and the
transpose weigh every tap with the same bits; sums in float64, rounded once at the store. Each
output element is summed by one task or thread in a fixed order: no atomics, the same bits
for any thread count. No per-problem table: the generated text depends on the shapes only.

- Forward: task ``(slice, angle, column block)``; the block's `LANES` neighbouring detector
  columns (one on CUDA) run in lanes (the lane loop vectorises) and sum their samples over the
  rotated rows ``r`` in ascending order.
- Transpose: task ``(slice, band)`` of `band_rows` image rows, its pixels summed in a float64
  work block; per angle in ascending order, the samples whose taps can reach the band (an
  interval of rotated rows per column, or of columns per row, from the inverse rotation, one
  spare at each end) add each tap that lands in the band, in a fixed order, to its pixel. A tap
  outside the band is another task's. Each run of samples is computed first in a loop that
  vectorises, then added tap by tap. The band's work block (with a margin of one row and one
  column per side) holds at most `MAX_WORK` doubles: a wider image is a ContractError naming
  the node.
"""

from __future__ import annotations

from typing import Any

from dpt_ir.backends.cxx.common import C_TYPES, INDEX_LIMIT, TOKEN
from dpt_ir.backends.cxx.units import Unit, single_launch, status_flag
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup
from dpt_ir.ir.projection import ParallelBeam
from dpt_ir.ir.records import origin_of

LANES = 8  # CPU forward: detector columns per task (8 doubles: one AVX-512 register)
MAX_WORK = 32768  # doubles of a transpose task's work block: 256 KiB of stack or CUDA local memory
MAX_BAND = 32  # CPU transpose: image rows per task at most


def beam_of(graph: Graph, root: str) -> ParallelBeam:
    """The `ParallelBeam` of node ``root`` (its op's program for its attributes and input shape)."""
    node = graph.node_map[root]
    op = node.opdef
    if op.projection is None:
        raise ContractError(f"node {root!r}: expected an op with a projection program, found op {op.name!r}")
    return op.projection(op.parse_attrs(node.attrs, root), tuple(graph.types[node.inputs[0]].shape))


def band_rows(beam: ParallelBeam, device: str) -> int:
    """Image rows per transpose task: one on CUDA (a thread each), else as many as the work
    block holds, at most `MAX_BAND`."""
    return 1 if device != "cpu" else max(1, min(MAX_BAND, MAX_WORK // (beam.w + 2) - 2))


def _check(graph: Graph, root: str, beam: ParallelBeam) -> None:
    sizes = [graph.types[v].size for v in (*graph.node_map[root].inputs, root)]
    who = origin_of(graph, root) or f"op {graph.node_map[root].opdef.name!r}"
    if max(sizes) > INDEX_LIMIT:
        raise ContractError(
            f"{who} (node {root!r}): the C++ backend indexes a projection's image and sinogram with 32-bit "
            f"integers, at most {INDEX_LIMIT} elements each; found sizes {sizes}"
        )
    if beam.adjoint and 3 * (beam.w + 2) > MAX_WORK:
        raise ContractError(
            f"{who} (node {root!r}): a projection's transpose holds image rows of at most {MAX_WORK // 3 - 2} "
            f"pixels on the C++ path (a band of one row and its margins), found width {beam.w}"
        )


def _ranges(b: ParallelBeam) -> dict[str, int]:
    """The frame rows and columns that are image pixels: ``[ylo, yhi)``, ``[xlo, xhi)``."""
    return {
        "ylo": max(0, -b.r0), "yhi": min(b.side, b.h - b.r0),
        "xlo": max(0, -b.c0), "xhi": min(b.side, b.w - b.c0),
    }  # fmt: skip


def _sample(b: ParallelBeam) -> list[str]:
    """Statements computing sample ``(r, c)`` (doubles ``rr``, ``cc``) of angle ``ca, sa, kx, ky``:
    its taps' frame row ``iy`` and column ``ix``, validity ``vy0 vy1 vx0 vx1`` and weights
    ``w00 w01 w10 w11`` (`dpt_ir.ir.projection`'s expressions, one operation per statement)."""
    g = _ranges(b)
    return [
        "const double px = ca * cc; const double qx = sa * rr; const double sx = px + qx; const double xx = sx + kx;",
        "const double py = nsa * cc; const double qy = ca * rr; const double sy = py + qy; const double yy = sy + ky;",
        "const double fx = dp_floor(xx); const double fy = dp_floor(yy);",
        "const double dx = xx - fx; const double dy = yy - fy;",
        "const double ex = 1.0 - dx; const double ey = 1.0 - dy;",
        "const double w00 = ey * ex; const double w01 = ey * dx;",
        "const double w10 = dy * ex; const double w11 = dy * dx;",
        "const int ix = (int)fx; const int iy = (int)fy;",
        f"const bool vx0 = ix >= {g['xlo']} && ix < {g['xhi']};",
        f"const bool vx1 = ix + 1 >= {g['xlo']} && ix + 1 < {g['xhi']};",
        f"const bool vy0 = iy >= {g['ylo']} && iy < {g['yhi']};",
        f"const bool vy1 = iy + 1 >= {g['ylo']} && iy + 1 < {g['yhi']};",
    ]


def _angle(a: str) -> list[str]:
    return [f"const double ca = tb[{a} * 4], sa = tb[{a} * 4 + 1], kx = tb[{a} * 4 + 2], ky = tb[{a} * 4 + 3];",
            "const double nsa = -sa;"]  # fmt: skip


def _forward(b: ParallelBeam, sig: str, args: tuple[str, str, str], c_type: str, checks: bool, L: int, fn: str) -> str:
    """Entry ``fn``: task ``t`` sums detector columns ``cb * L .. cb * L + L - 1`` of one angle
    and slice over the rotated rows (module docstring)."""
    x, tb, y = args
    nb = -(-b.side // L)
    w, side, na = b.w, b.side, b.n_angles
    reads = []
    for oy, ox in ((0, 0), (0, 1), (1, 0), (1, 1)):
        ok = f"vy{oy} && vx{ox}"  # an invalid tap reads pixel 0 and weighs nothing: no branch
        reads.append(f"const int o{oy}{ox} = ({ok}) ? (iy + {oy + b.r0}) * {w} + ix + {ox + b.c0} : 0;")
        reads.append(f"const double p{oy}{ox} = ({ok}) ? (double)img[o{oy}{ox}] : 0.0;")
    sample = [] if b.image_size == 0 else [
        *_sample(b), *reads,
        "const double t00 = w00 * p00; const double t01 = w01 * p01; const double t10 = w10 * p10;",
        "const double t11 = w11 * p11; const double u0 = t00 + t01; const double u1 = u0 + t10;",
        "const double v = u1 + t11; acc[l] = acc[l] + v;",
    ]  # fmt: skip
    body = [
        f"const {c_type}* x = {x}; {c_type}* y = {y}; const double* tb = {tb};",
        f"const int s = t / {na * nb}, a = (t / {nb}) % {na}, cb = t % {nb};",
        *_angle("a"),
        f"const {c_type}* img = x + s * {b.image_size}; (void)img;",
        f"double acc[{L}]; for (int l = 0; l < {L}; ++l) acc[l] = 0.0;",
        f"for (int r = 0; r < {side if sample else 0}; ++r) {{",
        "    const double rr = (double)r;",
        f"    for (int l = 0; l < {L}; ++l) {{",
        f"        const double cc = (double)(cb * {L} + l);",
        *("        " + s for s in sample),
        "    }",
        "}",
        "int bad = 0;",
        f"for (int l = 0; l < {L}; ++l) {{",
        f"    const int c = cb * {L} + l;",
        f"    if (c >= {side}) continue;",
        f"    {c_type}& out = y[s * {b.sinogram_size} + c * {na} + a];",
        f"    out = ({c_type})acc[l];",
        *(["    bad |= dp_nonfinite(out);"] if checks else []),
        "}",
        *status_flag(checks),
    ]
    return "\n".join([f"DP_FN void {fn}({sig}) {{", *("    " + s for s in body), "}"])


def _scan(b: ParallelBeam, run: int, body: list[str]) -> list[str]:
    """The samples of one angle that can reach frame rows ``[f0, f1)``: ``y`` in ``[f0 - 1, f1)``.
    ``y = nsa c + ca r + ky``: with ``|ca| >= |sa|`` an interval of ``r`` per column, else of ``c``
    per row (bounds widened by one: every sample is then tested exactly), at most ``run`` long;
    ``body`` runs over ``k`` in ``[k0, k1)`` with ``rr``/``cc`` given by ``RR``/``CC``."""
    side = b.side
    head = ["const double lo = (double)(f0 - 1) - ky, hi = (double)f1 - ky;"]

    def mode(outer: str, m: str, div: str, sign: str) -> list[str]:
        swap = {"RR": "(double)k", "CC": "oc"} if outer == "c" else {"RR": "oc", "CC": "(double)k"}
        lines = [ln.replace("RR", swap["RR"]).replace("CC", swap["CC"]) for ln in body]
        return [
            f"for (int {outer} = 0; {outer} < {side}; ++{outer}) {{",
            f"    const double oc = (double){outer}; const double m = {m} * oc;",
            f"    const double e0 = (lo {sign} m) / {div}, e1 = (hi {sign} m) / {div};",
            *_interval("k0", "k1", side),
            f"    const int kn = k1 - k0 < {run} ? k1 - k0 : {run};",
            *("    " + ln for ln in lines),
            "}",
        ]

    by_col = mode("c", "sa", "ca", "+")
    by_row = mode("r", "ca", "nsa", "-")
    return [*head, "if (dp_abs(ca) >= dp_abs(sa)) {", *by_col, "} else {", *by_row, "}"]


def _interval(lo: str, hi: str, side: int) -> list[str]:
    """``[lo, hi)``: the integers from ``floor(min(e0, e1)) - 1`` to ``floor(max(e0, e1)) + 1``,
    clipped to ``[0, side)`` (bounds far outside clip before the int conversion)."""
    return [
        f"    const double l{lo} = dp_floor(e0 < e1 ? e0 : e1) - 1.0, h{hi} = dp_floor(e0 < e1 ? e1 : e0) + 2.0;",
        f"    const int {lo} = l{lo} < 0.0 ? 0 : (l{lo} > {side}.0 ? {side} : (int)l{lo});",
        f"    const int {hi} = h{hi} < 0.0 ? 0 : (h{hi} > {side}.0 ? {side} : (int)h{hi});",
    ]


def _run_body(b: ParallelBeam, B: int) -> list[str]:
    """One run of samples (``k`` in ``[k0, k0 + kn)``): first, in a loop that vectorises, each
    sample's top-left tap in the work block ``o`` and its four terms ``weight * g`` (0 for a tap
    outside the image or the band, or of weight 0: not a tap, as in the reference); then the
    terms added to their pixels, in sample order, one sample after another."""
    na, w2 = b.n_angles, b.w + 2
    terms = []
    for oy, ox in ((0, 0), (0, 1), (1, 0), (1, 1)):
        cond = f"vy{oy} && vx{ox} && iy + {oy} >= f0 && iy + {oy} < f1 && w{oy}{ox} != 0.0"
        terms.append(f"const double m{oy}{ox} = w{oy}{ox} * gv; Q{oy}{ox}[j] = ({cond}) ? m{oy}{ox} : 0.0;")
    return [
        "for (int j = 0; j < kn; ++j) {",
        "    const int k = k0 + j; const double rr = RR; const double cc = CC;",
        *("    " + ln for ln in _sample(b)),
        f"    const double gv = (double)sino[(int)cc * {na} + a];",
        *("    " + ln for ln in terms),
        f"    const int br = iy - f0 + 1, bc = ix + {b.c0 + 1};",
        f"    O[j] = (br >= 0 && br <= {B} && bc >= 0 && bc <= {b.w}) ? br * {w2} + bc : 0;",
        "}",
        "for (int j = 0; j < kn; ++j) {",
        "    double* p = work + O[j];",
        "    p[0] = p[0] + Q00[j]; p[1] = p[1] + Q01[j];",
        f"    p[{w2}] = p[{w2}] + Q10[j]; p[{w2 + 1}] = p[{w2 + 1}] + Q11[j];",
        "}",
    ]


def _adjoint(b: ParallelBeam, sig: str, args: tuple[str, str, str], c_type: str, checks: bool, B: int, fn: str) -> str:
    """Entry ``fn``: task ``t`` computes image rows ``band * B .. band * B + B - 1`` of one slice
    in a work block with a margin of one row and column on each side (taps there are not
    the band's; module docstring)."""
    g_, tb, y = args
    nb = -(-b.h // B)
    na, w, w2 = b.n_angles, b.w, b.w + 2
    run = int((B + 1) * 1.4143) + 5  # an interval's length: (B + 1) / max(|cos|, |sin|) + 4
    scan = _scan(b, run, _run_body(b, B)) if b.image_size and b.side else []
    body = [
        f"const {c_type}* gs = {g_}; {c_type}* y = {y}; const double* tb = {tb}; (void)tb;",
        f"const int s = t / {nb}, band = t % {nb};",
        f"const int R0 = band * {B}, R1 = R0 + {B} < {b.h} ? R0 + {B} : {b.h};",
        f"const int f0 = R0 - {b.r0}, f1 = R1 - {b.r0}; (void)f0; (void)f1;",
        f"const {c_type}* sino = gs + s * {b.sinogram_size}; (void)sino;",
        f"double work[{(B + 2) * w2}];",
        f"for (int k = 0; k < {(B + 2) * w2}; ++k) work[k] = 0.0;",
        f"int O[{run}]; double Q00[{run}], Q01[{run}], Q10[{run}], Q11[{run}];",
        "(void)O; (void)Q00; (void)Q01; (void)Q10; (void)Q11;",
        f"for (int a = 0; a < {na if scan else 0}; ++a) {{",
        *("    " + s for s in [*_angle("a"), *scan]),
        "}",
        "int bad = 0;",
        f"for (int k = 0; k < (R1 - R0) * {w}; ++k) {{",
        f"    {c_type}& out = y[s * {b.image_size} + R0 * {w} + k];",
        f"    out = ({c_type})work[(k / {w} + 1) * {w2} + k % {w} + 1];",
        *(["    bad |= dp_nonfinite(out);"] if checks else []),
        "}",
        *status_flag(checks),
    ]
    return "\n".join([f"DP_FN void {fn}({sig}) {{", *("    " + s for s in body), "}"])


def _tasks(b: ParallelBeam, device: str) -> int:
    if b.adjoint:
        return b.slices * -(-b.h // band_rows(b, device))
    return b.slices * b.n_angles * -(-b.side // (LANES if device == "cpu" else 1))


def projection_kernels(
    graph: Graph, group: KernelGroup, name: str, slots: list[Any], checks: bool, device: str
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The one launch of projection group ``group`` on ``device`` and its native definition
    (stub name -> C++ and stub text), as `dpt_ir.backends.cxx.kernels.group_kernels` gives them."""
    (root,) = group.roots
    node = graph.node_map[root]
    b = beam_of(graph, root)
    _check(graph, root, b)
    c_type = C_TYPES[graph.types[root].dtype]
    key = f"$beam:{root}"
    constants = {key: ("float64", b.table.reshape(-1))}
    params = [node.inputs[0], key, root]
    unit = Unit(graph, params, {root}, {}, constants)
    args = ("a0", "a1", "a2")

    def entry(sig: str, cpu: bool, fn: str) -> str:
        if b.adjoint:
            return _adjoint(b, sig, args, c_type, checks, band_rows(b, device if cpu else "cuda"), fn)
        return _forward(b, sig, args, c_type, checks, LANES if cpu and device == "cpu" else 1, fn)

    def drivers(sig: str) -> str:
        return entry(sig, True, f"{TOKEN}_cpu") + "\n" + entry(sig, False, f"{TOKEN}_cuda") + "\n"

    return single_launch(unit, root, name, slots, checks, _tasks(b, device), group.id, drivers)

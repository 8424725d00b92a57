"""The C++ lowering of projection groups (radon and its transpose): the `ParallelBeam`
program evaluated matrix-free, one C++ unit for CPU and CUDA.

Assumes: a fusion group of kind ``projection``: one node whose op has ``OpDef.projection``
(`dpt_ir.ir.projection`: the frame and the angle table, backend-neutral data), float32 or
float64, reading its materialised row-major input (fusion writes it first) and writing its
output; flat buffers. No op is named here: the program is the op's data.

Guarantees: every tap is computed from the angle table (in the one launch constant,
``$beam:<node>``, `launch_table`: 4 float64 per angle, then the units) with
`dpt_ir.ir.projection`'s float64 expressions, one product or one sum per statement (no FMA
contraction on the CPU), so the forward and the transpose weigh every tap with the same bits;
sums in float64, rounded once at the store. Each output element is summed by one task or
thread in a fixed order: no atomics, the same bits for any thread count and on both drivers.
No per-problem table: the generated text depends on the shapes only.

- Quarter-turn pairs (`units`): an angle whose table is another's a quarter turn on samples
  the same points (sample ``(r', c')`` of the partner is sample ``(2 C - c', r')`` of its
  leader, ``C = side // 2``), so a pair computes each sample once, for both angles: the
  leader's detector columns sum its grid's columns, the partner's sum its rows. skimage's
  default ``theta`` (180 angles, 1 degree apart) is 90 pairs.
- Forward, CPU: task ``(slice, unit)``; per block of `LANES` neighbouring detector columns,
  the lanes (the lane loop vectorises) sum their samples over the rotated rows ``r`` in
  ascending order, and a pair's lanes add each sample to their share of its row's sum. Rows
  with no tap in the image for any lane are skipped (their terms are 0), and rows whose every
  tap is in the image (a range checked at its corners) read the taps unmasked, a float32 row's
  two taps as one 64-bit load. CUDA: task ``(slice, angle, detector column)``, a partner's
  column summed over its leader's grid row in the CPU's order.
- Transpose: task ``(slice, band)`` of `band_rows` image rows, its pixels summed in a float64
  work block; per unit in slot order, the samples whose taps can reach the band (an interval
  of rotated rows per column, or of columns per row, from the inverse rotation, its real
  bounds widened by `SLACK`, clipped to the samples with a tap in the image) add each tap that
  lands in the band to its pixel, weighing the sum of the sinogram values the sample feeds
  (its leader's column and, in a pair, its partner's). A tap outside the band is another
  task's (when the frame covers the image it lands, untested, in a margin or a row past the
  band, never stored). The outer index (column or row) runs as `STREAMS` interleaved ranges
  (`_scan`: streams at least 3 apart share no pixel, so each pixel's order is fixed by the
  unit, the step, the outer index and the sample, the same for any band height): each step's
  runs are computed first in loops that vectorise, then added tap by tap in `PHASES` passes
  over the samples (`_scatter`: samples 3 apart share no pixel either) with the streams' adds
  interleaved, so no add waits on the one before it. The band's work block (with a margin of
  one row and one column per side) holds at most `MAX_WORK` doubles: a wider image is a
  ContractError naming the node.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpt_ir.backends.cxx.beams import check_index, culprit, program_launch, store_rows
from dpt_ir.backends.cxx.common import C_TYPES
from dpt_ir.backends.cxx.units import status_flag
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup
from dpt_ir.ir.projection import ParallelBeam

LANES = 8  # CPU forward: detector columns per task (8 doubles: one AVX-512 register)
MAX_WORK = 32768  # doubles of a transpose task's work block: 256 KiB of stack or CUDA local memory
MAX_BAND = 64  # CPU transpose: image rows per task at most (taller bands recompute fewer edge samples)
SLACK = "1e-6"  # transpose: the widening of a run's real bounds before they round to samples
STREAMS = 4  # transpose: runs whose adds interleave (independent chains of loads and stores)
PHASES = 3  # transpose: a run's samples this far apart share no pixel (each pass adds one residue)


QUARTER_TOL = 1e-15  # a quarter turn: |cos_b + sin_a| and |sin_b - cos_a| at most this (a few ulp)


def pair_rows(b: ParallelBeam) -> int:
    """Rows of a pair's shared grid, ``[0, 2 C + 1)`` (``C = side // 2``): its leader's rows
    ``[0, side)`` and those of its partner's columns (``2 C - c'``)."""
    return max(b.side, 2 * (b.side // 2) + 1)


def pairable(b: ParallelBeam) -> bool:
    """Whether angles of ``b`` may pair: a frame with pixels, whose CPU row shares (`LANES`
    doubles per grid row) fit in `MAX_WORK` doubles."""
    return b.side > 0 and b.image_size > 0 and pair_rows(b) * LANES <= MAX_WORK


def units(b: ParallelBeam) -> np.ndarray:
    """The launch's slots, ``(n_angles, 2)`` float64: slot ``j`` holds a unit ``(a, p)`` (angle
    ``a`` and its quarter-turn partner ``p``, or ``-1`` for a lone angle) or ``(-1, -1)``. The
    partner ``p`` of ``a`` is the first later angle, not yet paired, whose table is ``a``'s a
    quarter turn on (`QUARTER_TOL`): its sample ``(r', c')`` is ``a``'s sample ``(2 C - c', r')``,
    the same point, so a pair computes each sample once. Units follow ascending ``a`` and spread
    evenly over the slots, so the pool's contiguous ranges of tasks take equal shares. No pair
    unless `pairable`."""
    cos, sin, na = b.table[:, 0], b.table[:, 1], b.n_angles
    taken = np.zeros(na, dtype=bool)
    found: list[tuple[int, int]] = []
    pairs_ok = pairable(b)
    for a in range(na):
        if taken[a]:
            continue
        taken[a] = True
        match = (np.abs(cos + sin[a]) <= QUARTER_TOL) & (np.abs(sin - cos[a]) <= QUARTER_TOL) & ~taken
        hits = np.flatnonzero(match) if pairs_ok else np.empty(0, dtype=np.int64)
        partner = int(hits[0]) if hits.size else -1
        if partner >= 0:
            taken[partner] = True
        found.append((a, partner))
    slots = np.full((na, 2), -1.0)
    for u, unit in enumerate(found):
        slots[u * na // len(found)] = unit
    return slots


def launch_table(b: ParallelBeam) -> np.ndarray:
    """The launch constant: the angle table ``(n_angles, 4)``, the slots of `units` and, per
    angle, the angle whose pair computes it (its leader) or ``-1``; float64, flat."""
    slots = units(b)
    lead = np.full(b.n_angles, -1.0)
    for a, p in slots:
        if p >= 0:
            lead[int(p)] = a
    return np.concatenate([b.table.reshape(-1), slots.reshape(-1), lead])


def band_rows(beam: ParallelBeam, device: str) -> int:
    """Image rows per transpose task: one on CUDA (a thread each), else as many as the work
    block holds, at most `MAX_BAND`."""
    return 1 if device != "cpu" else max(1, min(MAX_BAND, MAX_WORK // (beam.w + 2) - 2))


def _check(graph: Graph, root: str, beam: ParallelBeam) -> None:
    check_index(graph, root)
    if beam.adjoint and 3 * (beam.w + 2) > MAX_WORK:
        raise ContractError(
            f"{culprit(graph, root)} (node {root!r}): a projection's transpose holds image rows of at most "
            f"{MAX_WORK // 3 - 2} pixels on the C++ path (a band of one row and its margins), found width {beam.w}"
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


def _rows(b: ParallelBeam, L: int) -> list[str]:
    """Statements giving a forward block's rotated rows: ``[ra0, ra1)`` holds every row with a
    tap in the image for some lane (a bound widened by 2 rows; an axis whose slope is below 1e-9
    bounds nothing), and ``[ri0, ri1)`` rows where every lane's four taps are in the image (a
    bound narrowed by 1, then checked at its four corners with the sample's own expressions: a
    sample coordinate is monotone in ``r`` and in ``c``, each operation being monotone in its
    varying operand, so the corners bound the box; empty when the check fails)."""
    g = _ranges(b)
    side = b.side

    def bound(pv: str, slope: str, lo: float, hi: float, dst: str, inner: bool) -> list[str]:
        # with p in [pmin, pmax] over the lanes: some lane in [lo, hi) needs lo - pmax <= slope r <
        # hi - pmin; every lane needs lo - pmin <= slope r < hi - pmax
        near, far = ("pmin", "pmax") if inner else ("pmax", "pmin")
        grow = "1.0" if inner else "-2.0"  # narrowed by 1 row, or widened by 2
        return [
            f"{{ const double q0 = b{pv}0, q1 = b{pv}1;",
            "  const double pmin = q0 < q1 ? q0 : q1, pmax = q0 < q1 ? q1 : q0;",
            f"  if (dp_abs({slope}) > 1e-9) {{",
            f"    const double u0 = ({lo:.1f} - {near}) / {slope}, u1 = ({hi:.1f} - {far}) / {slope};",
            "    const double v0 = u0 < u1 ? u0 : u1, v1 = u0 < u1 ? u1 : u0;",
            f"    {dst}0 = {dst}0 > dp_floor(v0) + {grow} ? {dst}0 : dp_floor(v0) + {grow};",
            f"    {dst}1 = {dst}1 < dp_floor(v1) + 1.0 - {grow} ? {dst}1 : dp_floor(v1) + 1.0 - {grow};",
            "  } }",
        ]

    corner = [
        "for (int q = 0; q < 4; ++q) {",
        f"    const double rr = (double)((q & 1) ? ri1 - 1 : ri0), cc = (double)(cb * {L} + ((q & 2) ? {L - 1} : 0));",
        *("    " + ln for ln in _sample(b)[:3]),
        f"    ok = ok && fx >= {g['xlo']}.0 && fx < {g['xhi'] - 1}.0 && fy >= {g['ylo']}.0 && fy < {g['yhi'] - 1}.0;",
        "}",
    ]
    return [
        f"const double bc0 = (double)(cb * {L}), bc1 = (double)(cb * {L} + {L - 1});",
        "const double bx0 = ca * bc0 + kx, bx1 = ca * bc1 + kx, by0 = nsa * bc0 + ky, by1 = nsa * bc1 + ky;",
        f"double ga0 = 0.0, ga1 = {side}.0, gi0 = 0.0, gi1 = {side}.0;",
        *bound("x", "sa", g["xlo"] - 1, g["xhi"], "ga", False),
        *bound("y", "ca", g["ylo"] - 1, g["yhi"], "ga", False),
        *bound("x", "sa", g["xlo"], g["xhi"] - 1, "gi", True),
        *bound("y", "ca", g["ylo"], g["yhi"] - 1, "gi", True),
        f"const int ra0 = ga0 < 0.0 ? 0 : (ga0 > {side}.0 ? {side} : (int)ga0);",
        f"const int ra1 = ga1 < (double)ra0 ? ra0 : (ga1 > {side}.0 ? {side} : (int)ga1);",
        "int ri0 = gi0 < (double)ra0 ? ra0 : (gi0 > (double)ra1 ? ra1 : (int)gi0);",
        "int ri1 = gi1 < (double)ri0 ? ri0 : (gi1 > (double)ra1 ? ra1 : (int)gi1);",
        "bool ok = ri0 < ri1;",
        *corner,
        "if (!ok) { ri0 = ra0; ri1 = ra0; }",
    ]


def _forward(
    b: ParallelBeam, sig: str, args: tuple[str, str, str], c_type: str, checks: bool, L: int, pairs: bool, fn: str
) -> str:
    """Entry ``fn``. CPU (``L`` lanes > 1): task ``t`` is slot ``t % n_angles`` of slice ``t /
    n_angles`` (`units`); for each block of ``L`` detector columns it sums its angle's samples
    over the rotated rows in ascending order (module docstring): the rows of `_rows`'s ``[ri0,
    ri1)`` read their taps unmasked (``pairs``: a float32 image's two taps of a row as one
    64-bit load), the other rows of ``[ra0, ra1)`` test each tap, and the rest hold no tap
    (their terms would be 0: skipped, the same sums). A pair also sums each row of its grid
    (rows ``[0, 2 C + 1)``; row ``2 C - c'`` is its partner's detector column ``c'``): lane
    ``l`` keeps a share, the columns ``c = l (mod L)`` in ascending order, and the shares are
    added in lane order. CUDA (one lane): task ``(slice, angle, column)``; a partner's column
    ``c'`` sums its leader's samples ``(2 C - c', r')`` into `LANES` shares by ``r' mod
    LANES``, ascending, added in order: the same terms in the same order, so both drivers give
    the same bits (the CPU's ``L`` is `LANES`)."""
    x, tb, y = args
    nb = -(-b.side // L)
    w, side, na = b.w, b.side, b.n_angles
    nr, centre2 = pair_rows(b), 2 * (side // 2)
    reads, fast = [], [f"const int o = (iy + {b.r0}) * {w} + ix + {b.c0};"]
    for oy, ox in ((0, 0), (0, 1), (1, 0), (1, 1)):
        ok = f"vy{oy} && vx{ox}"  # an invalid tap reads pixel 0 and weighs nothing: no branch
        reads.append(f"const int o{oy}{ox} = ({ok}) ? (iy + {oy + b.r0}) * {w} + ix + {ox + b.c0} : 0;")
        reads.append(f"const double p{oy}{ox} = ({ok}) ? (double)img[o{oy}{ox}] : 0.0;")
    plain, pair = [], []
    for oy in (0, 1):
        at = f"o + {oy * w}"
        plain += [f"const double p{oy}0 = (double)img[{at}]; const double p{oy}1 = (double)img[{at} + 1];"]
        pair += [  # little-endian: the lower address is the low half
            f"long long h{oy}; __builtin_memcpy(&h{oy}, img + {at}, 8);",
            f"const double p{oy}0 = (double)dp_as_float((int)h{oy});",
            f"const double p{oy}1 = (double)dp_as_float((int)(h{oy} >> 32));",
        ]
    # NVRTC compiles the CPU entry too (one unit): it sees the plain reads
    fast += ["#ifdef DP_CUDA", *plain, "#else", *pair, "#endif"] if pairs else plain
    value = [
        "const double t00 = w00 * p00; const double t01 = w01 * p01; const double t10 = w10 * p10;",
        "const double t11 = w11 * p11; const double u0 = t00 + t01; const double u1 = u0 + t10;",
        "const double v = u1 + t11;",
    ]
    # a lane's share of its row's sum (CPU): the columns of its residue mod L, in ascending order
    share = f"racc[r * {L} + l] = racc[r * {L} + l] + (cc < {side}.0 ? v : 0.0);"
    shares = L > 1 and pairable(b)
    terms = [*value, "acc[l] = acc[l] + v;", *([share] if shares else [])]

    def rows(lo: str, hi: str, sample: list[str]) -> list[str]:
        return [
            f"for (int r = {lo}; r < {hi}; ++r) {{",
            "    const double rr = (double)r;",
            f"    for (int l = 0; l < {L}; ++l) {{",
            f"        const double cc = (double)(cb * {L} + l);",
            *("        " + s for s in sample),
            "    }",
            "}",
        ]

    loops = [] if b.image_size == 0 else [
        *_rows(b, L),
        *rows("ra0", "ri0", [*_sample(b), *reads, *terms]),
        *rows("ri0", "ri1", [*_sample(b)[:8], *fast, *terms]),
        *rows("ri1", "ra1", [*_sample(b), *reads, *terms]),
    ]  # fmt: skip
    if shares and nr > side:  # the pair grid's last row: its partner's column 0 only
        loops += [
            f"if (lb >= 0) {{ const int r = {side}; const double rr = (double)r;",
            f"    for (int l = 0; l < {L}; ++l) {{",
            f"        const double cc = (double)(cb * {L} + l);",
            *("        " + s for s in [*_sample(b), *reads, *value, share]),
            "    }",
            "}",
        ]
    store = [
        f"for (int l = 0; l < {L}; ++l) {{",
        f"    const int c = cb * {L} + l;",
        f"    if (c >= {side}) continue;",
        f"    {c_type}& out = y[s * {b.sinogram_size} + c * {na} + a];",
        f"    out = ({c_type})acc[l];",
        *(["    bad |= dp_nonfinite(out);"] if checks else []),
        "}",
    ]
    block = [
        f"double acc[{L}]; for (int l = 0; l < {L}; ++l) acc[l] = 0.0;",
        *loops,
        *store,
    ]
    if L > 1:
        pair_store = [
            f"if (lb >= 0) for (int c = 0; c < {side}; ++c) {{",
            f"    {c_type}& out = y[s * {b.sinogram_size} + c * {na} + lb];",
            f"    const double* q = racc + ({centre2} - c) * {L}; double v = 0.0;",
            f"    for (int l = 0; l < {L}; ++l) v = v + q[l];",
            f"    out = ({c_type})v;",
            *(["    bad |= dp_nonfinite(out);"] if checks else []),
            "}",
        ]
        racc = [f"double racc[{nr * L}]; for (int k = 0; k < {nr * L}; ++k) racc[k] = 0.0;"]
        body = [
            f"const int s = t / {na}, j = t % {na};",
            f"const double* sl = tb + {4 * na};",
            "const int a = (int)sl[j * 2], lb = (int)sl[j * 2 + 1]; (void)lb;",
            "int bad = 0;",
            "if (a >= 0) {",
            *("    " + ln for ln in _angle("a")),
            f"    const {c_type}* img = x + s * {b.image_size}; (void)img;",
            *("    " + ln for ln in (racc if shares else [])),
            f"    for (int cb = 0; cb < {nb}; ++cb) {{",
            *("        " + ln for ln in block),
            "    }",
            *("    " + ln for ln in (pair_store if shares else [])),
            "}",
        ]
    else:
        # the CPU's order: LANES shares by column residue, each ascending, then added in order
        partner = [f"double part[{LANES}]; for (int l = 0; l < {LANES}; ++l) part[l] = 0.0;"]
        partner += [] if b.image_size == 0 else [
            "for (int r = 0; r < " + str(side) + "; ++r) {",
            f"    const double rr = (double)({centre2} - cb), cc = (double)r;",
            *("    " + s for s in [*_sample(b), *reads, *value]),
            f"    part[r % {LANES}] = part[r % {LANES}] + v;",
            "}",
        ]  # fmt: skip
        partner += [f"for (int l = 0; l < {LANES}; ++l) acc[0] = acc[0] + part[l];"]
        body = [
            f"const int s = t / {na * nb}, a = (t / {nb}) % {na}, cb = t % {nb};",
            f"const int ld = (int)tb[{6 * na} + a];  // a partner's leader, or -1",
            "const int ta = ld >= 0 ? ld : a;",
            *_angle("ta"),
            f"const {c_type}* img = x + s * {b.image_size}; (void)img;",
            "int bad = 0;",
            "if (ld >= 0) {",
            *("    " + ln for ln in ["double acc[1] = {0.0};", *partner, *store]),
            "} else {",
            *("    " + ln for ln in block),
            "}",
        ]
    body = [f"const {c_type}* x = {x}; {c_type}* y = {y}; const double* tb = {tb};", *body, *status_flag(checks)]
    return "\n".join([f"DP_FN void {fn}({sig}) {{", *("    " + s for s in body), "}"])


def streams(b: ParallelBeam) -> int:
    """Independent runs the transpose interleaves: 4 when the outer index splits into 4 ranges
    of at least 3 (1 for a small frame)."""
    return STREAMS if b.side >= 3 * STREAMS else 1


def _scan(b: ParallelBeam, run: int, body: list[str], scatter: list[str]) -> list[str]:
    """The samples of one unit's grid (rows ``[0, nr)``, columns ``[0, side)``) that can reach
    frame rows ``[f0, f1)``: ``y`` in ``[f0 - 1, f1)``.
    ``y = nsa c + ca r + ky``: with ``|ca| >= |sa|`` an interval of ``r`` per column, else of ``c``
    per row (bounds widened by `SLACK`: every sample is then tested exactly), at most ``run`` long.
    The outer index (column or row) runs in `streams` ranges of ``q`` in step: at step ``i`` the
    runs of ``i, q + i, 2 q + i, ...`` (``body`` fills stream ``s``'s buffers for ``k`` in
    ``[k0, k0 + kn)`` with ``rr``/``cc`` given by ``RR``/``CC``), then ``scatter`` adds them
    sample by sample (`_scatter`). Two samples of an
    angle whose taps share a pixel lie within 2 of each other in the outer index (``c = ca x - sa y
    + const`` and taps lie within 1 of ``(x, y)``: ``|c - c'| < 2 (|ca| + |sa|) < 3``), so streams
    at least 3 apart never share a pixel: each pixel sums in the order of steps, then outer index
    (streams), then samples (by ``k % PHASES``, then ``k``), whatever the band."""
    side, S = b.side, streams(b)
    head = ["const double lo = (double)(f0 - 1) - ky, hi = (double)f1 - ky;"]

    def mode(m: str, div: str, sign: str, by_col: bool) -> list[str]:
        # RR, CC: the sample's row and column (doubles); GI, RI: its column's index in gcol and
        # its row's in grow; KL: the end of the inner index (rows: nr, the unit's; columns: side)
        q = -(-(side if by_col else pair_rows(b)) // S)
        outer, inner = (str(side), "nr") if by_col else ("nr", str(side))
        swap = {"RR": "(double)k", "CC": "oc", "GI": f"s * {q} + i", "RI": "k", "KL": inner}
        if not by_col:
            swap = {"RR": "oc", "CC": "(double)k", "GI": "k", "RI": f"s * {q} + i", "KL": inner}
        lines = []
        for ln in body:
            for token, text in swap.items():
                ln = ln.replace(token, text)
            lines.append(ln)
        return [
            f"for (int i = 0; i < {q}; ++i) {{",
            f"    int K0[{S}], KN[{S}]; int kmin = {run};",
            f"    for (int s = 0; s < {S}; ++s) {{",
            f"        const double oc = (double)(s * {q} + i); const double m = {m} * oc;",
            f"        const double e0 = (lo {sign} m) / {div}, e1 = (hi {sign} m) / {div};",
            *("    " + ln for ln in _interval("k0", "k1", inner)),
            *("        " + ln for ln in _support(b, "ca" if by_col else "sa", "sa" if by_col else "ca", inner)),
            "        const int ka = k0 > j0 ? k0 : j0, kb = k1 < j1 ? k1 : j1;",
            f"        const int kn = s * {q} + i >= {outer} || kb <= ka ? 0 : (kb - ka < {run} ? kb - ka : {run});",
            "        K0[s] = ka; KN[s] = kn; kmin = kn < kmin ? kn : kmin;",
            "    }",
            f"    for (int s = 0; s < {S}; ++s) {{",
            f"        const int k0 = K0[s], kn = KN[s]; const double oc = (double)(s * {q} + i);",
            f"        int* Os = O + s * {run};",
            f"        double* Q00s = Q00 + s * {run}; double* Q01s = Q01 + s * {run};",
            f"        double* Q10s = Q10 + s * {run}; double* Q11s = Q11 + s * {run};",
            *("        " + ln for ln in lines),
            "    }",
            *("    " + ln for ln in scatter),
            "}",
        ]

    by_col = mode("sa", "ca", "+", True)
    by_row = mode("ca", "nsa", "-", False)
    return [*head, "if (dp_abs(ca) >= dp_abs(sa)) {", *by_col, "} else {", *by_row, "}"]


def _support(b: ParallelBeam, c_outer: str, c_k: str, end: str) -> list[str]:
    """``[j0, j1)``: the ``k`` whose sample ``x = (c_outer oc + kx) + c_k k`` lies in ``[xlo - 1,
    xhi)``, as a tap in the image needs (`_interval`'s rounding, widened by `SLACK`; all of
    ``[0, end)`` when ``|c_k|`` is below 1e-3, where a coordinate's rounding divided by the
    slope could reach the slack). The samples outside have no tap in the image: their terms
    would be 0."""
    g = _ranges(b)
    return [
        f"int j0 = 0, j1 = {end};",
        f"if (dp_abs({c_k}) > 1e-3) {{",
        f"    const double xb = {c_outer} * oc + kx;",
        f"    const double g0 = ({g['xlo'] - 1}.0 - xb) / {c_k}, g1 = ({g['xhi']}.0 - xb) / {c_k};",
        f"    const double h0 = dp_ceil((g0 < g1 ? g0 : g1) - {SLACK}), h1 = dp_ceil((g0 < g1 ? g1 : g0) + {SLACK});",
        f"    j0 = h0 < 0.0 ? 0 : (h0 > (double){end} ? {end} : (int)h0);",
        f"    j1 = h1 < 0.0 ? 0 : (h1 > (double){end} ? {end} : (int)h1);",
        "}",
    ]


def _interval(lo: str, hi: str, end: str) -> list[str]:
    """``[lo, hi)``: the integers from ``min(e0, e1)`` to ``max(e0, e1)``, each end widened by
    `SLACK` (far above the rounding of a sample's coordinate and of the bound, ~1e-11 for frames
    up to 1e5, divided by a slope of at least 0.7), clipped to ``[0, end)`` (bounds far outside
    clip before the int conversion)."""
    return [
        f"    const double l{lo} = dp_ceil((e0 < e1 ? e0 : e1) - {SLACK});",
        f"    const double h{hi} = dp_ceil((e0 < e1 ? e1 : e0) + {SLACK});",
        f"    const int {lo} = l{lo} < 0.0 ? 0 : (l{lo} > (double){end} ? {end} : (int)l{lo});",
        f"    const int {hi} = h{hi} < 0.0 ? 0 : (h{hi} > (double){end} ? {end} : (int)h{hi});",
    ]


def _run_body(b: ParallelBeam, B: int, lanes: int) -> list[str]:
    """One run of samples of stream ``s`` (``k`` in ``[k0, k0 + kn)``): each sample's top-left tap
    in the work block (``Os``) and its four terms ``weight * g`` (``g``: the sample's value in
    ``gcol``, the leader's sinogram column as doubles, when its row is one of the leader's, plus
    its row's in ``grow``, the partner's column ``2 C - r`` or 0; 0 for a tap outside the image
    or the band, or of weight 0: not a tap, as in the reference). With ``lanes`` > 1 (CPU) the
    run is rounded up to whole groups of ``lanes`` (one vector each, no scalar remainder): a
    sample past the run is tested exactly like the others (its taps are not the band's: 0), and
    one past the grid (``k`` at ``KL``: ``nr`` rows, ``side`` columns) is no sample: its terms
    are 0 at the stream's own margin cell ``s`` (none past ``kn`` is added). Adding 0 changes no
    sum (a work sum is never -0). When the frame covers the image (padded, or the same square) a
    sample whose top-left tap is in the work block puts its four taps in it, and a tap outside
    the frame, the image or the band lands in a margin or a row past the band: those cells are
    never stored, so only ``in`` and the weight are tested."""
    w2 = b.w + 2
    covers = b.r0 <= 0 and b.c0 <= 0 and b.side + b.r0 >= b.h and b.side + b.c0 >= b.w
    terms = []
    for oy, ox in ((0, 0), (0, 1), (1, 0), (1, 1)):
        cond = f"in && vy{oy} && vx{ox} && iy + {oy} >= f0 && iy + {oy} < f1 && w{oy}{ox} != 0.0"
        if covers:
            cond = f"in && w{oy}{ox} != 0.0"
        terms.append(f"const double m{oy}{ox} = w{oy}{ox} * gv; Q{oy}{ox}s[j] = ({cond}) ? m{oy}{ox} : 0.0;")
    loop = (
        ["for (int j = 0; j < kn; ++j) {"] if lanes == 1 else
        [f"const int kr = (kn + {lanes - 1}) / {lanes} * {lanes};",
         f"DP_SCALAR_LOOP for (int jb = 0; jb < kr; jb += {lanes}) DP_LANE_LOOP for (int l = 0; l < {lanes}; ++l) {{",
         "    const int j = jb + l;"]
    )  # fmt: skip
    return [
        *loop,
        "    const int k = k0 + j; const bool kin = k < KL; const double rr = RR; const double cc = CC;",
        *("    " + ln for ln in _sample(b)),
        f"    const double gv = (RI < {b.side} ? gcol[GI] : 0.0) + grow[RI];",
        f"    const int br = iy - f0 + 1, bc = ix + {b.c0 + 1};",
        f"    const bool in = kin && br >= 0 && br <= {B} && bc >= 0 && bc <= {b.w};",
        *("    " + ln for ln in terms),
        f"    Os[j] = in ? br * {w2} + bc : s;",
        "}",
    ]


def _scatter(b: ParallelBeam, run: int) -> list[str]:
    """The terms of step ``i``'s runs added to their pixels, in `PHASES` passes: pass ``m`` takes
    each run's samples ``k`` with ``k % PHASES == m`` in ascending order, sample ``t`` of every
    stream, then ``t + 1``, up to the shortest, then the rest of each (so no stream pads a
    shorter run). Samples ``PHASES`` apart share no pixel (a run moves at least 0.7 rows a
    sample, its taps span 2 rows), nor do two streams (`_scan`): the adds within a pass are
    independent, and no load waits on a store just before it. So clang may merge a row's two
    adds into one 128-bit access (no later access overlaps it in part, which would wait for the
    store to reach the cache). Each pixel's order is fixed by the absolute ``k``, whatever the
    band."""
    w2, S = b.w + 2, streams(b)

    def add(s: str, o: str) -> list[str]:
        return [
            f"    double* p{s} = work + O[{o} + j{s}]; const int q{s} = {o} + j{s};",
            f"    p{s}[0] = p{s}[0] + Q00[q{s}]; p{s}[1] = p{s}[1] + Q01[q{s}];",
            f"    p{s}[{w2}] = p{s}[{w2}] + Q10[q{s}]; p{s}[{w2 + 1}] = p{s}[{w2 + 1}] + Q11[q{s}];",
        ]

    interleaved = [
        ln for s in range(S) for ln in [f"    const int j{s} = J[{s}] + {PHASES} * t;", *add(str(s), str(s * run))]
    ]
    return [
        f"for (int m = 0; m < {PHASES}; ++m) {{",
        f"    int J[{S}], T[{S}]; int tmin = {run};",
        f"    for (int s = 0; s < {S}; ++s) {{",
        f"        const int jm = (m + {PHASES} - K0[s] % {PHASES}) % {PHASES};  // (K0[s] + jm) % {PHASES} == m",
        f"        const int tn = KN[s] > jm ? (KN[s] - jm + {PHASES - 1}) / {PHASES} : 0;",
        "        J[s] = jm; T[s] = tn; tmin = tn < tmin ? tn : tmin;",
        "    }",
        "    for (int t = 0; t < tmin; ++t) {",
        *("    " + ln for ln in interleaved),
        "    }",
        f"    for (int s = 0; s < {S}; ++s) {{",
        "        for (int t = tmin; t < T[s]; ++t) {",
        f"            const int jr = J[s] + {PHASES} * t;",
        *("        " + ln for ln in add("r", f"s * {run}")),
        "        }",
        "    }",
        "}",
    ]


def _adjoint(
    b: ParallelBeam, sig: str, args: tuple[str, str, str], c_type: str, checks: bool, B: int, lanes: int, fn: str
) -> str:
    """Entry ``fn``: task ``t`` computes image rows ``band * B .. band * B + B - 1`` of one slice
    in a work block with a margin of one row and column on each side (taps there are not
    the band's; module docstring)."""
    g_, tb, y = args
    nb = -(-b.h // B)
    na, w, w2 = b.n_angles, b.w, b.w + 2
    # an interval's length, (B + 1) / max(|cos|, |sin|) + 4, in whole groups of lanes
    run = -(-(int((B + 1) * 1.4143) + 5) // lanes) * lanes
    n = streams(b) * run
    nr, centre2 = pair_rows(b), 2 * (b.side // 2)
    scan = _scan(b, run, _run_body(b, B, lanes), _scatter(b, run)) if b.image_size and b.side else []
    body = [
        f"const {c_type}* gs = {g_}; {c_type}* y = {y}; const double* tb = {tb}; (void)tb;",
        f"const int s = t / {nb}, band = t % {nb};",
        f"const int R0 = band * {B}, R1 = R0 + {B} < {b.h} ? R0 + {B} : {b.h};",
        f"const int f0 = R0 - {b.r0}, f1 = R1 - {b.r0}; (void)f0; (void)f1;",
        f"const {c_type}* sino = gs + s * {b.sinogram_size}; (void)sino;",
        f"double work[{(B + 2) * w2}];",
        f"for (int k = 0; k < {(B + 2) * w2}; ++k) work[k] = 0.0;",
        f"int O[{n}]; double Q00[{n}], Q01[{n}], Q10[{n}], Q11[{n}];",
        "(void)O; (void)Q00; (void)Q01; (void)Q10; (void)Q11;",
        f"double gcol[{b.side + lanes}];  // the leader's sinogram column, zero past the grid",
        f"double grow[{nr + lanes}];  // per grid row: the partner's column 2 C - r, or 0",
        f"for (int k = {b.side}; k < {b.side + lanes}; ++k) gcol[k] = 0.0;",
        f"for (int k = {nr}; k < {nr + lanes}; ++k) grow[k] = 0.0;",
        f"const double* sl = tb + {4 * na};",
        f"for (int j = 0; j < {na if scan else 0}; ++j) {{",
        "    const int a = (int)sl[j * 2], lb = (int)sl[j * 2 + 1];",
        "    if (a < 0) continue;",
        f"    const int nr = lb >= 0 ? {nr} : {b.side}; (void)nr;",
        f"    for (int k = 0; k < {b.side}; ++k) gcol[k] = (double)sino[k * {na} + a];",
        f"    for (int k = 0; k < {nr}; ++k) {{ const int c = {centre2} - k;  // a lone angle: all 0",
        f"        grow[k] = lb >= 0 && c >= 0 && c < {b.side} ? (double)sino[c * {na} + lb] : 0.0; }}",
        *("    " + s for s in [*_angle("a"), *scan]),
        "}",
        *store_rows(c_type, b.image_size, w, f"work[(k / {w} + 1) * {w2} + k % {w} + 1]", checks),
    ]
    return "\n".join([f"DP_FN void {fn}({sig}) {{", *("    " + s for s in body), "}"])


def _tasks(b: ParallelBeam, device: str) -> int:
    if b.adjoint:
        return b.slices * -(-b.h // band_rows(b, device))
    return b.slices * b.n_angles * (1 if device == "cpu" else b.side)


def projection_kernels(
    graph: Graph, group: KernelGroup, b: ParallelBeam, name: str, slots: list[Any], checks: bool, device: str
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The one launch of projection group ``group`` (program ``b``) on ``device`` and its native
    definition (stub name -> C++ and stub text), as `kernels.group_kernels` gives them."""
    (root,) = group.roots
    _check(graph, root, b)
    c_type = C_TYPES[graph.types[root].dtype]
    args = ("a0", "a1", "a2")

    def entry(sig: str, cpu: bool, fn: str) -> str:
        lanes = LANES if cpu and device == "cpu" else 1
        if b.adjoint:
            return _adjoint(b, sig, args, c_type, checks, band_rows(b, device if cpu else "cuda"), lanes, fn)
        return _forward(b, sig, args, c_type, checks, lanes, cpu and c_type == "float", fn)

    return program_launch(graph, group, name, slots, checks, f"$beam:{root}", launch_table(b), _tasks(b, device), entry)

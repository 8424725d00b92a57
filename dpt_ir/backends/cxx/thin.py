"""The direct CPU kernel of thin matrix products (matrix x vector, vector x matrix, their batches,
products with a short ``k``): lanes along one output axis, both operands read in place.

Assumes: a `Contraction` on the CPU (`dpt_ir.backends.cxx.contraction.cpu_driver`'s operands
``a0``, ``a1``, output ``a2``, batch bases ``ab`` / ``bb`` from its `_bases`), float or double.

Guarantees: the reference order of `dpt_ir.backends.cxx.contraction` per output element, so the
same bits as the packed kernel, any thread count and the CUDA drivers: float64 ``s = 0; s =
fma(a_p, b_p, s)`` for ``p`` ascending, ``C = s``; float32 ``p`` ascending in k blocks of `KB`,
a float sum from 0 per block (``fmaf``), the block sums added in double in block order (``acc =
0.0; acc += (double)s32``), ``C = (float)acc``. No padded FMA is issued (an FMA with 0 could turn
a -0 sum into +0).

The kernel (`Thin`): each output element is one lane of a vector; a *tile* holds ``R`` lanes
(``vectors`` vectors of `W`: independent FMA chains) along the **lane axis** (the output rows
``i`` or columns ``j``) times up to `TT` elements of the other, **broadcast axis**. Per step ``p``
it reads the lane operand's ``R`` values at ``p`` and one value of the broadcast operand per
column. The lane operand is read either *contiguously* (its lane axis has stride 1: a vector is
one load; vector x matrix reads rows of B, ``Aᵀ x`` rows of A; up to `VECTORS` vectors per tile,
the lanes past the whole tiles one vector at a time, a last partial vector as the whole vector
ending at the last lane), or, when only its ``p`` axis has stride 1 (matrix x vector, row-major
A), through `W` x `W` *transposes*, one vector of lanes per tile: `W` loads of `W` consecutive
steps of the `W` lanes, transposed in registers (``log2 W`` rounds of `W` two-vector shuffles,
clang vector extensions), so lane ``r`` of vector ``q`` is the lane operand at ``(r, p0 + q)``;
each lane still sums its own ``p`` in order (the vectors run across output elements, never
across ``p``). The runs start on a cache line of the first lane (`LINE`): a head run loaded at
0 and a tail run loaded at ``k - W`` do the steps before and after the whole runs, each FMA only
for its own steps; a float32 block end inside a run flushes there. Lanes past the extent reread
the last valid lane and columns past it the last valid column (never stored), so no read leaves
the operands. A task is a block of ``lb`` lanes x ``tb`` columns of one batch; tasks split over
threads (the partition depends on the shapes only).

Which kernel runs (`cost`, `contraction.choose`): where this kernel applies (the broadcast axis
at most `TT`, or ``k`` at most `K_THIN`), a count of the vector instructions each kernel issues
per batch, the packed kernel's (its padded micro tiles' FMAs, A broadcasts and B loads, B's
packing per row block, the stores) against this one's per lane axis (its FMAs, lane loads times
the column tiles, the transposes' shuffles, broadcasts, stores: strided stores count one per
element); the smallest count wins. The threshold it draws: matrix x vector and vector x matrix
products of 1 to 4 columns (rows) go direct (at n = 1 the packed tile wastes 31 of 32 columns),
and so do most outer products of k <= 16 (B's packing per row block against the broadcasts;
40 x 1 @ 1 x 50 stays packed, 746 against 760).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

from dpt_ir.backends.cxx.common import TOKEN
from dpt_ir.ir.registry import Contraction

ACCUMULATORS = 16  # vector accumulators per tile (16 of the 32 AVX-512 registers)
VECTORS = 16  # at most, vectors per tile along a contiguous lane axis: independent FMA chains (FMA latency 4)
# The direct kernel applies to products whose broadcast axis is at most `TT` or whose k is at
# most `K_THIN`. Measured against the packed kernel (1024 lanes, k = 1024, one thread, float32):
# 4 columns 185 against 615 us, 16 columns 929 against 620; 8 rows of a vector x matrix 169
# against 305, 12 rows 844 against 536 (float64, 8 rows: 6.5 ms against 0.79).
TT = 4  # broadcast columns per tile
K_THIN = 16
TILES_PER_TASK = 4  # lane tiles per task
VECTORS_T = 1  # vectors per transposed tile (`thin_of`)
LINE = 64  # bytes per cache line: a transposed tile's runs start on a line of its first lane


@dataclass(frozen=True)
class Thin:
    """A thin product's direct kernel (module docstring). The lane operand's element ``(l, p)``
    is at ``lane_base + l * ls + p * lp``, the broadcast operand's ``(p, t)`` at ``bc_base + p *
    bp + t * bs``, the output's ``(l, t)`` at ``out_base + l * ol + t * ot``; ``lanes_i``: the lane
    axis is the output's rows (operand A), else its columns (operand B)."""

    c_type: str
    lanes_i: bool
    lanes: int  # the lane axis's extent
    cols: int  # the broadcast axis's extent
    k: int
    ls: int
    lp: int
    bp: int
    bs: int
    ol: int
    ot: int
    tt: int  # columns per tile
    vectors: int  # vectors per tile along the lane axis (``vectors x tt`` accumulators)

    @property
    def w(self) -> int:  # lanes per AVX-512 vector
        return 16 if self.c_type == "float" else 8

    @property
    def r(self) -> int:  # lanes per tile
        return self.vectors * self.w

    @property
    def transposed(self) -> bool:  # the lane vectors come from W x W transposes
        return self.ls != 1

    @property
    def lb(self) -> int:  # lanes per task
        return self.r * TILES_PER_TASK

    @property
    def tb(self) -> int:  # columns per task
        return self.tt * 16

    def tasks_per_batch(self) -> int:
        return max(1, -(-self.lanes // self.lb)) * max(1, -(-self.cols // self.tb))


def thin_of(ct: Contraction, c_type: str, lanes_i: bool) -> Thin | None:
    """The direct kernel with lanes along the output rows (``lanes_i``) or columns, or None when
    it does not apply: its lane operand has neither its lane axis nor its ``p`` axis contiguous
    (no vector load), or the broadcast axis exceeds `TT` and ``k`` exceeds `K_THIN` (not a thin
    product: the lane operand would be read once per column tile from far caches). Tiles: up
    to `TT` columns with as many lane vectors as fit `ACCUMULATORS` (at most `VECTORS`; one
    vector where the lane operand is transposed)."""
    lanes, cols = (ct.m, ct.n) if lanes_i else (ct.n, ct.m)
    tt = max(1, min(cols, TT))
    # A transposed tile is one vector of lanes (`W` rows in flight: more share L1 sets under a
    # 4 KiB row pitch and evict each other's lines; 1024² float32: 114 us with 16 rows, 145 with 32)
    transposed = (ct.a_row if lanes_i else ct.b_col) != 1
    vectors = max(1, min(VECTORS_T if transposed else VECTORS, ACCUMULATORS // tt))
    if lanes_i:
        t = Thin(c_type, True, lanes, cols, ct.k, ct.a_row, ct.a_col, ct.b_row, ct.b_col, ct.n, 1, tt, vectors)
    else:
        t = Thin(c_type, False, lanes, cols, ct.k, ct.b_col, ct.b_row, ct.a_col, ct.a_row, 1, ct.n, tt, vectors)
    if (t.ls != 1 and t.lp != 1) or (cols > TT and ct.k > K_THIN):
        return None
    return t


def cost(t: Thin) -> float:
    """The vector instructions `Thin` issues per batch (module docstring): a transposed lane
    operand's runs (``k / W``, a head and a tail) cost `W` loads and ``W log2 W`` shuffles per
    vector, a ``k`` under `W` a load per lane and step; a contiguous one's lanes past its whole
    tiles run one vector at a time, a last partial vector as the whole vector ending at the last
    lane, or per lane under `W` lanes."""
    tiles, col_tiles = t.lanes // t.r, -(-t.cols // t.tt)
    rest = -(-(t.lanes - tiles * t.r) // t.w)  # vectors past the whole tiles, one per call
    vectors = tiles * t.vectors + rest
    if t.transposed:
        runs = t.k // t.w + (t.k % t.w > 0) + 1 if t.k >= t.w else 0
        per_vector = runs * t.w * (1 + int(math.log2(t.w))) if runs else t.k * t.w
        loads = vectors * col_tiles * per_vector
    else:
        per_step = vectors + (t.w - 1 if t.lanes < t.w else 0)
        loads = per_step * t.k * col_tiles
    fmas = vectors * t.k * t.cols
    broadcasts = (tiles + rest) * t.k * t.cols
    stores = t.lanes * t.cols / (t.w if t.ol == 1 else 1)
    return loads + fmas + broadcasts + stores


def packed_cost(ct: Contraction, mr: int, nr: int, tm: int, lanes: int) -> float:
    """The vector instructions the packed kernel (micro tiles ``mr x nr``, row blocks of ``tm``)
    issues per batch: per step of each padded micro tile ``mr`` broadcasts of A, ``nr / lanes``
    loads of B and ``mr nr / lanes`` FMAs; B's packing (a load and a store per vector, per
    element when B is stored transposed) once per row block; the stores."""
    tiles = -(-ct.m // mr) * -(-ct.n // nr)
    micro = tiles * ct.k * (mr + nr / lanes + mr * nr / lanes)
    pad_n = nr * -(-ct.n // nr)
    pack = -(-ct.m // tm) * ct.k * pad_n * 2 / (lanes if ct.b_col == 1 else 1)
    return micro + pack + ct.m * ct.n / lanes


def _transpose(c_type: str, w: int) -> str:
    """``{TOKEN}_tr``: ``x[q]`` (row ``q``: ``w`` consecutive steps of one lane) transposed in
    registers into ``x[q]`` = step ``q`` of the ``w`` lanes: ``log2 w`` rounds swapping the
    off-diagonal blocks of size ``h`` (``h = w/2 .. 1``)."""
    lines = []
    h = w // 2
    while h >= 1:
        for i in range(w):
            if i & h:
                continue
            j = i + h
            lo = ", ".join(str(e if not e & h else w + e - h) for e in range(w))
            hi = ", ".join(str(e + h if not e & h else w + e) for e in range(w))
            lines.append(
                f"    {{ const V a = x[{i}], b = x[{j}]; x[{i}] = __builtin_shufflevector(a, b, {lo}); "
                f"x[{j}] = __builtin_shufflevector(a, b, {hi}); }}"
            )
        h //= 2
    return "\n".join(lines)


def _transposed_run(t: Thin, kb: int) -> str:
    """``{TOKEN}_run``: the steps ``at + qa .. at + qb - 1`` of a transposed tile from one run of
    `W` steps loaded at ``at`` (``at + W <= k``), per vector of lanes ``g``: `W` loads, the
    transpose, then per step one FMA per column on the vector sums ``s[c][g]``; float32 with
    ``fl``, the k block ending at ``nf`` first flushes there (``acc += s; s = 0``; one block end
    at most per run: `W` < `KB`), and ``nf`` moves to the next block end."""
    ct, w, tt, g = t.c_type, t.w, t.tt, t.vectors
    f32 = ct == "float"
    flush = (
        f"""            if (fl && at + q == nf) {{
                for (int c = 0; c < {tt}; ++c)
                    for (int r = 0; r < {w}; ++r) acc[c][g * {w} + r] += (double)s[c][g][r];
                for (int c = 0; c < {tt}; ++c) s[c][g] = (V)0.0f;
            }}
"""
        if f32
        else ""
    )
    acc = f", double (&acc)[{tt}][{t.r}], int& nf, int fl" if f32 else ""
    moved = f"    if (fl && nf >= at + qa && nf < at + qb) nf += {kb};\n" if f32 else ""
    return f"""typedef {ct} {TOKEN}_V __attribute__((ext_vector_type({w})));
DP_FN void {TOKEN}_run(const {ct}* la, int rows, const {ct}* const* bc, int at, int qa, int qb,
                            {TOKEN}_V (&s)[{tt}][{g}]{acc}) {{
    typedef {TOKEN}_V V;
    for (int g = 0; g < {g}; ++g) {{
        V x[{w}];
        for (int q = 0; q < {w}; ++q) {{
            const int r = g * {w} + q;
            __builtin_memcpy(&x[q], la + (r < rows ? r : rows - 1) * {t.ls} + at, sizeof(V));
        }}
{_transpose(ct, w).replace(chr(10), chr(10) + "    ")}
        for (int q = 0; q < {w}; ++q) {{
            if (q < qa || q >= qb) continue;
{flush}            for (int c = 0; c < {tt}; ++c)
                s[c][g] = __builtin_elementwise_fma(x[q], (V)(bc[c][(at + q) * {t.bp}]), s[c][g]);
        }}
    }}
{moved}}}"""


def _transposed_steps(t: Thin, kb: int) -> str:
    """All ``k`` steps of a transposed tile, ``p`` ascending, in runs of `W` steps aligned to
    lane 0's cache lines (`LINE`; a run then reads whole lines of each row, which a 4 KiB row pitch
    would otherwise evict between two runs): a head run loaded at 0 for the steps before the first
    line, whole runs (those without a block end skip its test), a tail run loaded at ``k - W`` for
    the rest; a ``k`` under `W` (no block end) per lane."""
    ct, w, tt = t.c_type, t.w, t.tt
    f32 = ct == "float"
    extra, plain = (", acc, nf, 1", ", acc, nf, 0") if f32 else ("", "")
    fma = "dp_fma" if f32 else "dp_fma_d"
    lane = f"s[c][r / {w}][r % {w}]"
    return f"""    if ({t.k} < {w}) {{
        for (int p = 0; p < {t.k}; ++p)
            for (int c = 0; c < {tt}; ++c) {{
                const {ct} bv = bc[c][p * {t.bp}];
                for (int r = 0; r < {t.r}; ++r) {lane} = {fma}(la[(r < rows ? r : rows - 1) * {t.ls} + p], bv, {lane});
            }}
    }} else {{
        const int h = (int)(((unsigned long long)(-(long long)la) & {LINE - 1}) / sizeof({ct})) % {w};
        if (h) {TOKEN}_run(la, rows, bc, 0, 0, h, s{extra});
        int p0 = h;
        for (; p0 + {w} <= {t.k}; p0 += {w})
            if ({"nf < p0 || nf >= p0 + " + str(w) if f32 else "1"}) {TOKEN}_run(la, rows, bc, p0, 0, {w}, s{plain});
            else {TOKEN}_run(la, rows, bc, p0, 0, {w}, s{extra});
        if (p0 < {t.k}) {TOKEN}_run(la, rows, bc, {t.k - w}, p0 - {t.k - w}, {w}, s{extra});
    }}"""


def _direct_steps(t: Thin) -> str:
    """A k block's steps ``kb .. ke`` on a contiguous lane operand: per step one vector load per
    `W` lanes (clamped lanes past ``rows``) and one FMA per lane and column."""
    ct = t.c_type
    fma = "dp_fma" if ct == "float" else "dp_fma_d"
    return f"""        for (int p = kb; p < ke; ++p)
            for (int c = 0; c < {t.tt}; ++c) {{
                const {ct} bv = bc[c][p * {t.bp}];
                for (int r = 0; r < {t.r}; ++r)
                    s[c][r] = {fma}(la[p * {t.lp} + (r < rows ? r : rows - 1)], bv, s[c][r]);
            }}"""


def tile_kernels(t: Thin, kb: int, checks: bool) -> str:
    """`tile_kernel` ``{TOKEN}_tile`` and, where a tile holds more than one vector, ``{TOKEN}_tile1``
    of one vector (the lanes past the whole tiles)."""
    one = tile_kernel(replace(t, vectors=1), kb, checks, "tile1") if t.vectors > 1 else ""
    return tile_kernel(t, kb, checks, "tile") + ("\n" + one if one else "")


def tile_kernel(t: Thin, kb: int, checks: bool, name: str) -> str:
    """``{TOKEN}_<name>``: one tile, ``rows`` valid lanes (of `R`) and ``cols`` valid columns (of
    `TT`), the lane operand at ``la`` (lane 0, step 0), the broadcast operand at ``bo`` (step 0,
    column 0), the output at ``out``; returns whether a stored value is non-finite. Inlined: with
    ``rows == R`` a constant the clamps fold and the lane loads are vector loads. ``kb``: the
    float32 k block. The sums ``s``: float32 a k block's (added to ``acc`` at its end), float64
    the whole ones; a transposed tile (one vector of lanes) keeps them as vectors ``s[c]``."""
    ct, w, r, tt = t.c_type, t.w, t.r, t.tt
    f32 = ct == "float"
    acc = (
        f"""    double acc[{tt}][{r}];
    for (int c = 0; c < {tt}; ++c)
        for (int r = 0; r < {r}; ++r) acc[c][r] = 0.0;
"""
        if f32
        else ""
    )
    if t.transposed:
        head = _transposed_run(t, kb) + "\n"
        setup = f"    typedef {TOKEN}_V V;\n"
        loop = f"""{acc}    V s[{tt}][{t.vectors}];
    for (int c = 0; c < {tt}; ++c)
        for (int g = 0; g < {t.vectors}; ++g) s[c][g] = (V)(({ct})0);
{"    int nf = " + str(kb) + ";" + chr(10) if f32 else ""}{_transposed_steps(t, kb)}
"""
        if f32:
            loop += f"""    for (int c = 0; c < {tt}; ++c)
        for (int r = 0; r < {r}; ++r) acc[c][r] += (double)s[c][r / {w}][r % {w}];
"""
        value = "(float)acc[c][r]" if f32 else f"s[c][r / {w}][r % {w}]"
    else:
        head, setup = "", ""
        if f32:
            loop = f"""{acc}    for (int kb = 0; kb < {t.k}; kb += {kb}) {{
        const int ke = {t.k} - kb < {kb} ? {t.k} : kb + {kb};
        float s[{tt}][{r}];
        for (int c = 0; c < {tt}; ++c)
            for (int r = 0; r < {r}; ++r) s[c][r] = 0.0f;
{_direct_steps(t)}
        for (int c = 0; c < {tt}; ++c)
            for (int r = 0; r < {r}; ++r) acc[c][r] += (double)s[c][r];
    }}
"""
            value = "(float)acc[c][r]"
        else:
            loop = f"""    double s[{tt}][{r}];
    for (int c = 0; c < {tt}; ++c)
        for (int r = 0; r < {r}; ++r) s[c][r] = 0.0;
    {{
        const int kb = 0, ke = {t.k};
{_direct_steps(t)}
    }}
"""
            value = "s[c][r]"
    check = "            bad |= dp_nonfinite(v);\n" if checks else ""
    return f"""{head}DP_FN int {TOKEN}_{name}(const {ct}* __restrict__ la, const {ct}* __restrict__ bo, int rows,
                             int cols, {ct}* __restrict__ out) {{
{setup}    const {ct}* bc[{tt}];
    for (int c = 0; c < {tt}; ++c) bc[c] = bo + (c < cols ? c : cols - 1) * {t.bs};
{loop}    int bad = 0;
    for (int c = 0; c < cols; ++c)
        for (int r = 0; r < rows; ++r) {{
            const {ct} v = {value};
            out[r * {t.ol} + c * {t.ot}] = v;
{check}        }}
    return bad;
}}"""


def driver_body(t: Thin, ct: Contraction) -> list[str]:
    """The statements of task ``task`` (after `contraction._bases` set ``ab`` / ``bb``; ``bt`` its
    batch, ``rem`` its block in the batch): its lane tiles, whole ones with a constant lane
    count, ORing their non-finite tests into ``bad``."""
    lane_base, bc_base = ("ab", "bb") if t.lanes_i else ("bb", "ab")
    lane_op, bc_op = ("a0", "a1") if t.lanes_i else ("a1", "a0")
    blocks_l = max(1, -(-t.lanes // t.lb))
    r, tt = t.r, t.tt
    lane, out = f"{lane_op} + {lane_base} + l * {t.ls}", f"o0 + l * {t.ol} + c * {t.ot}"
    return [
        f"const int l0 = (rem % {blocks_l}) * {t.lb}, c0 = (rem / {blocks_l}) * {t.tb};",
        f"const int le = {t.lanes} - l0 < {t.lb} ? {t.lanes} : l0 + {t.lb};",
        f"const int ce = {t.cols} - c0 < {t.tb} ? {t.cols} : c0 + {t.tb};",
        f"{t.c_type}* const o0 = a2 + bt * {ct.m * ct.n};",
        "int bad = 0;",
        f"for (int c = c0; c < ce; c += {tt}) {{",
        f"    const int cols = ce - c < {tt} ? ce - c : {tt};",
        f"    const {t.c_type}* const bo = {bc_op} + {bc_base} + c * {t.bs};",
        "    int l = l0;",
        f"    for (; l + {r} <= le; l += {r})",
        f"        bad |= {TOKEN}_tile({lane}, bo, {r}, cols, {out});",
        *(
            [
                f"    for (; l + {t.w} <= le; l += {t.w})",
                f"        bad |= {TOKEN}_tile1({lane}, bo, {t.w}, cols, {out});",
                # the last lanes as the whole vector ending there (its first lanes computed again,
                # the same bits stored again by this task), where the task holds a whole vector
                f"    if (l < le && le - l0 >= {t.w}) {{",
                f"        l = le - {t.w};",
                f"        bad |= {TOKEN}_tile1({lane}, bo, {t.w}, cols, {out});",
                "        l = le;",
                "    }",
            ]
            if t.vectors > 1
            else []
        ),
        "    if (l < le)",
        f"        bad |= {TOKEN}_{'tile1' if t.vectors > 1 else 'tile'}({lane}, bo, le - l, cols, {out});",
        "}",
    ]

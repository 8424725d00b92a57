"""The C++ lowering of contraction groups (``matmul``): a packed, register-blocked CPU driver and
a shared-memory tiled CUDA driver, one C++ unit for both devices.

Assumes: a fusion group of kind ``contraction``: one node whose op has a `Contraction`
(``OpDef.contraction``: where each output element reads), float32 or float64, reading two
materialised row-major operands (fusion writes them first) and writing its output; flat
buffers, as every generated kernel binds them. No op is named here: the layout is the op's data.

Guarantees: every output element ``C[b, i, j]`` is summed by one task or thread in one order,
the **reference order** (``a_p = A[b, i, p]``, ``b_p = B[b, p, j]``): float64, ``s = 0; for p =
0 .. k-1: s = fma(a_p, b_p, s)``, then ``C = s``; float32, ``p`` ascending in k blocks of `KB`
steps, each block a float32 sum from 0 advanced by ``s32 = fmaf(a_p, b_p, s32)``, the block sums
added in float64 in block order, ``C = (float) s`` (docs/backend.md gives why and the error
bound ``|C - AB| <= (KB u + u) |A||B|``). The CPU and CUDA drivers and any thread count give
the same bits; no atomics.

- CPU (`cpu_driver`, blocks by dtype and shape in `cpu_blocking`): a task is an output block of
  one batch (float64 `TM64` x `TN64`, float32 `TM32` x `TN32`, narrowed to a small product; the
  micro tile is the default one below or, for a product of 1 to 4 rows, a thin one of `TILES`,
  the same sums in the same order); consecutive tasks run down a column of
  blocks, so they share B's column strip (it stays in L2 while A's row blocks stream). It walks
  ``k`` in chunks (float64 `KC64`; float32 one k block, `KB`): packs the chunk's columns of B in
  the accumulation type, zero-padded to whole micro tiles (contiguous, in the order the micro
  kernel reads them), or reads them in place where they need no padding and the task's block of
  B fits `B_IN_PLACE` (`Blocking.b_pitch`: the same values in the same order), and runs a micro
  kernel per micro tile (float64 `MR64` x `NR64` double accumulators, from 0 in the first chunk,
  continuing the task's double buffer after it; float32 `MR32` x `NR32` float accumulators from 0,
  added to it per block), ``p`` ascending, one broadcast of A read in place (either transpose flag
  is a stride; a padded row rereads the last valid one) and a row of contiguous B values per step
  (the loop over columns is the vectorised one). Accumulators cross chunks through the task-local
  double buffer (exact), so chunking does not change the order; the last chunk stores its tile's
  results straight from the micro kernel (a product of one chunk has no buffer at all). Padded
  rows and columns are never stored. The partition depends on the shapes only (`Plan`): tasks
  split over threads. The CPU build of a
  CUDA plan (the export's replay) packs A too, in `TILE` x `TILE` blocks of `MR` x `NR` tiles.
- CUDA (`cuda_driver`): a block of `BLOCK` threads per `TILE` x `TILE` output tile, one thread
  per output element. Per ``k`` tile, each thread loads one element of the A tile and one of
  the B tile into shared memory (the thread index runs along the operand's contiguous axis,
  so loads coalesce for either transpose flag; past an edge the tile holds 0), then
  ``__syncthreads()``, then adds the tile's products ``p`` ascending (only ``p < k``: padding
  adds nothing), then ``__syncthreads()``. Launch: ``dim`` = blocks x `BLOCK` with blocks of
  `BLOCK` threads (Warp's default ``block_dim`` and the export's; another block size traps),
  so every thread of a block reaches each barrier. Built as host C++ with ``DP_CUDA`` (the export's ``--dry`` replay,
  which runs one task at a time), each thread performs its whole block's tile loads itself
  (the same load code for every thread index) and skips the barriers: the same addressing,
  bounds and order, without the sharing.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from dpt_ir.backends.base import Target
from dpt_ir.backends.cxx import product_epilogue, thin
from dpt_ir.backends.cxx.common import C_TYPES, INDEX_LIMIT, TOKEN
from dpt_ir.backends.cxx.product_epilogue import Epilogue
from dpt_ir.backends.cxx.units import Unit, root_slot, status_flag, unit_launch
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup
from dpt_ir.ir.records import origin_of
from dpt_ir.ir.registry import Contraction

MR, NR, KC = 4, 8, 128  # the CPU build of a CUDA plan (the export's replay): micro tile, float64 k chunk
# float32: sums in float32 within a k block of KB steps, in float64 across blocks (module docstring)
# CPU: a task whose whole block of B (k x tn values) is at most this many bytes, of whole micro
# tiles, one k chunk and row-major, reads B in place instead of packing it: it stays in L1 across
# the task's row tiles (32 KiB here), so a pack only costs its copy (64² float32 5.6 -> 5.3 us,
# float64 10.2 -> 9.6, 256 x 64² float32 1.47 -> 1.38 ms; the same bits).
B_IN_PLACE = 32 * 1024
KB = 256  # the k block; CPU: also its chunk, so a chunk's sums stay in float32 registers
TM64, TN64, MR64, NR64, KC64 = 128, 64, 4, 32, 256  # CPU, float64: block, micro tile (16 AVX-512 registers), chunk
TM32, TN32 = 256, 64  # CPU, float32: a task's output block
MR32, NR32 = 8, 32  # CPU, float32: the micro tile, MR32 x NR32 float accumulators (16 AVX-512 registers)
# CPU micro tiles (rows, columns) by AVX-512 lanes of the packed type, the first the default: each
# holds at most 16 vector accumulators; the thin ones fit a product with few rows (a vector times a
# matrix fills one row of an 8-row tile: 1/8 of its FMAs count). No tile is narrower than 32
# columns: clang's code for 16 x 16 float32 tiles ran a matrix-vector product 18x slower.
TILES = {16: ((MR32, NR32), (4, 64), (1, 128), (2, 128)), 8: ((MR64, NR64), (1, 64), (2, 64))}
TILE = 16  # CUDA: output tile edge and k tile, one thread per output element
BLOCK = TILE * TILE  # CUDA: threads per block
PAD = TILE + 1  # CUDA: a shared tile's row pitch (no bank conflicts on column reads)


@dataclass(frozen=True)
class Plan:
    """What a contraction's drivers are generated from: the layout, the element type, and the
    launch size on the device (CPU: tasks; CUDA: threads, whole blocks)."""

    ct: Contraction
    c_type: str
    dim: int


def contraction_of(graph: Graph, root: str) -> Contraction:
    """The `Contraction` of node ``root`` (its op's layout for its attributes and input shapes)."""
    node = graph.node_map[root]
    op = node.opdef
    if op.contraction is None:
        raise ContractError(f"node {root!r}: expected an op with a contraction layout, found op {op.name!r}")
    attrs = op.parse_attrs(node.attrs, root)
    return op.contraction(attrs, tuple(graph.types[i].shape for i in node.inputs))


def plan(graph: Graph, root: str, device: str) -> Plan:
    """The `Plan` of ``root`` on ``device``; ContractError when a buffer or the launch would
    overflow the drivers' 32-bit indices."""
    ct = contraction_of(graph, root)
    dtype = graph.types[root].dtype
    if dtype not in ("float32", "float64"):
        raise ContractError(f"node {root!r}: a contraction needs float32 or float64, found {dtype}")
    batches = math.prod(ct.batch)
    direct = choose(ct, C_TYPES[dtype]) if device == "cpu" else None
    if direct is not None:
        dim = batches * direct.tasks_per_batch()
    elif device == "cpu":
        bk = cpu_blocking(ct, C_TYPES[dtype])
        dim = batches * -(-ct.m // bk.tm) * -(-ct.n // bk.tn)
    else:
        dim = batches * -(-ct.m // TILE) * -(-ct.n // TILE) * BLOCK
    sizes = [graph.types[v].size for v in (*graph.node_map[root].inputs, root)]
    if max(*sizes, dim) > INDEX_LIMIT:
        who = origin_of(graph, root) or f"op {graph.node_map[root].opdef.name!r}"
        raise ContractError(
            f"{who} (node {root!r}): the C++ backend indexes a product's operands, result and launch with "
            f"32-bit integers, at most {INDEX_LIMIT} (2**31 - 2**20) elements each; found sizes {sizes} and a "
            f"launch of {dim} (expected smaller operands: split the product into batches)"
        )
    return Plan(ct, C_TYPES[dtype], dim)


def _bases(ct: Contraction, bt: str) -> list[str]:
    """Statements setting ``ab`` / ``bb``, the flat offsets of batch ``bt``'s matrices."""
    out = [f"int q = {bt}; (void)q;"]
    a_terms, b_terms = [], []
    for d in reversed(range(len(ct.batch))):
        out.append(f"const int e{d} = q % {ct.batch[d]}; q /= {ct.batch[d]};")
        a_terms += [f"e{d} * {ct.a_batch[d]}"] if ct.a_batch[d] else []
        b_terms += [f"e{d} * {ct.b_batch[d]}"] if ct.b_batch[d] else []
    out.append(f"const int ab = {' + '.join(a_terms) or '0'};")
    out.append(f"const int bb = {' + '.join(b_terms) or '0'};")
    return out


def _store(checks: bool) -> list[str]:
    """Store ``v`` (the rounded sum) at output offset ``co`` and OR its non-finite test into ``bad``."""
    return ["a2[co] = v;", *(["bad |= dp_nonfinite(v);"] if checks else [])]


def micro_kernel(
    c_type: str,
    mr: int,
    nr: int,
    direct: tuple[int, int] | None,
    ldc: int,
    checks: bool,
    vectors: bool,
    b_pitch: int = 0,
) -> str:
    """``mr x nr`` accumulators over ``kc`` steps (``p`` ascending, one FMA each) of one k chunk;
    returns whether a stored value is non-finite (0 when it stores nothing, or without ``checks``).

    float32: sums from 0 in float (one k block); float64: sums start at 0 in the ``first`` chunk and
    continue the task's double buffer ``acc`` after it. A chunk that is not the ``last`` leaves its
    sums in ``acc`` (float32: ``acc = s`` in the first chunk, ``acc += s`` after it, exact in double;
    float64: ``acc = s``). The ``last`` chunk stores the tile's ``rows x cols`` results at ``out``
    (row pitch ``ldc``) in place of the buffer: float32 ``(float)(acc + (double)s)``, or ``s``
    itself when it is also the first (``(float)(0.0 + (double)s) == s``: a float sum from +0 is
    never -0, so adding +0 changes no bit); float64 ``s``. The order per element is the reference
    order; which chunk runs where never changes it. ``direct``: A's (row, column) strides, read in
    place at ``a`` (``rows`` valid rows; a padded row rereads the last valid one, and its sums are
    never stored), else A's packed panel ``ap[p * mr + r]``. B's row ``p`` is at ``bp + p * nr``
    (a packed panel), or ``bp + p * b_pitch`` where B is read in place (``vectors`` only).

    ``vectors`` (the CPU plans): each row's sums are AVX-512-wide vectors (`_vector_steps`), so
    the accumulators are registers whatever the optimisation level, and a whole tile whose sums are
    its results (`_whole_tile`) is stored from them; without it (a CUDA plan's host replay, also
    read by NVRTC) plain loops, left to clang's vectorisers."""
    f32 = c_type == "float"
    if direct is None:
        head, setup, read = f"const {c_type}* __restrict__ ap", "", f"ap[p * {mr} + r]"
    else:
        head, read = f"const {c_type}* __restrict__ a", f"ra[r][p * {direct[1]}]"
        setup = (
            f"    const {c_type}* ra[{mr}];\n"
            f"    for (int r = 0; r < {mr}; ++r) ra[r] = a + (r < rows ? r : rows - 1) * {direct[0]};\n"
        )
    cell = f"acc[r * {nr} + c]"
    steps = _vector_steps(c_type, mr, nr, read, b_pitch or nr) if vectors else _scalar_steps(c_type, mr, nr, read)
    keep = f"{cell} = first ? (double)e[r][c] : {cell} + (double)e[r][c]" if f32 else f"{cell} = e[r][c]"
    value = f"first ? e[r][c] : (float)({cell} + (double)e[r][c])" if f32 else "e[r][c]"
    check = "            bad |= dp_nonfinite(v);\n" if checks else ""
    whole = _whole_tile(c_type, mr, nr, ldc, checks) if vectors else ""
    return f"""DP_FN int {TOKEN}_micro_{c_type}({head}, int rows, int cols, const {c_type}* __restrict__ bp, int kc,
                                double* __restrict__ acc, int first, int last, {c_type}* __restrict__ out) {{
{setup}{steps}
{whole}    if (!last) {{
        for (int r = 0; r < {mr}; ++r)
            for (int c = 0; c < {nr}; ++c) {keep};
        return 0;
    }}
    int bad = 0;
    for (int r = 0; r < rows; ++r)
        for (int c = 0; c < cols; ++c) {{
            const {c_type} v = {value};
            out[r * {ldc} + c] = v;
{check}        }}
    return bad;
}}"""


def _whole_tile(c_type: str, mr: int, nr: int, ldc: int, checks: bool) -> str:
    """A vector micro kernel's store of a whole tile (``rows x cols`` = ``mr x nr``) in the last
    chunk whose sums are its results (float32: also the first chunk; float64: always): each
    vector ``s[r][q]`` stored as it is, the non-finite test (`dp_nonfinite`'s, on the exponent
    bits) OR-ed over vectors. The same values as the element loop after it, which an edge tile
    and a float32 sum crossing k blocks take. Why: that loop reads the tile back from its copy
    ``e`` element by element (64² float32, kernel alone: 5.35 -> 4.55 us, the FMAs' floor 4.5)."""
    f32 = c_type == "float"
    w = min(nr, 16 if f32 else 8)
    bits, exponent = ("int", "0x7f800000") if f32 else ("long long", "0x7ff0000000000000LL")
    test = (
        f"                {{ VI b; __builtin_memcpy(&b, &s[r][q], sizeof(V)); m |= (b & {exponent}) == {exponent}; }}\n"
        if checks
        else ""
    )
    return f"""    if (last && {"first && " if f32 else ""}rows == {mr} && cols == {nr}) {{  // the sums are the results
        typedef {bits} VI __attribute__((ext_vector_type({w})));
        VI m = (VI)0;
        for (int r = 0; r < {mr}; ++r)
            for (int q = 0; q < {nr // w}; ++q) {{
                __builtin_memcpy(out + r * {ldc} + q * {w}, &s[r][q], sizeof(V));
{test}            }}
        return __builtin_reduce_or(m) != 0;
    }}
"""


def _scalar_steps(c_type: str, mr: int, nr: int, read: str) -> str:
    """The k loop over scalar sums ``s[r][c]``, then their copy ``e`` (`micro_kernel`)."""
    init, fma = ("0.0f", "dp_fma") if c_type == "float" else (f"first ? 0.0 : acc[r * {nr} + c]", "dp_fma_d")
    return f"""    {c_type} s[{mr}][{nr}];
    for (int r = 0; r < {mr}; ++r)
        for (int c = 0; c < {nr}; ++c) s[r][c] = {init};
    for (int p = 0; p < kc; ++p) {{
        for (int r = 0; r < {mr}; ++r) {{
            const {c_type} av = {read};
            for (int c = 0; c < {nr}; ++c) s[r][c] = {fma}(av, bp[p * {nr} + c], s[r][c]);
        }}
    }}
    // The sums leave the registers in one whole-tile copy (constant trip counts: the accumulators
    // stay registers in the k loop); the epilogue reads the copy.
    {c_type} e[{mr}][{nr}];
    for (int r = 0; r < {mr}; ++r)
        for (int c = 0; c < {nr}; ++c) e[r][c] = s[r][c];"""


def _vector_steps(c_type: str, mr: int, nr: int, read: str, pitch: int) -> str:
    """The k loop over vector sums ``s[r][q]`` (``w`` lanes: 64 bytes, or ``nr`` where narrower),
    per step ``nr / w`` loads of B's row (``pitch`` values after the last), per row, one broadcast of A and one FMA per
    vector (`__builtin_elementwise_fma`: each lane the scalar loop's FMA, the same bits), then
    their copy ``e``. Written as vectors because clang's loop vectoriser at -O3 vectorised the
    scalar form across the rows, with gathers and scatters of the sums (float32 512²: 30x the
    time); the explicit form leaves it no loop over the sums to pick."""
    w = min(nr, 16 if c_type == "float" else 8)
    g = nr // w
    if nr % w:
        raise ContractError(f"a vector micro tile needs whole vectors of {w} lanes per row, found {nr} columns")
    init = (
        "s[r][q] = (V)0.0f;"
        if c_type == "float"
        else f"{{ s[r][q] = (V)0.0; if (!first) __builtin_memcpy(&s[r][q], acc + r * {nr} + q * {w}, sizeof(V)); }}"
    )
    return f"""    typedef {c_type} V __attribute__((ext_vector_type({w})));
    V s[{mr}][{g}];
    for (int r = 0; r < {mr}; ++r)
        for (int q = 0; q < {g}; ++q) {init}
    for (int p = 0; p < kc; ++p) {{
        V b[{g}];
        for (int q = 0; q < {g}; ++q) __builtin_memcpy(&b[q], bp + p * {pitch} + q * {w}, sizeof(V));
        for (int r = 0; r < {mr}; ++r) {{
            const V av = (V)({read});
            for (int q = 0; q < {g}; ++q) s[r][q] = __builtin_elementwise_fma(av, b[q], s[r][q]);
        }}
    }}
    // The sums leave the registers in one whole-tile copy; the epilogue reads the copy.
    {c_type} e[{mr}][{nr}];
    for (int r = 0; r < {mr}; ++r)
        for (int q = 0; q < {g}; ++q) __builtin_memcpy(&e[r][q * {w}], &s[r][q], sizeof(V));"""


@dataclass(frozen=True)
class Blocking:
    """A CPU driver's blocks: the task's output block ``tm x tn``, the micro tile ``mr x nr``, the
    k chunk ``kc`` and the packed element type (its micro kernel is ``_micro_<packed>``)."""

    tm: int
    tn: int
    mr: int
    nr: int
    kc: int
    packed: str
    direct_a: bool = False  # the micro kernel reads A in place (no A panel)
    b_pitch: int = 0  # > 0: the micro kernel reads B in place, rows this many values apart (no B panel)


def blocking(p: Plan, cuda: bool) -> Blocking:
    """float64: double panels, `MR` x `NR` tiles, chunks of `KC`; float32: float panels, chunks of
    one k block (`KB`), `MR32` x `NR32` tiles; a CUDA plan's replay: `TILE` x `TILE` blocks."""
    if cuda:  # the replay: the CUDA partition's tiles, packed panels
        return Blocking(TILE, TILE, MR, NR, KB if p.c_type == "float" else KC, p.c_type)
    return cpu_blocking(p.ct, p.c_type)


def cpu_blocking(ct: Contraction, c_type: str) -> Blocking:
    """The CPU driver's blocks for product ``ct``: the default micro tile of `TILES`, or the one
    whose padded tiles waste the fewest FMAs on ``ct``'s rows and columns where that counts at
    least twice the default's share of them (thin products), task blocks of
    float32 `TM32` x `TN32` or float64 `TM64` x `TN64` (widened to a whole micro tile, narrowed to
    the product's whole micro tiles), k chunks of `KB` (float32: one k block) or `KC64`. A is read
    in place, transposed or not: packing a transposed A's panels cost more than it saved (the MLP
    layer's dW = Xᵀ dY, 512², float32: 2.6 -> 3.4 ms with packed panels)."""
    f32 = c_type == "float"

    def used(extent: int, edge: int) -> float:  # the fraction of padded rows (or columns) that count
        return extent / (edge * -(-extent // edge)) if extent else 1.0

    lanes = 16 if f32 else 8
    tiles = TILES[lanes]

    def share(tile: tuple[int, int]) -> float:  # of the FMAs a step could issue, those that count
        return used(ct.m, tile[0]) * used(ct.n, tile[1]) * tile[0] * tile[1] / lanes / 16

    # A thin tile runs fewer accumulators per load than the default, so it must count at least
    # twice the default's share of its FMAs (a vector times a matrix: 1/2 against 1/8).
    fits = [t for t in tiles[1:] if share(t) >= 2 * share(tiles[0])]
    mr, nr = max(fits, key=share) if fits else tiles[0]  # max: the first of equals
    tm, tn = (TM32, TN32) if f32 else (TM64, TN64)
    tm = min(max(tm, mr), mr * max(1, -(-ct.m // mr)))
    tn = min(max(tn, nr), nr * max(1, -(-ct.n // nr)))
    kc = KB if f32 else KC64
    in_place = ct.b_col == 1 and ct.n % nr == 0 and ct.k <= kc and ct.k * tn * (4 if f32 else 8) <= B_IN_PLACE
    return Blocking(tm, tn, mr, nr, kc, c_type, direct_a=True, b_pitch=ct.b_row if in_place else 0)


def choose(ct: Contraction, c_type: str) -> thin.Thin | None:
    """The direct kernel (`thin`) of ``ct`` on the CPU, with lanes along the output rows or
    columns, when it issues fewer vector instructions than the packed kernel (`thin.cost`
    against `thin.packed_cost`, the module docstring of `thin`), else None: the packed kernel."""
    bk = cpu_blocking(ct, c_type)
    best, least = None, thin.packed_cost(ct, bk.mr, bk.nr, bk.tm, 16 if c_type == "float" else 8)
    for lanes_i in (True, False):
        t = thin.thin_of(ct, c_type, lanes_i)
        if t is not None and thin.cost(t) < least:
            best, least = t, thin.cost(t)
    return best


def _pack_b(ct: Contraction, nr: int, kc: int, pk: str, zero: str, by_blocks: bool = False) -> list[str]:
    """The loops packing the chunk's columns of B into ``bp`` (micro panels of ``nr`` columns,
    ``kc`` rows each, zero past the block's ``nc`` columns), reading along B's contiguous axis:
    along a row of B (one step ``p``, the tile's columns) when its columns are contiguous, else
    (B stored transposed) along a column (one column ``j``, 16 steps at a time, so the 16 panel
    lines the stores walk stay in L1 across the columns). ``by_blocks`` (`_transposed_pack`): a
    whole 16 x 16 block of the transposed B is transposed in registers (`transpose16`), the rest
    element by element; the same values in the same places."""
    src = f"({pk})a1[bb + (p0 + p) * {ct.b_row} + (j0 + j) * {ct.b_col}]"
    dst = f"bp[(nj * {kc} + p) * {nr} + c]"
    if ct.b_col == 1 or ct.b_row != 1:
        return [
            "    for (int nj = 0; nj < nt; ++nj)",
            "        for (int p = 0; p < kc; ++p)",
            f"            for (int c = 0; c < {nr}; ++c) {{",
            f"                const int j = nj * {nr} + c;",
            f"                {dst} = j < nc ? {src} : {zero};",
            "            }",
        ]
    if by_blocks:
        return [
            "    for (int nj = 0; nj < nt; ++nj)",
            "        for (int q = 0; q < kc; q += 16)",
            f"            for (int c0 = 0; c0 < {nr}; c0 += 16) {{",
            "                const int pe = kc - q < 16 ? kc - q : 16;",
            f"                if (pe == 16 && nj * {nr} + c0 + 16 <= nc) {{",
            f"                    {TOKEN}_tr16(a1 + bb + p0 + q + (j0 + nj * {nr} + c0) * {ct.b_col}, "
            f"bp + (nj * {kc} + q) * {nr} + c0);",
            "                    continue;",
            "                }",
            "                for (int c = c0; c < c0 + 16; ++c) {",
            f"                    const int j = nj * {nr} + c;",
            "                    if (j < nc)",
            f"                        for (int p = q; p < q + pe; ++p) {dst} = {src};",
            "                    else",
            f"                        for (int p = q; p < q + pe; ++p) {dst} = {zero};",
            "                }",
            "            }",
        ]
    return [
        "    for (int nj = 0; nj < nt; ++nj)",
        "        for (int q = 0; q < kc; q += 16)",
        f"            for (int c = 0; c < {nr}; ++c) {{",
        f"                const int j = nj * {nr} + c;",
        "                const int pe = kc - q < 16 ? kc - q : 16;",
        "                if (j < nc)",
        f"                    for (int p = q; p < q + pe; ++p) {dst} = {src};",
        "                else",
        f"                    for (int p = q; p < q + pe; ++p) {dst} = {zero};",
        "            }",
    ]


def transpose16(ld: int, pitch: int) -> str:
    """``{TOKEN}_tr16(src, dst)``: the 16 x 16 float block whose row ``i`` is ``src + i ld`` (16
    consecutive values) written transposed, row ``s`` at ``dst + s pitch``: four butterfly stages
    of two-source shuffles (at stage ``b``, rows ``i`` and ``i + b`` swap their off-diagonal
    ``b``-lane blocks), then 16 vector stores. Values are moved, never combined: the same bits."""
    stages = []
    for b in (8, 4, 2, 1):
        lo = ", ".join(str(k if not k & b else 16 + k - b) for k in range(16))
        hi = ", ".join(str(k + b if not k & b else 16 + k) for k in range(16))
        stages.append(
            f"    for (int i = 0; i < 16; ++i)\n"
            f"        if (!(i & {b})) {{\n"
            f"            const V x = r[i], y = r[i + {b}];\n"
            f"            r[i] = __builtin_shufflevector(x, y, {lo});\n"
            f"            r[i + {b}] = __builtin_shufflevector(x, y, {hi});\n"
            f"        }}\n"
        )
    return (
        f"DP_FN void {TOKEN}_tr16(const float* __restrict__ src, float* __restrict__ dst) {{\n"
        "    typedef float V __attribute__((ext_vector_type(16)));\n"
        "    V r[16];\n"
        f"    for (int i = 0; i < 16; ++i) __builtin_memcpy(&r[i], src + i * {ld}, sizeof(V));\n"
        + "".join(stages)
        + f"    for (int s = 0; s < 16; ++s) __builtin_memcpy(dst + s * {pitch}, &r[s], sizeof(V));\n"
        "}"
    )


def _transposed_pack(p: Plan, bk: Blocking, cuda: bool) -> bool:
    """Whether ``p``'s driver packs a transposed float32 B by 16 x 16 register transposes
    (`_pack_b`, `transpose16`): CPU plans only (a CUDA plan's host replay is also read by NVRTC)."""
    ct = p.ct
    return not cuda and ct.b_col != 1 and ct.b_row == 1 and bk.packed == "float" and bk.nr % 16 == 0


def _epilogue_rows(epi: Epilogue | None, rows: tuple[str, str], first: str, last: str, at: str) -> list[str]:
    """The epilogue's run over a finished block: for each of its output rows ``r`` in ``rows``
    (C++ bounds ``lo, hi``), the flat elements ``[o + first, o + last)`` with ``o`` = ``at`` (C++
    of ``r``); nothing without an epilogue."""
    if epi is None:
        return []
    lo, hi = rows
    return [f"for (int r = {lo}; r < {hi}; ++r) {{ const int o = {at}; {epi.call(f'o + {first}', f'o + {last}')} }}"]


def _epilogue_flags(epi: Epilogue | None, checks: bool) -> tuple[list[str], list[str]]:
    """The declaration of the epilogue's flags and their stores after the product's status slot."""
    if epi is None:
        return [], []
    return [epi.declare()], epi.stores(1 if checks else 0, checks)


def cpu_driver(p: Plan, sig: str, checks: bool, cuda: bool, epi: Epilogue | None = None) -> str:
    """Task ``t``: one output block of one batch (`blocking`; see the module docstring). Built
    for a CUDA launch (``cuda``: the export's CPU replay of a CUDA plan), task ``t`` is a CUDA
    thread: the first thread of each block computes the block's `TILE` x `TILE` tile, the others
    nothing. ``epi``: after the block's last chunk, its epilogue runs on the block's rows (they
    are still in L2: a block is at most 64 KiB)."""
    direct = None if cuda else choose(p.ct, p.c_type)
    if direct is not None:
        return _thin_driver(p, direct, sig, checks, epi)
    ct, bk = p.ct, blocking(p, cuda)
    tm, tn, mr_, nr_, kc_, pk = bk.tm, bk.tn, bk.mr, bk.nr, bk.kc, bk.packed
    zero = "0.0" if pk == "double" else "0.0f"
    a_arg = (
        f"a0 + ab + (i0 + mi * {mr_}) * {ct.a_row} + p0 * {ct.a_col}"
        if bk.direct_a
        else f"ap + mi * {kc_ * mr_}"
    )
    b_arg = f"a1 + bb + p0 * {ct.b_row} + j0 + nj * {nr_}" if bk.b_pitch else f"bp + nj * {kc_ * nr_}"
    # >= 1: an empty product launches nothing, but its text still compiles
    blocks_m, blocks_n = max(1, -(-ct.m // tm)), max(1, -(-ct.n // tn))
    per_batch = blocks_m * blocks_n
    # k = 0 still runs one (empty) chunk: it stores the zero sums
    chunks = max(1, -(-ct.k // kc_))
    acc_arg = f"acc + (mi * {tn // nr_} + nj) * {mr_ * nr_}" if chunks > 1 else "nullptr"
    task = [f"if (t % {BLOCK} != 0) return;", f"const int task = t / {BLOCK};"] if cuda else ["const int task = t;"]
    flags, stores = _epilogue_flags(epi, checks)
    body = [
        *task,
        f"const int bt = task / {per_batch}, rem = task % {per_batch};",
        f"const int i0 = (rem % {blocks_m}) * {tm}, j0 = (rem / {blocks_m}) * {tn};",
        f"const int mr = {ct.m} - i0 < {tm} ? {ct.m} - i0 : {tm};",
        f"const int nc = {ct.n} - j0 < {tn} ? {ct.n} - j0 : {tn};",
        f"const int mt = (mr + {mr_ - 1}) / {mr_}, nt = (nc + {nr_ - 1}) / {nr_};",
        *_bases(ct, "bt"),
        # the sums crossing chunks (none with one chunk: the last chunk stores them)
        *([f"double acc[{tm * tn}];"] if chunks > 1 else []),
        *([] if bk.direct_a else [f"{pk} ap[{tm * kc_}];"]),
        *([] if bk.b_pitch else [f"{pk} bp[{kc_ * tn}];"]),
        f"{p.c_type}* const c0 = a2 + (bt * {ct.m} + i0) * {ct.n} + j0;",
        "int bad = 0;",
        f"for (int ch = 0; ch < {chunks}; ++ch) {{",
        f"    const int p0 = ch * {kc_};",
        f"    const int kc = {ct.k} - p0 < {kc_} ? {ct.k} - p0 : {kc_};",
        *(
            []
            if bk.direct_a
            else [
                "    for (int mi = 0; mi < mt; ++mi)",
                "        for (int p = 0; p < kc; ++p)",
                f"            for (int r = 0; r < {mr_}; ++r) {{",
                f"                const int i = mi * {mr_} + r;",
                f"                ap[(mi * {kc_} + p) * {mr_} + r] = i < mr ? "
                f"({pk})a0[ab + (i0 + i) * {ct.a_row} + (p0 + p) * {ct.a_col}] : {zero};",
                "            }",
            ]
        ),
        *([] if bk.b_pitch else _pack_b(ct, nr_, kc_, pk, zero, _transposed_pack(p, bk, cuda))),
        "    for (int mi = 0; mi < mt; ++mi) {",
        f"        const int rows = mr - mi * {mr_} < {mr_} ? mr - mi * {mr_} : {mr_};",
        "        for (int nj = 0; nj < nt; ++nj) {",
        f"            const int cols = nc - nj * {nr_} < {nr_} ? nc - nj * {nr_} : {nr_};",
        f"            bad |= {TOKEN}_micro_{pk}({a_arg}, rows, cols, {b_arg}, kc,",
        f"                {acc_arg}, ch == 0, ch == {chunks - 1},",
        f"                c0 + mi * {mr_ * ct.n} + nj * {nr_});",
        "        }",
        "    }",
        "}",
        *flags,
        *_epilogue_rows(epi, ("0", "mr"), "0", "nc", f"(bt * {ct.m} + i0 + r) * {ct.n} + j0"),
        *status_flag(checks),
        *stores,
    ]
    return "\n".join([f"DP_FN void {TOKEN}_cpu({sig}) {{", *("    " + s for s in body), "}"])


def _thin_driver(p: Plan, t: thin.Thin, sig: str, checks: bool, epi: Epilogue | None) -> str:
    """Task ``t``: one block of lanes x columns of one batch on the direct kernel (`thin`); then
    ``epi`` on the block's output rows (lanes along the rows: each lane's columns ``[c0, ce)``;
    along the columns: each column's lanes ``[l0, le)``, a row of the output each)."""
    per_batch = t.tasks_per_batch()
    flags, stores = _epilogue_flags(epi, checks)
    ct = p.ct
    rows, first, last = (("l0", "le"), "c0", "ce") if t.lanes_i else (("c0", "ce"), "l0", "le")
    body = [
        f"const int bt = t / {per_batch}, rem = t % {per_batch};",
        *_bases(ct, "bt"),
        *thin.driver_body(t, ct),
        *flags,
        *_epilogue_rows(epi, rows, first, last, f"(bt * {ct.m} + r) * {ct.n}"),
        *status_flag(checks),
        *stores,
    ]
    return "\n".join([f"DP_FN void {TOKEN}_cpu({sig}) {{", *("    " + s for s in body), "}"])


def _tile_load(ct: Contraction, c_type: str) -> str:
    """The loads thread ``(ty, tx)`` of a block does for the ``k`` tile at ``p0``: one element
    of the A tile (``As[row][p]``) and one of the B tile (``Bs[p][column]``), ``tx`` along each
    operand's contiguous axis (coalesced), 0 past an edge."""
    a_rows = ct.a_col != 1 and ct.a_row == 1  # A stored transposed: rows are contiguous
    b_cols = ct.b_col == 1 or ct.b_row != 1  # B's columns contiguous (or neither axis is)
    ar, ap = ("tx", "ty") if a_rows else ("ty", "tx")
    bq, bc = ("ty", "tx") if b_cols else ("tx", "ty")
    return f"""DP_FN void {TOKEN}_load(const {c_type}* a0, const {c_type}* a1, int ab, int bb, int i0, int j0, int p0,
                             int ty, int tx, {c_type}* As, {c_type}* Bs) {{
    const int ai = i0 + {ar}, apk = p0 + {ap};
    As[{ar} * {PAD} + {ap}] = (ai < {ct.m} && apk < {ct.k}) ? a0[ab + ai * {ct.a_row} + apk * {ct.a_col}] : ({c_type})0;
    const int bpk = p0 + {bq}, bj = j0 + {bc};
    Bs[{bq} * {PAD} + {bc}] = (bpk < {ct.k} && bj < {ct.n}) ? a1[bb + bpk * {ct.b_row} + bj * {ct.b_col}] : ({c_type})0;
}}"""


def cuda_driver(p: Plan, sig: str, checks: bool, epi: Epilogue | None = None) -> str:
    """Thread ``t``: output element ``(ty, tx)`` of tile ``t / BLOCK`` (see the module docstring),
    then ``epi`` at that element."""
    ct, t_ = p.ct, p.c_type
    f32 = t_ == "float"  # float32 sums in k blocks of `KB`, as the CPU driver's
    grid_m, grid_n = max(1, -(-ct.m // TILE)), max(1, -(-ct.n // TILE))  # >= 1, as in `cpu_driver`
    flags, stores = _epilogue_flags(epi, checks)
    device = "defined(__CUDACC__) || defined(__CUDACC_RTC__)"
    body = [
        f"const int blk = t / {BLOCK}, lane = t % {BLOCK};",
        f"const int ty = lane / {TILE}, tx = lane % {TILE};",
        f"const int bt = blk / {grid_m * grid_n}, tile = blk % {grid_m * grid_n};",
        f"const int i0 = (tile / {grid_n}) * {TILE}, j0 = (tile % {grid_n}) * {TILE};",
        *_bases(ct, "bt"),
        f"#if {device}",
        f"if (blockDim.x != {BLOCK}) __trap();  // the tile mapping and the barriers need whole blocks of {BLOCK}",
        f"__shared__ {t_} As[{TILE * PAD}];",
        f"__shared__ {t_} Bs[{TILE * PAD}];",
        "#else",
        f"{t_} As[{TILE * PAD}];",
        f"{t_} Bs[{TILE * PAD}];",
        "#endif",
        "double s = 0.0;",
        *(["float s32 = 0.0f;  // the current k block's sum (float32 within a block, float64 across)"] if f32 else []),
        f"for (int p0 = 0; p0 < {ct.k}; p0 += {TILE}) {{",
        f"#if {device}",
        f"    {TOKEN}_load(a0, a1, ab, bb, i0, j0, p0, ty, tx, As, Bs);",
        "    __syncthreads();",
        "#else  // host replay (DP_CUDA on the CPU): this thread does its whole block's loads",
        f"    for (int l = 0; l < {BLOCK}; ++l)",
        f"        {TOKEN}_load(a0, a1, ab, bb, i0, j0, p0, l / {TILE}, l % {TILE}, As, Bs);",
        "#endif",
        f"    const int pe = {ct.k} - p0 < {TILE} ? {ct.k} - p0 : {TILE};",
        "    for (int pp = 0; pp < pe; ++pp)",
        *(
            [
                f"        s32 = dp_fma(As[ty * {PAD} + pp], Bs[pp * {PAD} + tx], s32);",
                f"    if ((p0 + {TILE}) % {KB} == 0 || p0 + {TILE} >= {ct.k}) {{ s += (double)s32; s32 = 0.0f; }}",
            ]
            if f32
            else [f"        s = dp_fma_d((double)As[ty * {PAD} + pp], (double)Bs[pp * {PAD} + tx], s);"]
        ),
        f"#if {device}",
        "    __syncthreads();",
        "#endif",
        "}",
        "int bad = 0;",
        *flags,
        f"if (i0 + ty < {ct.m} && j0 + tx < {ct.n}) {{",
        f"    const {t_} v = ({t_})s;",
        f"    const int co = (bt * {ct.m} + i0 + ty) * {ct.n} + j0 + tx;",
        *("    " + s for s in _store(checks)),
        *(["    " + epi.call("co", "co + 1")] if epi is not None else []),
        "}",
        *status_flag(checks),
        *stores,
    ]
    return "\n".join([f"DP_FN void {TOKEN}_cuda({sig}) {{", *("    " + s for s in body), "}"])


def contraction_kernels(
    graph: Graph, group: KernelGroup, name: str, slots: list[Any], checks: bool, target: Target
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The one launch of contraction group ``group`` on ``target`` and its native definition
    (stub name -> C++ and stub text), as `dpt_ir.backends.cxx.kernels.group_kernels` gives them;
    with an ``epilogue``, its pointwise members run on each stored output region
    (`product_epilogue`)."""
    device = target.kind
    (root,) = (r for r in group.roots if r not in group.epilogue)
    p = plan(graph, root, device)
    a, b = graph.node_map[root].inputs
    slot_base = root_slot(graph, root, name, slots, checks)
    epi = product_epilogue.lower(graph, group, root, slots, name, checks, target) if group.epilogue else None
    # a0, a1, a2: the drivers name the operands by position
    unit = epi.unit if epi is not None else Unit(graph, [a, b, root], {root}, {})
    bk = blocking(p, device != "cpu")
    direct = (p.ct.a_row, p.ct.a_col) if bk.direct_a else None

    direct_kernel = choose(p.ct, p.c_type) if device == "cpu" else None

    def drivers(sig: str) -> str:
        if direct_kernel is not None:
            micro = thin.tile_kernels(direct_kernel, KB, checks)
        else:
            micro = micro_kernel(bk.packed, bk.mr, bk.nr, direct, p.ct.n, checks, device == "cpu", bk.b_pitch)
            if _transposed_pack(p, bk, device != "cpu"):
                micro = transpose16(p.ct.b_col, bk.nr) + "\n" + micro
        cpu = cpu_driver(p, sig, checks, device != "cpu", epi)
        parts = [micro, cpu, _tile_load(p.ct, p.c_type), cuda_driver(p, sig, checks, epi)]
        return "\n".join([epi.text, *parts] if epi is not None else parts) + "\n"

    return unit_launch(unit, name, checks, p.dim, group.id, drivers, slot_base)

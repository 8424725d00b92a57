"""Warp kernels of a contraction group (``matmul``): a tiled kernel on CUDA, a plain loop on the CPU.

Assumes: a fusion group of kind ``contraction``: one node whose op has a `Contraction`,
reading two materialised, row-major operands (fusion writes them first) and writing its
output; flat buffers, as every generated kernel binds them.

Guarantees: every output element ``C[b, i, j] = sum_p A[b, i, p] * B[b, p, j]`` is summed by
one thread in a fixed order, float32 products in float64 and rounded once, float64 in
float64: no atomics, so results are bit-identical run to run and for any CPU thread count.

- CPU (`cpu_kernel`): one task per block of `ROW_BLOCK` columns of an output row, one
  float64 accumulator (a register) per column; the loop runs over ``p``, and each step
  adds ``A[i, p] * B[p, j]`` to every column of the block: the block reads ``ROW_BLOCK``
  contiguous elements of a row of ``B`` (or, ``B`` transposed, walks ``ROW_BLOCK``
  contiguous rows of its storage), and the independent accumulators keep the adds from
  waiting on each other. A single column (``b`` a vector) is a dot product of two
  contiguous vectors. Either way each element adds its products in the order p = 0, 1,
  ..., k - 1. The task is ``wp.tid() + a__task0``, so the plan may split a launch over
  threads (`tasks.run_split`).
- CUDA (`cuda_kernel`): one thread block per ``TILE_M x TILE_N`` output tile (Warp's
  default launch block of `BLOCK_DIM` threads; the plan's ``wp.launch`` passes none): it walks
  ``k`` in tiles of ``TILE_K``, loads an operand tile from a 2-D view of each operand's
  batch (``wp.tile_load`` with bounds checks: elements past an edge read as 0, so sizes that
  are not multiples of the tile are padded, and the padded rows and columns are never
  stored), converts float32 tiles to float64, accumulates with ``wp.tile_matmul`` into a
  float64 tile, and stores it (``wp.tile_store`` skips what lies past the edges). A
  transposed operand is loaded in its own layout and transposed as a tile view.
"""

from __future__ import annotations

import math
from typing import Any

from dpt_ir.backends.cxx.kernels import TASK0
from dpt_ir.backends.warp.codegen import _PARAM_TOKEN, KernelWriter, _positional, _signature
from dpt_ir.backends.warp.launches import WP_TYPES, KernelSource, StatusSlot, param_name
from dpt_ir.graph import Graph
from dpt_ir.ops import indexing as idx
from dpt_ir.ops.registry import Contraction
from dpt_ir.passes.kernel_ir import KernelGroup

ROW_BLOCK = 8  # CPU: columns per task, one float64 accumulator (register) each; 16 measured no faster
BLOCK_DIM = 256  # Warp's CUDA launch default, the block a tile kernel is compiled for
TILE_M, TILE_N, TILE_K = 32, 32, 16  # largest CUDA tile sizes (smaller for small operands)
ITEM_BYTES = {"float32": 4, "float64": 8}
# ``wp.tile_matmul`` through Warp's cooperative scalar GEMM, not libmathdx (cuBLASDx): each
# element sums its tile's products in order (documented in Warp's tile_matmul.h), and an
# NVRTC build of a module takes ~4 s instead of ~30 s (cuBLASDx's LTO generation per call).
SCALAR_GEMM = 'wp.set_module_options({"enable_mathdx_gemm": False})'


def contraction_of(graph: Graph, root: str) -> Contraction:
    """The `Contraction` of node ``root``."""
    node = graph.node_map[root]
    op = node.opdef
    assert op.contraction is not None, f"node {root!r}: op {op.name!r} has no contraction layout"
    attrs = op.parse_attrs(node.attrs, root)
    return op.contraction(attrs, tuple(graph.types[i].shape for i in node.inputs))


def matmul_kernels(
    graph: Graph, group: KernelGroup, name: str, slots: list[StatusSlot], checks: bool, device: str
) -> tuple[list[KernelSource], list[str]]:
    """The one launch of contraction group ``group`` on ``device``, and the module-level
    line its CUDA kernel needs (`SCALAR_GEMM`)."""
    if device == "cpu":
        return [cpu_kernel(graph, group, name, slots, checks)], []
    return [cuda_kernel(graph, group, name, slots, checks)], [SCALAR_GEMM]


def _bases(w: KernelWriter, ct: Contraction, bt: str) -> tuple[str, str]:
    """The flat offsets of batch ``bt``'s matrices in the two operands."""
    at = idx.delinearize(bt, ct.batch) if ct.batch else []
    a = " + ".join(f"{e} * {s}" for e, s in zip(at, ct.a_batch, strict=True) if s) or "0"
    b = " + ".join(f"{e} * {s}" for e, s in zip(at, ct.b_batch, strict=True) if s) or "0"
    return w.let(a, "ab"), w.let(b, "bb")


def cpu_kernel(graph: Graph, group: KernelGroup, name: str, slots: list[StatusSlot], checks: bool) -> KernelSource:
    (root,) = group.roots
    node = graph.node_map[root]
    ct = contraction_of(graph, root)
    out_t = WP_TYPES[node.type.dtype]
    w = KernelWriter(graph, group, name, slots, checks)
    a, b, c = w.param(node.inputs[0]), w.param(node.inputs[1]), w.param(root)
    rows = ct.n > 1  # blocks of a row's columns; a column vector b: one dot product per row
    blocks = -(-ct.n // ROW_BLOCK) if rows else 1
    w.emit(f"t = wp.tid() + {param_name(TASK0)}")
    w.emit(f"bi = t // {blocks}")
    w.emit(f"i = bi % {ct.m}")
    w.emit(f"bt = bi // {ct.m}")
    ab, bb = _bases(w, ct, "bt")
    w.emit(f"ar = {ab} + i * {ct.a_row}")
    w.emit(f"co = bi * {ct.n}")
    w.begin_probes()
    if rows:
        _row_block(w, ct, (a, b, c), bb, blocks, out_t, root)
    else:
        _dot_row(w, ct, (a, b, c), bb, out_t, root)
    w.end_probes()
    tasks = math.prod(ct.batch) * ct.m * blocks
    return _finish_tasks(w, graph, group, name, tasks)


def _row_block(
    w: KernelWriter, ct: Contraction, arrays: tuple[str, str, str], bb: str, blocks: int, out_t: str, root: str
) -> None:
    """``ROW_BLOCK`` columns of row ``i``: one float64 accumulator per column (registers),
    each adding ``A[i, p] * B[p, j]`` for p = 0, 1, ..., k - 1. Columns past the row's end
    (a last, partial block) read the row's last column and are not stored."""
    a, b, c = arrays
    partial = ct.n % ROW_BLOCK != 0
    w.emit(f"j0 = (t % {blocks}) * {ROW_BLOCK}")
    w.emit(f"last = {ct.n} - 1 - j0")
    for q in range(ROW_BLOCK):
        w.emit(f"s{q} = wp.float64(0.0)")
    w.emit(f"for p in range({ct.k}):")
    w.emit(f"    av = wp.float64({a}[ar + p * {ct.a_col}])")
    w.emit(f"    bo = {bb} + p * {ct.b_row} + j0 * {ct.b_col}")
    for q in range(ROW_BLOCK):
        lane = f"wp.min({q}, last)" if partial and q else f"{q}"
        w.emit(f"    s{q} = s{q} + av * wp.float64({b}[bo + {lane} * {ct.b_col}])")
    for q in range(ROW_BLOCK):
        if partial and q:
            w.emit(f"if {q} <= last:")
            w.indent += 1
        w.emit(f"v{q} = {out_t}(s{q})")
        w.check_finite(root, f"v{q}")
        w.emit(f"{c}[co + j0 + {q}] = v{q}")
        if partial and q:
            w.indent -= 1


def _dot_row(w: KernelWriter, ct: Contraction, arrays: tuple[str, str, str], bb: str, out_t: str, root: str) -> None:
    """Row ``i`` of a product with a single column (a column vector ``b``): a dot product
    of two contiguous vectors, p = 0, 1, ..., k - 1."""
    a, b, c = arrays
    w.emit(f"for j in range({ct.n}):")
    w.indent += 1
    w.emit("s = wp.float64(0.0)")
    w.emit(f"bo = {bb} + j * {ct.b_col}")
    w.emit(f"for p in range({ct.k}):")
    w.emit(f"    s = s + wp.float64({a}[ar + p * {ct.a_col}]) * wp.float64({b}[bo + p * {ct.b_row}])")
    w.emit(f"v = {out_t}(s)")
    w.check_finite(root, "v")
    w.emit(f"{c}[co + j] = v")
    w.indent -= 1


def _tile(size: int, largest: int) -> int:
    """A tile edge: ``largest``, or the smallest power of two covering ``size`` if smaller."""
    return min(largest, 1 << max(0, size - 1).bit_length())


def _load(w: KernelWriter, array: str, base: str, item: int, dtype: str, plain: bool, dims: tuple[Any, ...]) -> str:
    """Emit the load of one operand tile and return its name: ``dims`` is (tile rows, tile
    columns, first row, first column, matrix rows, matrix columns) as the product reads the
    operand, from a 2-D view of the operand's matrix at flat offset ``base`` (``item`` bytes
    per element); in its own layout when ``plain``, else as a tile of its stored transpose,
    then transposed (a view); float32 tiles are converted to float64."""
    rows, cols, r0, c0, view_rows, view_cols = dims
    view = w.fresh("view")
    shape = (view_rows, view_cols) if plain else (view_cols, view_rows)
    tile = (rows, cols) if plain else (cols, rows)
    at = (r0, c0) if plain else (c0, r0)
    w.emit(
        f"{view} = wp.array(ptr={array}.ptr + wp.uint64({base}) * wp.uint64({item}), "
        f"shape=({shape[0]}, {shape[1]}), dtype={dtype})"
    )
    t = w.fresh("tile")
    w.emit(f"{t} = wp.tile_load({view}, shape=({tile[0]}, {tile[1]}), offset=({at[0]}, {at[1]}), storage='shared')")
    # Each step binds a new name: a tile's type (its layout, its dtype) is fixed once bound.
    if not plain:
        t, view_t = w.fresh("tile"), t
        w.emit(f"{t} = wp.tile_transpose({view_t})")
    if dtype != "wp.float64":
        t, narrow = w.fresh("tile"), t
        w.emit(f"{t} = wp.tile_astype({narrow}, dtype=wp.float64)")
    return t


def cuda_kernel(graph: Graph, group: KernelGroup, name: str, slots: list[StatusSlot], checks: bool) -> KernelSource:
    (root,) = group.roots
    node = graph.node_map[root]
    ct = contraction_of(graph, root)
    dtype = node.type.dtype
    out_t, item = WP_TYPES[dtype], ITEM_BYTES[dtype]
    tm, tn, tk = _tile(ct.m, TILE_M), _tile(ct.n, TILE_N), _tile(ct.k, TILE_K)
    grid_m, grid_n = -(-ct.m // tm), -(-ct.n // tn)
    w = KernelWriter(graph, group, name, slots, checks)
    a, b, c = w.param(node.inputs[0]), w.param(node.inputs[1]), w.param(root)
    w.emit("blk = wp.tid() // wp.block_dim()")
    w.emit(f"bt = blk // {grid_m * grid_n}")
    w.emit(f"i0 = ((blk // {grid_n}) % {grid_m}) * {tm}")
    w.emit(f"j0 = (blk % {grid_n}) * {tn}")
    ab, bb = _bases(w, ct, "bt")
    w.emit(f"acc = wp.tile_zeros(shape=({tm}, {tn}), dtype=wp.float64, storage='shared')")
    w.emit(f"for p0 in range(0, {ct.k}, {tk}):")
    w.indent += 1
    ta = _load(w, a, ab, item, out_t, ct.a_col == 1, (tm, tk, "i0", "p0", ct.m, ct.k))
    tb = _load(w, b, bb, item, out_t, ct.b_col == 1, (tk, tn, "p0", "j0", ct.k, ct.n))
    w.emit(f"wp.tile_matmul({ta}, {tb}, acc)")
    w.indent -= 1
    if checks:
        _flag_nonfinite(w, root, (tm, tn), ct, out_t)
    result = "acc" if out_t == "wp.float64" else f"wp.tile_astype(acc, dtype={out_t})"
    w.emit(
        f"out = wp.array(ptr={c}.ptr + wp.uint64(bt * {ct.m * ct.n}) * wp.uint64({item}), "
        f"shape=({ct.m}, {ct.n}), dtype={out_t})"
    )
    w.emit(f"wp.tile_store(out, {result}, offset=(i0, j0))")
    blocks = math.prod(ct.batch) * grid_m * grid_n
    return _finish_tasks(w, graph, group, name, blocks * BLOCK_DIM, tasks=False)


def _flag_nonfinite(w: KernelWriter, root: str, tile: tuple[int, int], ct: Contraction, out_t: str) -> None:
    """Each thread of the block tests its share of the tile's elements that will be stored
    (the accumulator is in shared memory), rounded to the output's type as they are stored."""
    tm, tn = tile
    w.emit("lane = wp.tid() % wp.block_dim()")
    w.emit("bad = wp.int32(0)")
    w.emit(f"for e in range(lane, {tm * tn}, wp.block_dim()):")
    w.emit(f"    if i0 + e // {tn} < {ct.m} and j0 + e % {tn} < {ct.n}:")
    w.emit(f"        if not wp.isfinite({out_t}(acc[e // {tn}, e % {tn}])):")
    w.emit("            bad = 1")
    w.flag(root, w.graph.node_map[root].opdef.name, "nonfinite", "bad != 0")


def _finish_tasks(
    w: KernelWriter, graph: Graph, group: KernelGroup, name: str, dim: int, tasks: bool = True
) -> KernelSource:
    """The launch of ``w``'s kernel: positional parameters (`codegen._positional`), and
    with ``tasks`` a trailing ``a__task0``, the launch's first task (`plan.scalar_argument`)."""
    params = list(w.params)
    names = _positional(params)
    by_token = {param_name(p): n for p, n in names.items()}
    body = _PARAM_TOKEN.sub(lambda m: by_token.get(m.group(0), m.group(0)), "\n".join(w.lines))
    signature = _signature(params, names, graph, {}, {})
    if tasks:
        signature += f", {param_name(TASK0)}: wp.int32"
        params.append(TASK0)
    text = f"@wp.kernel\ndef {name}({signature}):\n{body}\n"
    return KernelSource(name, text, params, dim, group.id, {}, {}, name, w.slot_base)

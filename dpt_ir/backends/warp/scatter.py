"""Warp kernels of a scatter group (``add_at``): deterministic by construction, no float atomics.

Assumes: a fusion group of kind ``scatter`` (one root, an op with a `ScatterLayout`,
``group.scatter.form`` chosen by the fusion pass) whose members are the root and
the pointwise producers of its inputs, which kernels recompute inline. Only the groups
the C++ path refuses come here (`dpt_ir.backends.cxx.scatter.covers`: positions made from
data inside the group, members without a C++ lowering such as ``take``); the C++ path
reuses `layout_of`, `chunks`, `constant_csr` and `constant_positions`, so both paths sum
the same rows in the same order.

Guarantees: each output element ``o`` is ``base[o]`` plus the values sent to it, summed
by one thread in the increasing flat order of the position elements (float32 in
float64, rounded once): the order of ``np.add.at``, whatever the thread count or device.
The sources of each destination row come as a CSR (``rows`` offsets, ``cols`` position
elements, stably ordered by destination):

- ``transpose``: the positions are a compile-time constant; the CSR is built here with a
  stable sort and passed as constant arrays, so the scatter is an ordered gather;
- ``sort``: the positions are data; per evaluation a stable counting sort by destination
  builds the CSR in scratch arrays: ``_count`` (each of P threads histograms a contiguous
  chunk of the positions into its own row of counts), ``_scan`` (one thread turns the
  counts into offsets, destination-major then chunk, which makes the placement stable)
  and ``_place`` (each thread writes its chunk's position elements at its offsets, in
  order). Integer counters only, no atomics at all.

A position out of range under ``mode="raise"`` raises the node's status flag (in
``_count``, or at compile time for constants: ContractError) and is clamped, so the
arrays stay in bounds and the program stays usable.
"""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpt_ir.backends.warp.codegen import KernelWriter, _finish
from dpt_ir.backends.warp.launches import WP_TYPES, KernelSource, StatusSlot
from dpt_ir.errors import ContractError, NumericalError
from dpt_ir.graph import Graph
from dpt_ir.ops import indexing as idx
from dpt_ir.ops.gather import normalise
from dpt_ir.ops.registry import ScatterLayout
from dpt_ir.passes.kernel_ir import KernelGroup

ROWS, COLS, HIST = "$rows", "$cols", "$hist"


def layout_of(graph: Graph, root: str) -> ScatterLayout:
    """The `ScatterLayout` of scatter node ``root``."""
    node = graph.node_map[root]
    op = node.opdef
    assert op.scatter is not None, f"node {root!r}: op {op.name!r} has no scatter layout"
    attrs = op.parse_attrs(node.attrs, root)
    # Which input holds the positions does not depend on their shape: ask once to find it.
    positions = graph.types[node.inputs[op.scatter(attrs, node.type.shape, ()).indices]].shape
    return op.scatter(attrs, node.type.shape, positions)


def chunks(count: int, rows: int) -> int:
    """How many threads sort the positions: enough to fill a GPU for large scatters,
    bounded so that the serial scan over rows x chunks stays near the position count.
    The same on every device (the CPU runs the chunks one after another), so the CPU
    tests run the CUDA code path; the result does not depend on it (the sort is stable)."""
    if count < 4096:
        return 1
    return max(1, min(1024, count // 2048, count // max(rows, 1)))


def constant_csr(layout: ScatterLayout, positions: np.ndarray, root: str) -> tuple[list[int], list[int]]:
    """The CSR of constant ``positions``: offsets per destination row and the position
    elements in a stable destination order. The layout's key expressions are evaluated
    on NumPy integer arrays (they are integer arithmetic: ``+ * // %``)."""
    try:
        p = normalise(positions, layout.size, layout.mode, f"node {root!r}")
    except NumericalError as exc:  # a constant position out of range is in the user's graph
        raise ContractError(str(exc)) from None
    names = tuple(f"j{k}" for k in range(positions.ndim))
    env: dict[str, Any] = {n: g for n, g in zip(names, np.indices(positions.shape, dtype=np.int64), strict=True)}
    env["p"] = p
    key = eval(layout.key(names, "p"), {"__builtins__": {}}, env)  # noqa: S307  (our own integer arithmetic)
    keys = np.broadcast_to(np.asarray(key, dtype=np.int64), positions.shape)
    keys = keys.reshape(-1)
    order = np.argsort(keys, kind="stable")
    offsets = np.concatenate([[0], np.cumsum(np.bincount(keys, minlength=layout.rows))])
    return [int(v) for v in offsets], [int(v) for v in order] or [0]


def constant_positions(graph: Graph, value: str) -> np.ndarray:
    """Evaluate ``value``, which depends on no program input, with the op references (the
    interpreter's semantics)."""
    needed, stack = set(), [value]
    while stack:
        v = stack.pop()
        if v not in needed and v in graph.node_map:
            needed.add(v)
            stack.extend(graph.node_map[v].inputs)
    env: dict[str, np.ndarray] = {}
    for n in graph.nodes:
        if n.name in needed:
            attrs = n.opdef.parse_attrs(n.attrs, n.name)
            env[n.name] = np.asarray(n.opdef.reference(attrs, *(env[i] for i in n.inputs))).astype(n.type.dtype)
    return env[value]


def scatter_kernels(
    graph: Graph, group: KernelGroup, name: str, slots: list[StatusSlot], checks: bool, device: str
) -> tuple[list[KernelSource], list[str]]:
    (root,) = group.roots
    node = graph.node_map[root]
    layout = layout_of(graph, root)
    positions = node.inputs[layout.indices]
    count = graph.types[positions].size
    kernels: list[KernelSource] = []
    helpers: list[str] = []
    csr: dict[str, tuple[str, list[int]]] = {}
    partials: dict[str, tuple[str, int]] = {}
    rows, cols = f"{ROWS}:{root}", f"{COLS}:{root}"
    if group.scatter.form == "transpose":
        offsets, order = constant_csr(layout, constant_positions(graph, positions), root)
        csr = {rows: ("wp.int32", offsets), cols: ("wp.int32", order)}
    else:
        parts = chunks(count, layout.rows)
        partials = {
            rows: ("wp.int32", layout.rows + 1),
            cols: ("wp.int32", max(count, 1)),
            f"{HIST}:{root}": ("wp.int32", parts * layout.rows),
        }
        for stage in ("count", "scan", "place"):
            k, h = _sort_kernel(graph, group, f"{name}_{stage}", stage, layout, parts, partials, slots, checks)
            kernels.append(k)
            helpers += [x for x in h if x not in helpers]
    k, h = _sum_kernel(graph, group, name, layout, csr, partials, slots, checks, device)
    return [*kernels, k], helpers + [x for x in h if x not in helpers]


def _sort_kernel(
    graph: Graph,
    group: KernelGroup,
    name: str,
    stage: str,
    layout: ScatterLayout,
    parts: int,
    partials: dict[str, tuple[str, int]],
    slots: list[StatusSlot],
    checks: bool,
) -> tuple[KernelSource, list[str]]:
    (root,) = group.roots
    node = graph.node_map[root]
    positions = node.inputs[layout.indices]
    shape = graph.types[positions].shape
    count = math.prod(shape)
    chunk = -(-count // parts) if count else 0
    w = KernelWriter(graph, group, name, slots, checks)
    rows, cols, hist = (w.param(f"{p}:{root}") for p in (ROWS, COLS, HIST))
    n = layout.rows
    if stage == "scan":
        w.emit("t = wp.tid()")
        w.emit("running = wp.int32(0)")
        w.emit(f"for d in range({n}):")
        w.emit(f"    {rows}[d] = running")
        w.emit(f"    for q in range({parts}):")
        w.emit(f"        c = {hist}[q * {n} + d]")
        w.emit(f"        {hist}[q * {n} + d] = running")
        w.emit("        running = running + c")
        w.emit(f"{rows}[{n}] = running")
        return _finish(w, graph, group, name, 1, partials), w.helpers
    w.emit("q = wp.tid()")
    if stage == "count":
        w.emit(f"for d in range({n}):")
        w.emit(f"    {hist}[q * {n} + d] = 0")
    w.emit(f"for j in range(q * {chunk}, wp.min(q * {chunk} + {chunk}, {count})):")
    w.indent += 1
    j = tuple(w.let(e) for e in idx.delinearize("j", shape)) if shape else ()
    w.flat[(j, shape)] = "j"
    value = w.value_at(positions, j)
    p = w.position(root, node.opdef.name, value, layout.size, layout.mode, check=stage == "count")
    slot = w.let(f"q * {n} + {w.let(layout.key(j, p))}", "k")
    if stage == "count":
        w.emit(f"{hist}[{slot}] = {hist}[{slot}] + 1")
    else:
        w.emit(f"at = {hist}[{slot}]")
        w.emit(f"{cols}[at] = j")
        w.emit(f"{hist}[{slot}] = at + 1")
    w.indent -= 1
    return _finish(w, graph, group, name, parts, partials), w.helpers


def _sum_kernel(
    graph: Graph,
    group: KernelGroup,
    name: str,
    layout: ScatterLayout,
    csr: dict[str, tuple[str, list[int]]],
    partials: dict[str, tuple[str, int]],
    slots: list[StatusSlot],
    checks: bool,
    device: str,
) -> tuple[KernelSource, list[str]]:
    """out[o] = base[o] + the values of o's row, in CSR order; one element per thread on
    CUDA, every element in one thread's loop on the CPU."""
    (root,) = group.roots
    node = graph.node_map[root]
    shape = node.type.shape
    size = math.prod(shape)
    positions = graph.types[node.inputs[layout.indices]].shape
    out_t = WP_TYPES[node.type.dtype]
    acc_t = "wp.float64" if out_t == "wp.float32" else out_t
    w = KernelWriter(graph, group, name, slots, checks)
    w.constants.update(csr)
    rows, cols = w.param(f"{ROWS}:{root}"), w.param(f"{COLS}:{root}")
    per_thread = w.begin_elements(size, device)
    dest = tuple(w.let(e) for e in idx.delinearize("tid", shape)) if shape else ()
    w.flat[(dest, shape)] = "tid"
    acc = w.fresh("s")
    w.emit(f"{acc} = {acc_t}({w.value_at(node.inputs[layout.base], dest)})")
    r = w.let(layout.row(dest), "r")
    k = w.fresh("k")
    w.emit(f"for {k} in range({rows}[{r}], {rows}[{r} + 1]):")
    w.indent += 1
    outside = dict(w.memo)  # values computed in the loop body stay in it
    j = w.let(f"{cols}[{k}]", "j")
    jidx = tuple(w.let(e) for e in idx.delinearize(j, positions)) if positions else ()
    v = w.value_at(node.inputs[layout.values], layout.source_at(dest, jidx))
    w.emit(f"{acc} = {acc} + {acc_t}({v})")
    w.memo = outside
    w.indent -= 1
    result = w.fresh()
    w.emit(f"{result} = {out_t}({acc})")
    w.check_finite(root, result)
    w.emit(f"{w.param(root)}[tid] = {result}")
    w.end_elements(per_thread)
    return _finish(w, graph, group, name, -(-size // per_thread), partials), w.helpers

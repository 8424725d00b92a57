"""The compile-time plan of a scatter (``add_at``) on the C++ path: its `ScatterLayout`, the
fixed chunks its per-run sort uses, and the CSR of constant positions.

Assumes: a scatter node (an op with ``OpDef.scatter``). Guarantees: `constant_csr` gives the
destination rows' offsets and the position elements in a stable destination order (the
order of ``np.add.at``); a constant position out of range under ``raise`` is a
ContractError (it is in the user's graph); `chunks` depends on the shapes only, never on
the device or the thread count, so results are bit-identical for any of them.
"""

from __future__ import annotations

import numpy as np

from dpt_ir.ir import indexing as idx
from dpt_ir.ir.errors import ContractError, NumericalError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.registry import ScatterLayout
from dpt_ir.ops.gather import normalise


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
    elements in a stable destination order. The layout's ``key_form`` (an affine form over
    the position element's axes and its position) is evaluated on NumPy integer arrays."""
    try:
        p = normalise(positions, layout.size, layout.mode, f"node {root!r}")
    except NumericalError as exc:  # a constant position out of range is in the user's graph
        raise ContractError(str(exc)) from None
    rank = positions.ndim + 1  # the position element's axes, then its position
    assert layout.key_form is not None  # `nest.scatter_covers` lowers only layouts with forms
    j = tuple(idx.axis(k, rank) for k in range(positions.ndim))
    form = layout.key_form(j, idx.axis(positions.ndim, rank)).padded(rank)
    coords = (*np.indices(positions.shape, dtype=np.int64), np.asarray(p, dtype=np.int64))
    key = form.b + sum((w * c for w, c in zip(form.w, coords, strict=True) if w), np.int64(0))
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

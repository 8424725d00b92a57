"""Reduction kernels of the Warp-Python path: ``<k>``, where thread ``(o, p)`` folds chunk
``p`` of output ``o``'s reduced elements in row-major order with the op's `warp_reduce`
template, and, with more than one partial per output, ``<k>_final``, which combines each
output's partials in order, finalises, and computes the group's epilogue. No atomics touch
floating-point data, so results never depend on thread scheduling.

Builds on `codegen.KernelWriter` (imported here; `codegen.generate` imports this module
when it meets a reduction group).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

from dpt_ir.backends.base import target_for
from dpt_ir.backends.warp.codegen import KernelWriter, _bind_index, _finish, _warm
from dpt_ir.backends.warp.launches import WP_TYPES, KernelSource, StatusSlot, param_name
from dpt_ir.graph import Graph
from dpt_ir.ops import indexing as idx
from dpt_ir.passes.kernel_ir import KernelGroup


def reduction_kernels(
    graph: Graph, group: KernelGroup, name: str, slots: list[StatusSlot], checks: bool, device: str
) -> tuple[list[KernelSource], list[str]]:
    space, axes = tuple(group.space), tuple(group.axes)
    kept = tuple(d for k, d in enumerate(space) if k not in axes)
    red = tuple(d for k, d in enumerate(space) if k in axes)
    n_out, count = math.prod(kept), math.prod(red)
    parts = target_for(device).partial_count(n_out, count)  # one partial on the CPU
    chunk = -(-count // parts) if count else 0
    roots = [v for v in group.roots if graph.node_map[v].opdef.kind == "reduction"]
    epilogue = group.epilogue
    pointwise_roots = [v for v in group.outputs if v not in roots and v not in epilogue]
    w = KernelWriter(graph, group, name, slots, checks)
    w.emit("tid = wp.tid()")
    w.emit(f"o = tid // {parts}" if parts > 1 else "o = tid")
    if parts > 1:
        w.emit(f"p = tid - o * {parts}")
    kept_index = iter(_bind_index(w, tuple(idx.delinearize("o", kept))))
    templates = {}
    for root in roots:
        node = graph.node_map[root]
        in_t = WP_TYPES[graph.types[node.inputs[0]].dtype]
        t = node.opdef.warp_reduce(in_t, WP_TYPES[node.type.dtype])  # type: ignore[misc]
        templates[root] = t
        for acc, _, init in t.accumulators:
            w.emit(f"{_acc(w, root, acc)} = {init}")
    begin = "p * " + str(chunk) if parts > 1 else "0"
    end = f"wp.min({begin} + {chunk}, {count})" if parts > 1 else str(count)
    w.begin_probes()
    w.emit(f"for r in range({begin}, {end}):")
    w.indent += 1
    outside = dict(w.memo)  # values computed inside the loop are not visible after it
    kept_vals = list(kept_index)
    red_index = list(_bind_index(w, tuple(idx.delinearize("r", red))))
    full = tuple(red_index.pop(0) if k in axes else kept_vals.pop(0) for k in range(len(space)))
    if axes == tuple(range(len(space) - len(axes), len(space))):
        w.flat[(full, space)] = idx.add(idx.mul("o", count), "r")
    _warm(w, graph, group, [graph.node_map[r].inputs[0] for r in roots] + pointwise_roots, full, space)
    for root in roots:
        x = w.value_at(graph.node_map[root].inputs[0], full)
        _emit_template(w, templates[root].update, root, {"x": x, "r": "r"})
    for root in pointwise_roots:
        v = w.value_at(root, full)
        w.check_finite(root, v)
        offset = w.flat.get((full, space)) or idx.linearize(full, space)
        w.emit(f"{w.param(root)}[{offset}] = {v}")
    w.indent -= 1
    w.end_probes()
    w.memo = outside
    partials: dict[str, tuple[str, int]] = {}
    for root in roots:
        t = templates[root]
        if parts == 1:
            _write_result(w, root, t, count, group.outputs)
        else:
            for acc, acc_t, _ in t.accumulators:
                p = f"$partial:{root}:{acc}"
                partials[p] = (acc_t, n_out * parts)
                w.param(p)
                w.emit(f"{param_name(p)}[tid] = {_acc(w, root, acc)}")
    if parts == 1:
        _epilogue(w, graph, epilogue, group.outputs)
    kernels = [_finish(w, graph, group, name, n_out * parts, partials)]
    if parts > 1:
        kernels.append(
            _combine_kernel(graph, group, name + "_final", roots, templates, parts, n_out, count, slots, checks)
        )
    return kernels, w.helpers


def _acc(w: KernelWriter, root: str, acc: str) -> str:
    return f"acc{w.local(root)}_{acc}"


def _other(w: KernelWriter, root: str, acc: str) -> str:
    return f"other{w.local(root)}_{acc}"


def _emit_template(w: KernelWriter, template: str, root: str, values: dict[str, str]) -> None:
    subst = {
        **values,
        **{f"acc_{a}": _acc(w, root, a) for a in "msi"},
        **{f"other_{a}": _other(w, root, a) for a in "msi"},
    }
    for line in template.format(**subst).split("\n"):
        w.emit(line)


def _write_result(w: KernelWriter, root: str, t: Any, count: int, outputs: Sequence[str]) -> None:
    """Finalise reduction ``root`` for output ``o``; write it if other kernels read it.
    Epilogue nodes then read the finished value (`KernelWriter.finished`)."""
    subst = {f"acc_{a}": _acc(w, root, a) for a in "msi"}
    var = w.fresh()
    w.emit(f"{var} = {t.finalize.format(count=count, **subst)}")
    w.check_finite(root, var)
    if root in outputs:
        w.emit(f"{w.param(root)}[o] = {var}")
    w.finished[root] = var


def _out_index(w: KernelWriter, shape: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(w.let(e) for e in idx.delinearize("o", shape)) if shape else ()


def _epilogue(w: KernelWriter, graph: Graph, epilogue: Sequence[str], outputs: Sequence[str]) -> None:
    """Pointwise roots computed from the finished reductions, at output ``o``."""
    for root in epilogue:
        index = _out_index(w, graph.types[root].shape)
        v = w.value_at(root, index)
        if root in outputs:
            w.check_finite(root, v)
            w.emit(f"{w.param(root)}[o] = {v}")


def _combine_kernel(
    graph: Graph,
    group: KernelGroup,
    name: str,
    roots: list[str],
    templates: dict[str, Any],
    parts: int,
    n_out: int,
    count: int,
    slots: list[StatusSlot],
    checks: bool,
) -> KernelSource:
    w = KernelWriter(graph, group, name, slots, checks)
    w.emit("o = wp.tid()")
    partials: dict[str, tuple[str, int]] = {}
    for root in roots:
        t = templates[root]
        for acc, acc_t, _ in t.accumulators:
            p = f"$partial:{root}:{acc}"
            partials[p] = (acc_t, n_out * parts)
            w.param(p)
            w.emit(f"{_acc(w, root, acc)} = {param_name(p)}[o * {parts}]")
        w.emit(f"for q in range(1, {parts}):")
        w.indent += 1
        for acc, _, _ in t.accumulators:
            w.emit(f"{_other(w, root, acc)} = {param_name(f'$partial:{root}:{acc}')}[o * {parts} + q]")
        _emit_template(w, t.combine, root, {})
        w.indent -= 1
        _write_result(w, root, t, count, group.outputs)
    _epilogue(w, graph, group.epilogue, group.outputs)
    return _finish(w, graph, group, name, n_out, partials)

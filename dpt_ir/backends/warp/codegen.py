"""Warp source for the fusion groups of a scheduled graph.

One kernel per pointwise group (a thread per element of its iteration space, `KernelWriter`
and `pointwise_kernel`); a reduction group gets the ordered partial kernels of
`dpt_ir.backends.warp.reductions`, a scatter group (``add_at``) those of
`dpt_ir.backends.warp.scatter` (an ordered gather over a destination-sorted table of its
positions), and a group the C++ path covers its C++ element function and drivers
(`dpt_ir.backends.cxx`). No atomics touch floating-point data, so results never depend
on thread scheduling. Gathers (``take``) read at positions loaded in the kernel
(`KernelWriter.position`), clamped in bounds.

Every expression comes from the op table (`OpDef.warp`, ``warp_index``,
``warp_reduce``, ``warp_domain``, ``cxx``); nothing here depends on an op's name.

Kernel text never carries a value's name (parameters are positional, accumulators
numbered, status flags relative to a per-launch base), so structurally identical fusion
groups give identical kernels, and `generate` defines each distinct kernel once: the
module grows with the number of distinct groups, not of groups (`_share`).
"""

from __future__ import annotations

import math
import re
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any

import numpy as np

from dpt_ir.backends.cxx import kernels as cxx_kernels
from dpt_ir.backends.cxx import rows as cxx_rows
from dpt_ir.backends.cxx.gathers import raise_detail
from dpt_ir.backends.warp.launches import (
    STATUS,
    STATUS_BASE,
    WP_TYPES,
    KernelSource,
    StatusSlot,
    constant_array,
    param_name,
)
from dpt_ir.errors import ContractError
from dpt_ir.graph import Graph, origin_of
from dpt_ir.ops import indexing as idx
from dpt_ir.ops.registry import WarpSite
from dpt_ir.passes.kernel_ir import KernelGroup, plan_of
from dpt_ir.passes.util import same_index_members


class KernelWriter:
    """Builds one kernel body: memoised value expressions at symbolic indices."""

    def __init__(self, graph: Graph, group: KernelGroup, kernel: str, slots: list[StatusSlot], checks: bool) -> None:
        self.graph = graph
        self.members = set(group.nodes)
        self.kernel = kernel
        self.slots = slots
        self.slot_base = len(slots)  # this kernel's flags are slots[slot_base:], at a__status_base + k
        self.checks = checks
        self.lines: list[str] = []
        self.indent = 1
        self.memo: dict[tuple[str, tuple[str, ...]], str] = {}
        self.params: list[str] = []
        self.counter = 0
        self.helpers: list[str] = []
        self.constants: dict[str, tuple[str, Any]] = {}  # param -> (wp type, array-like values)
        self.locals: dict[str, int] = {}  # reduction root -> its number in this kernel (accumulator names)
        self.finished: dict[str, str] = {}  # reduction results available after the loop
        self.probes: list[tuple[str, str, str]] | None = None  # (variable, status element, Warp type)
        self._probe_at = (0, 0)
        # (index, shape) -> flat offset already known (the loop's own counter), so that
        # reads at the iteration index do not re-linearise a delinearised counter.
        self.flat: dict[tuple[tuple[str, ...], tuple[int, ...]], str] = {}

    # -- plumbing --
    def emit(self, line: str) -> None:
        self.lines.append("    " * self.indent + line)

    def fresh(self, stem: str = "v") -> str:
        self.counter += 1
        return f"{stem}{self.counter}"

    def param(self, value: str) -> str:
        if value not in self.params:
            self.params.append(value)
        return param_name(value)

    def local(self, value: str) -> int:
        """A number for ``value`` by first use: generated local names never carry value
        names, so structurally identical kernels have identical text."""
        return self.locals.setdefault(value, len(self.locals))

    def new_slot(self, slot: StatusSlot) -> str:
        """Register ``slot``; the status-word element it raises, relative to the launch's base
        (a kernel shared by several launches reports each launch's own nodes)."""
        self.slots.append(slot)
        self.param(STATUS)
        self.param(STATUS_BASE)
        return f"{param_name(STATUS)}[{param_name(STATUS_BASE)} + {len(self.slots) - 1 - self.slot_base}]"

    def flag(self, node: str, op: str, kind: str, bad: str, detail: str = "") -> None:
        if not self.checks:
            return
        element = self.new_slot(StatusSlot(self.kernel, node, op, kind, detail, origin_of(self.graph, node)))
        self.emit(f"if {bad}:")
        self.emit(f"    {element} = 1")

    def check_finite(self, value: str, var: str) -> None:
        dtype = self.graph.types[value].dtype
        if dtype not in ("float32", "float64"):
            return
        node = self.graph.node_map.get(value)
        op = node.opdef.name if node else "input"
        if self.probes is None or not self.checks:
            self.flag(value, op, "nonfinite", f"not wp.isfinite({var})")
            return
        # Inside an element loop: fold the value into a probe (v * 0 is 0 unless v is NaN or
        # infinite) and test the probe once after the loop instead of branching per element.
        element = self.new_slot(StatusSlot(self.kernel, value, op, "nonfinite", "", origin_of(self.graph, value)))
        probe, t = self.fresh("probe"), WP_TYPES[dtype]
        self.probes.append((probe, element, t))
        self.emit(f"{probe} = {probe} + {var} * {t}(0.0)")

    def begin_probes(self) -> None:
        """Non-finite checks from here to `end_probes` are folded into per-thread probes."""
        self.probes = []
        self._probe_at = (len(self.lines), self.indent)

    def begin_elements(self, size: int, device: str) -> int:
        """Open the loop over a launch's elements, ``tid``: one element per thread on CUDA;
        on the CPU (one thread runs the whole launch) one thread loops over every element,
        which saves Warp's per-element call overhead, with non-finite checks folded into
        probes. Returns the elements per thread, for `end_elements` and the launch size."""
        per_thread = size if device == "cpu" and size > 1 else 1
        if per_thread == 1:
            self.emit("tid = wp.tid()")
            return 1
        self.emit("t = wp.tid()")
        self.begin_probes()
        self.emit(f"for tid in range(t * {per_thread}, wp.min(t * {per_thread} + {per_thread}, {size})):")
        self.indent += 1
        return per_thread

    def end_elements(self, per_thread: int) -> None:
        """Close what `begin_elements` opened."""
        if per_thread > 1:
            self.indent -= 1
            self.end_probes()

    def end_probes(self) -> None:
        at, indent = self._probe_at
        self.lines[at:at] = ["    " * indent + f"{p} = {t}(0.0)" for p, _, t in self.probes]
        for probe, element, _ in self.probes:
            self.emit(f"if not wp.isfinite({probe}):")
            self.emit(f"    {element} = 1")
        self.probes = None

    # -- values --
    def let(self, expr: str, stem: str = "i") -> str:
        """``expr`` bound once to a variable (names and literals are returned as they
        are): index arithmetic and conditions shared by many reads are computed once,
        which keeps kernels small for Warp's code generator and the C++ compiler."""
        if expr.isidentifier() or expr.lstrip("-").isdigit() or expr in ("True", "False"):
            return expr
        key = ("$expr", (expr,))
        if key not in self.memo:
            var = self.fresh(stem)
            self.emit(f"{var} = {expr}")
            self.memo[key] = var
        return self.memo[key]

    def value_at(self, name: str, index: tuple[str, ...]) -> str:
        if name in self.finished:
            # A finished reduction: fusion only lets epilogues read it at output ``o``.
            return self.finished[name]
        index = tuple(self.let(e) for e in index)
        key = (name, index)
        if key in self.memo:
            return self.memo[key]
        t = self.graph.types[name]
        if name not in self.members:
            var = self.fresh()
            offset = self.let(self.flat.get((index, t.shape)) or idx.linearize(index, t.shape))
            self.emit(f"{var} = {self.param(name)}[{offset}]")
        else:
            var = self._node_at(name, index)
        self.memo[key] = var
        return var

    def _node_at(self, name: str, index: tuple[str, ...]) -> str:
        node = self.graph.node_map[name]
        op = node.opdef
        attrs = op.parse_attrs(node.attrs, name)
        in_shapes = tuple(self.graph.types[i].shape for i in node.inputs)
        in_types = tuple(WP_TYPES[self.graph.types[i].dtype] for i in node.inputs)
        out_t = WP_TYPES[node.type.dtype]
        if op.sparse_rows is not None:
            rows = op.sparse_rows(attrs, node.type.shape)
            return self._sparse(name, node.inputs[0], rows, index, out_t, node.type.shape, in_shapes[0])
        if op.table is not None:
            return self._table_at(name, op.table(attrs), index)
        if op.warp_gather is not None:
            site = WarpSite(attrs, (), out_t, in_types, node.type.shape, in_shapes, index)
            return self._gather(name, op.name, node.inputs, op.warp_gather(site))
        if op.weights is not None:
            return self._correlate(name, node.inputs[0], op.weights(attrs), index, out_t)
        if op.warp_index is not None:
            site = WarpSite(attrs, (), out_t, in_types, node.type.shape, in_shapes, index)
            fast = op.warp_interior(site, (1,) * len(index)) if op.warp_interior else None
            if fast is not None and fast[0] != "True":
                return self._branch(
                    fast[0],
                    lambda: self.value_at(node.inputs[0], _shifted(index, fast[1])),
                    lambda: self._view(node.inputs, op, site, out_t),
                    out_t,
                )
            if fast is not None:
                return self.value_at(node.inputs[0], _shifted(index, fast[1]))
            return self._view(node.inputs, op, site, out_t)

        if op.warp is None:
            raise ContractError(
                f"op {op.name!r} (node {name!r}): cannot be compiled for the Warp backend; expected an OpDef "
                "with a Warp lowering (warp=..., see docs/adding-an-op.md), found none (dp.interpret still runs it)"
            )
        args = tuple(
            self.value_at(i, idx.broadcast_index(index, node.type.shape, s))
            for i, s in zip(node.inputs, in_shapes, strict=True)
        )
        if op.warp_helpers and op.warp_helpers not in self.helpers:
            self.helpers.append(op.warp_helpers)
        fmt = {"T": out_t, **{f"T{k}": t for k, t in enumerate(in_types)}}
        site = WarpSite(attrs, args, out_t, in_types, node.type.shape, in_shapes, index)
        expr = op.warp(site) if callable(op.warp) else op.warp.format(*args, **fmt)
        if op.warp_domain:
            detail = str(getattr(attrs, "message", ""))
            self.flag(name, op.name, "domain", f"not ({op.warp_domain.format(*args, **fmt)})", detail)
        var = self.fresh()
        self.emit(f"{var} = {expr}")
        return var

    def _table_at(self, name: str, table: Any, index: tuple[str, ...]) -> str:
        """An element of a constant table (an index array), read from a constant array."""
        param = f"$table:{name}"
        self.constants[param] = ("wp.int32", table.reshape(-1) if table.size else np.zeros(1))
        self.param(param)
        var = self.fresh()
        self.emit(f"{var} = {param_name(param)}[{self.let(idx.linearize(index, table.shape))}]")
        return var

    def position(self, node: str, op: str, value: str, size: int, mode: str, check: bool = True) -> str:
        """The in-range offset along an axis of length ``size`` that position ``value`` (an
        int32 expression) names under ``mode`` (see `GatherSite`). Under ``raise`` a position
        outside [-size, size) raises the node's flag (when ``check``) and reads a clamped,
        in-bounds element, so the program stays usable after the NumericalError."""
        p = self.let(value, "p")
        if mode == "wrap":
            return self.let(f"((({p}) % {size}) + {size}) % {size}", "p")
        if mode == "raise":
            if check:
                self.flag(node, op, "domain", f"{p} < {-size} or {p} >= {size}", raise_detail(size))
            p = self.let(f"wp.where({p} < 0, {p} + {size}, {p})", "p")
        return self.let(idx.clamp(p, 0, size - 1), "p")

    def _gather(self, name: str, op: str, inputs: tuple[str, ...], site: Any) -> str:
        """A gather's element: the source read at the position the indices hold."""
        p = self.position(name, op, self.value_at(inputs[site.indices], site.indices_at), site.size, site.mode)
        at = tuple(p if k == site.axis else e for k, e in enumerate(site.source_at))
        return self.value_at(inputs[site.source], at)

    def _source(self, inputs: tuple[str, ...], s: Any) -> str:
        if s.literal is not None:
            return s.literal
        v = self.value_at(inputs[s.input], s.index)
        return v if s.scale is None else f"({s.scale} * {v})"

    def _select(self, inputs: tuple[str, ...], sources: list[Any], out_t: str) -> str:
        """A view's element: the first source whose condition holds, else zero."""
        if len(sources) == 1 and sources[0].when is None and sources[0].scale is None:
            if sources[0].literal is None:
                return self.value_at(inputs[sources[0].input], sources[0].index)
        result = "False" if out_t == "wp.bool" else f"{out_t}(0)"
        for s in reversed(sources):
            v = self._source(inputs, s)
            result = v if s.when is None else f"wp.where({self.let(s.when, 'c')}, {v}, {result})"
        var = self.fresh()
        self.emit(f"{var} = {result}")
        return var

    def _view(self, inputs: tuple[str, ...], op: Any, site: WarpSite, out_t: str) -> str:
        sources = op.warp_index(site)
        if op.warp_combine == "sum":
            return self._sum(inputs, sources, out_t)
        return self._select(inputs, sources, out_t)

    def _branch(self, cond: str, fast: Any, general: Any, out_t: str) -> str:
        """``var = fast() if cond else general()``, each side in its own scope."""
        var = self.fresh()
        self.emit(f"{var} = {out_t}(0)")
        for head, make in ((f"if {cond}:", fast), ("else:", general)):
            self.emit(head)
            self.indent += 1
            outside = dict(self.memo)
            self.emit(f"{var} = {make()}")
            self.memo = outside
            self.indent -= 1
        return var

    def _correlate(self, name: str, source: str, weights: Any, index: tuple[str, ...], out_t: str) -> str:
        """sum_t w[t] * source[index + t]: a loop over the taps, weights in a constant
        array. When the source is a view with an interior fast path (a padded input),
        windows inside the interior read the unpadded input directly."""
        param = f"$weights:{name}"
        self.constants[param] = (_tap_type(out_t), weights.ravel())
        self.param(param)
        node = self.graph.node_map.get(source) if source in self.members else None
        op = node.opdef if node is not None else None
        if op is not None and op.warp_interior is not None:
            attrs = op.parse_attrs(node.attrs, source)
            in_shapes = tuple(self.graph.types[i].shape for i in node.inputs)
            site = WarpSite(attrs, (), out_t, (), node.type.shape, in_shapes, index)
            fast = op.warp_interior(site, tuple(weights.shape))
            if fast is not None:
                inner, shift = node.inputs[0], fast[1]
                return self._branch(
                    fast[0],
                    lambda: self._taps(param, weights, inner, _shifted(index, shift), out_t),
                    lambda: self._taps(param, weights, source, index, out_t),
                    out_t,
                )
        return self._taps(param, weights, source, index, out_t)

    def _sparse(
        self,
        name: str,
        source: str,
        rows: Any,
        index: tuple[str, ...],
        out_t: str,
        out_shape: tuple[int, ...],
        in_shape: tuple[int, ...],
    ) -> str:
        """A constant sparse linear map (`SparseRows`): output ``o`` sums its CSR row in
        order, in float64 for float32 data (as the tap loop); the row pointers, columns,
        weights and bias are constant arrays. An ordered gather: no scatter, no atomics."""
        acc_t = _tap_type(out_t)
        arrays = {"rowptr": ("wp.int32", rows.rowptr), "cols": ("wp.int32", rows.cols), "vals": (acc_t, rows.vals)}
        if rows.bias is not None:
            arrays["bias"] = (acc_t, rows.bias)
        p = {}
        for part, (t, values) in arrays.items():
            key = f"${part}:{name}"
            self.constants[key] = (t, values)
            p[part] = self.param(key)
        if rows.axis is None:
            o = self.let(self.flat.get((index, out_shape)) or idx.linearize(index, out_shape))
        else:
            o = index[rows.axis]
        acc, k = self.fresh("s"), self.fresh("k")
        self.emit(f"{acc} = {acc_t}(0)")
        self.emit(f"for {k} in range({p['rowptr']}[{o}], {p['rowptr']}[{o} + 1]):")
        self.indent += 1
        outside, flat = dict(self.memo), dict(self.flat)  # the loop body's values stay in it
        j = self.let(f"{p['cols']}[{k}]", "j")
        if rows.axis is None:
            src = tuple(self.let(e) for e in idx.delinearize(j, in_shape))
            self.flat[(src, in_shape)] = j
        else:
            src = tuple(j if a == rows.axis else e for a, e in enumerate(index))
        v = self.value_at(source, src)
        self.emit(f"{acc} = {acc} + {p['vals']}[{k}] * {acc_t}({v})")
        self.memo, self.flat = outside, flat
        self.indent -= 1
        if rows.bias is not None:
            self.emit(f"{acc} = {acc} + {p['bias']}[{o}]")
        var = self.fresh()
        self.emit(f"{var} = {out_t}({acc})")
        return var

    def _taps(self, param: str, weights: Any, source: str, index: tuple[str, ...], out_t: str) -> str:
        """The tap loop, accumulated as scipy.ndimage does: float32 in float64 (weights in
        float64 too), rounded once at the end; zero weights are skipped (as the reference
        and scipy.ndimage.correlate do), so 0 * inf never turns a finite result into NaN."""
        acc_t = _tap_type(out_t)
        acc, tap = self.fresh("s"), self.fresh("t")
        self.emit(f"{acc} = {acc_t}(0)")
        self.emit(f"for {tap} in range({weights.size}):")
        self.indent += 1
        outside = dict(self.memo)  # values computed in the loop body stay in it
        offsets = idx.delinearize(tap, weights.shape)
        v = self.value_at(source, tuple(idx.add(e, o) for e, o in zip(index, offsets, strict=True)))
        w, term = f"{param_name(param)}[{tap}]", f"{param_name(param)}[{tap}] * {acc_t}({v})"
        if bool((weights == 0).any()):
            term = f"wp.where({w} != {acc_t}(0), {term}, {acc_t}(0))"
        self.emit(f"{acc} = {acc} + {term}")
        self.memo = outside
        self.indent -= 1
        if acc_t == out_t:
            return acc
        var = self.fresh()
        self.emit(f"{var} = {out_t}({acc})")
        return var

    def _sum(self, inputs: tuple[str, ...], sources: list[Any], out_t: str) -> str:
        """A stencil's element: the sum, in source order, of the sources whose condition holds."""
        var = self.fresh()
        self.emit(f"{var} = {out_t}(0)")
        for s in sources:
            v = self._source(inputs, s)
            if s.when is None:
                self.emit(f"{var} = {var} + {v}")
            else:
                self.emit(f"{var} = {var} + wp.where({self.let(s.when, 'c')}, {v}, {out_t}(0))")
        return var


def _tap_type(out_t: str) -> str:
    """The accumulator (and weight) type of a tap loop producing ``out_t``."""
    return "wp.float64" if out_t == "wp.float32" else out_t


def _shifted(index: tuple[str, ...], shift: tuple[int, ...]) -> tuple[str, ...]:
    return tuple(idx.add(e, k) for e, k in zip(index, shift, strict=True))


def _signature(
    params: list[str],
    names: dict[str, str],
    graph: Graph,
    partials: dict[str, tuple[str, int]],
    constants: dict[str, Any],
) -> str:
    parts = []
    for p in params:
        if p == STATUS_BASE:
            parts.append(f"{names[p]}: wp.int32")
            continue
        if p == STATUS:
            dtype = "wp.int32"
        elif p in partials:
            dtype = partials[p][0]
        elif p in constants:
            dtype = constants[p][0]
        else:
            dtype = WP_TYPES[graph.types[p].dtype]
        parts.append(f"{names[p]}: wp.array(dtype={dtype})")
    return ", ".join(parts)


def _positional(params: list[str]) -> dict[str, str]:
    """Parameter names by position (``a0``, ``a1``, ...; the status word keeps its own
    name): a kernel's text then depends on its structure, not on its buffers' names."""
    return {p: param_name(p) if p in (STATUS, STATUS_BASE) else f"a{k}" for k, p in enumerate(params)}


_PARAM_TOKEN = re.compile(r"\ba_\w+")


def _header(group: KernelGroup) -> str:
    nodes = ", ".join(group.nodes)
    return (
        f"# {group.id} [{group.phase}] {group.kind} over {list(group.space)}: "
        f"{len(group.nodes)} node(s): {nodes}"
    )


def pointwise_kernel(
    graph: Graph, group: KernelGroup, name: str, slots: list[StatusSlot], checks: bool, device: str = "cuda"
) -> tuple[list[KernelSource], list[str]]:
    """One thread per element on CUDA; on the CPU (one thread runs the whole launch) one
    thread loops over every element, which saves Warp's per-element call overhead."""
    w = KernelWriter(graph, group, name, slots, checks)
    space = tuple(group.space)
    size = math.prod(space)
    per_thread = w.begin_elements(size, device)
    index = tuple(idx.delinearize("tid", space)) if space else ()
    index = _bind_index(w, index)
    w.flat[(index, space)] = "tid"
    _warm(w, graph, group, group.outputs, index, space)
    for root in group.outputs:
        v = w.value_at(root, index)
        w.check_finite(root, v)
        w.emit(f"{w.param(root)}[tid] = {v}")
    w.end_elements(per_thread)
    return [_finish(w, graph, group, name, -(-size // per_thread), {})], w.helpers


def _warm(
    w: KernelWriter,
    graph: Graph,
    group: KernelGroup,
    seeds: Sequence[str],
    index: tuple[str, ...],
    space: tuple[int, ...],
) -> None:
    """Emit, in topological order, every member that ``seeds`` read at the iteration
    ``index`` (`same_index_members`), so that `value_at` finds them memoised: its
    recursion then nests only through views and stencils, never through an elementwise
    chain, however long (time-stepped models unroll into chains of thousands of ops).
    Computes nothing the seeds would not compute anyway."""
    at = same_index_members(graph, group.nodes, seeds, space)
    for name in group.nodes:
        if name in at:
            w.value_at(name, index)


def _bind_index(w: KernelWriter, index: tuple[str, ...]) -> tuple[str, ...]:
    out = []
    for k, e in enumerate(index):
        if e in ("0", "tid", "r") or e.isidentifier():
            out.append(e)
            continue
        var = f"i{k}_{w.fresh('')}"
        w.emit(f"{var} = {e}")
        out.append(var)
    return tuple(out)


def _finish(
    w: KernelWriter,
    graph: Graph,
    group: KernelGroup,
    name: str,
    dim: int,
    partials: dict[str, tuple[str, int]],
) -> KernelSource:
    params = w.params
    names = _positional(params)
    by_token = {param_name(p): n for p, n in names.items()}
    body = _PARAM_TOKEN.sub(lambda m: by_token.get(m.group(0), m.group(0)), "\n".join(w.lines))
    signature = _signature(params, names, graph, partials, w.constants)
    text = f"@wp.kernel\ndef {name}({signature}):\n{body}\n"
    constants = {p: (t, constant_array(t, v)) for p, (t, v) in w.constants.items()}
    return KernelSource(name, text, list(params), dim, group.id, dict(partials), constants, name, w.slot_base)


@dataclass
class ModuleSource:
    """All launches of one program and the text of the module that defines their kernels
    (one ``@wp.kernel`` per distinct kernel text); ``natives``: the C++ path's definitions,
    stub name -> (C++ text, Warp stub), as `dpt_ir.backends.cxx.kernels.group_kernels` gives
    them (read by `dpt_ir.export`, which writes them out as CUDA)."""

    kernels: list[KernelSource]
    slots: list[StatusSlot]
    text: str
    natives: dict[str, tuple[str, str]] = field(default_factory=dict)

    def functions(self) -> dict[str, list[str]]:
        """Each distinct ``@wp.kernel`` -> the launches that use it, in launch order."""
        out: dict[str, list[str]] = {}
        for k in self.kernels:
            out.setdefault(k.function, []).append(k.name)
        return out


def _share(kernels: list[KernelSource]) -> dict[str, KernelSource]:
    """Point every launch whose kernel text equals an earlier one's (up to the kernel's
    name) at that earlier kernel; the distinct kernels, by name. Parameters are named by
    position, reduction accumulators by number and status flags relative to the launch's
    base (`KernelWriter`), so structurally identical fusion groups (the same ops,
    attributes, types and access pattern over the same space) give equal texts whatever
    their values are called; the launches still bind their own buffers, constants
    (stencil weights) and partials (``params``)."""
    distinct: dict[str, KernelSource] = {}
    for k in kernels:
        key = k.text.split("(", 1)[1]  # the signature and body, after ``def <name>``
        first = distinct.setdefault(key, k)
        k.function, k.text = first.name, first.text
    return {k.name: k for k in distinct.values()}


def generate(plans: dict[str, Graph], title: str, header: str, checks: bool, device: str) -> ModuleSource:
    """Kernels for every fusion group of each named scheduled graph, in one module; a
    kernel shared by several launches (`_share`) is defined once, after a comment line per
    launch naming its group, nodes and code path. The module grows with the number of
    distinct kernels, not of groups.

    Groups the C++ path covers (`dpt_ir.backends.cxx.nest.cover`) become C++ element
    functions with CPU and CUDA drivers, in the module's preamble with the math header;
    the others get Warp-Python kernels (views, stencils, float64, other group kinds)."""
    kernels: list[KernelSource] = []
    slots: list[StatusSlot] = []
    helpers: list[str] = []
    natives: dict[str, tuple[str, str]] = {}
    headers: dict[str, str] = {}  # launch -> its group's description
    for prefix, graph in plans.items():
        replaced: set[str] = set()  # members of a row set emitted as one row kernel (`cxx.rows`)
        for group in plan_of(graph).groups:
            fresh = group.id not in replaced
            row_set = cxx_rows.starting_at(graph, group, prefix, slots, checks, device) if fresh else None
            if row_set is not None:
                ks, more, heads, members = row_set
                natives.update(more)
                kernels += ks
                headers.update(heads)
                replaced.update(members)
            if group.id in replaced:
                continue
            name = f"{prefix}_{group.id}"
            native = cxx_kernels.group_kernels(graph, group, name, slots, checks, device)
            if native is not None:
                ks, more = native
                natives.update(more)
            elif group.kind == "reduction":
                from dpt_ir.backends.warp.reductions import reduction_kernels  # builds on this module

                ks, hs = reduction_kernels(graph, group, name, slots, checks, device)
                helpers += [h for h in hs if h not in helpers]
            elif group.kind == "scatter":
                from dpt_ir.backends.warp.scatter import scatter_kernels  # builds on this module

                ks, hs = scatter_kernels(graph, group, name, slots, checks, device)
                helpers += [h for h in hs if h not in helpers]
            else:
                ks, hs = pointwise_kernel(graph, group, name, slots, checks, device)
                helpers += [h for h in hs if h not in helpers]
            kernels += ks
            headers.update({k.name: f"# {k.name}: [{k.path}] {_header(group)[2:]}" for k in ks})
    distinct = _share(kernels)
    users: dict[str, list[str]] = {}
    for k in kernels:
        users.setdefault(k.function, []).append(headers[k.name])
    text = "\n".join(
        [
            f"# Generated by dpt_ir for graph {title!r}. Do not edit.",
            f"# {header}",
            "from typing import Any",
            "",
            "import warp as wp",
            "",
            *_module_options(natives),
            *helpers,
            "",
            *(stub + "\n" for _, stub in natives.values()),
            *("\n".join([*users[name], k.text]) + "\n" for name, k in distinct.items()),
        ]
    )
    return ModuleSource(kernels, slots, text, natives)


def _module_options(natives: dict[str, tuple[str, str]]) -> list[str]:
    """The module's options; with C++ kernels, their source and the math header as the CPU
    and CUDA preambles (one text for both devices)."""
    # max_unroll 1: Warp would unroll every constant tap loop (and nested stencils
    # multiply), which made a 13-tap separable blur a 9 MB C++ file and a 77 s compile.
    options = '"enable_backward": False, "max_unroll": 1'
    if not natives:
        return [f"wp.set_module_options({{{options}}})"]
    source = "\n".join(cxx for cxx, _ in natives.values())
    if "'''" in source or "\\" in source:
        raise ContractError("generated C++ contains a triple quote or a backslash; it cannot be embedded in the module")
    build = "wp.ModuleBuildOptions(extra_cpu_preamble=_PREAMBLE, extra_cuda_preamble=_PREAMBLE)"
    return [
        "from dpt_ir.backends.cxx import math_header",
        "",
        f"_CXX = r'''\n{source}'''",
        '_PREAMBLE = math_header() + "\\n" + _CXX',
        f'wp.set_module_options({{{options}, "extra_build_options": {build}}})',
    ]

"""Launches of the C++ path: a covered group's C++ (element function, CPU and CUDA drivers,
ordered combine), its ``wp.func_native`` stub and the ``@wp.kernel`` that calls it.

Assumes: the group is covered (`dpt_ir.backends.cxx.nest.cover`). Guarantees: the C++ and
the stub are named by a hash of their own text (``dpk_<hash>``) and the kernel text carries
no value or launch name, so structurally identical groups give identical kernels, which
`dpt_ir.backends.warp.codegen._share` defines once. A kernel takes ``a__task0``: the first
task of the launch (a thread of the pool runs a contiguous range of tasks; `plan`).
"""

from __future__ import annotations

from typing import Any

from dpt_ir.backends.base import Target
from dpt_ir.backends.cxx import (
    beams,
    columns,
    contraction,
    drivers,
    fanbeam,
    flat_rows,
    projection,
    recurrence,
    row_images,
    sort_stages,
)
from dpt_ir.backends.cxx.common import C_TYPES, DTYPE_OF_C, INDEX_LIMIT, TOKEN
from dpt_ir.backends.cxx.emit import ElementWriter, element_functions
from dpt_ir.backends.cxx.nest import Nest, cover
from dpt_ir.backends.cxx.units import Unit, hashed, launch
from dpt_ir.ir.fanbeam import FanBeam
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup


def _finalize(nest: Nest, w: ElementWriter, q: int, index: str, subst: dict[str, str]) -> list[str]:
    root = nest.roots[q]
    t, out_t = nest.templates[root], C_TYPES[w.graph.types[root].dtype]
    lines = [f"const {out_t} res{q} = {t.finalize.format(**subst)};"]
    check = w.nonfinite(root, f"res{q}")
    if check:
        lines.append(check)
    if root in nest.group.outputs:
        lines.append(f"{w.param(root)}[{index}] = res{q};")
    return lines


def group_kernels(
    graph: Graph,
    group: KernelGroup,
    name: str,
    slots: list[Any],
    checks: bool,
    target: Target,
    stage: drivers.Layout | None = None,
) -> tuple[list[Any], dict[str, tuple[str, str]]] | None:
    """The launches of ``group`` on the C++ path for ``target`` (its partition, blocks and
    combine levels) and the native definitions they need (stub name -> C++ and stub text);
    None when the group is not covered. ``stage``: the group is a stage of a row kernel
    (`rows`), with this layout (task = row, on both devices)."""
    if group.kind == "contraction":  # a matrix product: its own drivers (`contraction`)
        return contraction.contraction_kernels(graph, group, name, slots, checks, target)
    if group.kind == "recurrence":  # a line filter: its own drivers (`recurrence`)
        return recurrence.recurrence_kernels(graph, group, name, slots, checks, target.kind)
    if group.kind == "projection":  # a matrix-free projection: its program's own drivers
        program = beams.program_of(graph, group.roots[0])
        if isinstance(program, FanBeam):
            return fanbeam.fanbeam_kernels(graph, group, program, name, slots, checks, target.kind)
        return projection.projection_kernels(graph, group, program, name, slots, checks, target.kind)
    nest = cover(graph, group)
    if nest is None or (stage is not None and (nest.columns or nest.index != "int")):
        return None  # a row kernel's stages take 32-bit rows (its members then launch one by one)
    sort = group.kind == "scatter" and group.scatter.form == "sort"  # its CSR is built per run
    pre, natives = sort_stages.sort_launches(graph, group, name, slots, checks) if sort else ([], {})
    if stage is not None:
        lay = stage
    elif nest.columns:
        lay = columns.layout(nest, target)
    else:
        lay = drivers.layout(nest, target)
    if lay.dim > INDEX_LIMIT:
        return None  # the launch's task index is a 32-bit int (`nest.missing_lowering` says so)
    params: list[str] = []
    w = ElementWriter(graph, nest, params, slots, name, checks)
    w.rows = nest.row_position
    body = w.body()
    edge = w.edge_body() if nest.guards else None
    ends = w.ends_body() if nest.ends is not None or nest.mapped_ends else None
    partials: dict[str, tuple[str, int]] = dict(w.scratch)
    finish: list[str] = []
    for q, root in enumerate(nest.roots):
        subst = drivers.subst(nest, q)
        if lay.parts == 1:
            finish += _finalize(nest, w, q, "o", subst)
            finish += w.epilogue({r: f"res{k}" for k, r in enumerate(nest.roots)}) if q == len(nest.roots) - 1 else []
            continue
        for state, c_type in nest.templates[root].state:
            p = f"$partial:{root}:{state}"
            partials[p] = (DTYPE_OF_C[c_type], lay.dim)
            finish.append(f"{w.param(p)}[t] = s{q}_{state};")
    nflags = len(slots) - w.slot_base
    unit = Unit(graph, params, {*nest.stores, *nest.roots, *nest.after, *partials}, partials, w.constants)
    x_types = [C_TYPES[graph.types[graph.node_map[r].inputs[0]].dtype] for r in nest.roots]
    ys = "".join(f", {x_types[q]}& y{q}" for q in drivers.buffered(nest, w.direct))
    # Status flags and the huge-trig flag are bool: clang ORs a vectorised loop's compares
    # into them without widening each to 32-bit lanes (int flags cost a vpmovm2d and a shift
    # per vector and check: the five benchmark graphs' steps took 1.01-1.07x as long).
    elem = [*w.table_definitions(), *row_images.tables(nest.images, TOKEN)]
    elem += element_functions(nest, unit.sig(), ys, {"elem": body, "edge": edge, "ends": ends})
    sig = f"{unit.sig()}, int* st, int sb, int t"
    spec = drivers.DriverSpec(
        nest=nest,
        layout=lay,
        target=target,
        args=unit.args(),
        sig=sig,
        uses_big=w.uses_big,
        nflags=nflags,
        checks=checks,
        x_types=tuple(x_types),
        finish=tuple(finish),
        strided=stage is None,
        direct=dict(w.direct),
    )
    if nest.columns:
        drv = columns.column_drivers(spec)
    elif nest.roots:
        drv = drivers.reduction_drivers(spec)
    else:
        # The rows of a stencil's pads as flat runs, where short rows make the per-row work count.
        flat = stage is None and flat_rows.eligible(nest, body, target.flat_rows, params)
        drv = drivers.pointwise_drivers(spec, flat_rows.cpu_runs if flat else None)
    fn, cxx = hashed("\n".join([*elem, drv.replace("F_", f"{TOKEN}_")]) + "\n")
    natives[fn] = (cxx, unit.stub(fn, f"{fn}_cpu", f"{fn}_cuda", checks))
    main = launch(name, unit, fn, checks, lay.dim, group.id, dict(partials), w.slot_base)
    if lay.parts == 1:
        return [*pre, main], natives
    combine: list[Any] = []
    groups = lay.parts
    size = target.combine_group
    if target.kind != "cpu" and stage is None and lay.parts > size:
        kernel, more, partials, groups = _combine_kernel(graph, nest, name + "_combine", slots, lay, partials, size)
        natives.update(more)
        combine.append(kernel)
    suffix = ":group" if combine else ""
    final, more = _final_kernel(graph, nest, name + "_final", slots, checks, groups, partials, suffix)
    natives.update(more)
    return [main, *combine, final], natives


def _final_kernel(
    graph: Graph,
    nest: Nest,
    name: str,
    slots: list[Any],
    checks: bool,
    parts: int,
    partials: dict[str, tuple[str, int]],
    suffix: str = "",
) -> tuple[Any, dict[str, tuple[str, str]]]:
    """One thread per output: its ``parts`` partials (``$partial:<root>:<state><suffix>``)
    folded in order, finalized, checked, stored."""
    params: list[str] = []
    w = ElementWriter(graph, nest, params, slots, name, checks)
    body = [""]  # the flags' declaration, once their number is known
    for q, root in enumerate(nest.roots):
        t = nest.templates[root]
        subst = drivers.subst(nest, q)
        src = {state: w.param(f"$partial:{root}:{state}{suffix}") for state, _ in t.state}
        body += _fold(nest, q, src, f"o * {parts}", "0", str(parts))
        body += _finalize(nest, w, q, "o", subst)
    body += w.epilogue({r: f"res{k}" for k, r in enumerate(nest.roots)})
    nflags = len(slots) - w.slot_base
    nf = max(nflags, 1)
    body[0] = f"const int o = t; bool fl[{nf}] = {{false}}; (void)fl;"
    if checks and nflags:
        body.append(f"for (int k = 0; k < {nf}; ++k) if (fl[k]) st[sb + k] = 1;")
    unit = Unit(graph, params, {*nest.roots, *nest.after}, partials, w.constants)
    lines = [*w.table_definitions(), f"DP_FN void {TOKEN}_final({unit.sig()}, int* st, int sb, int t) {{"]
    lines += [*("    " + s for s in body), "}"]
    fn, cxx = hashed("\n".join(lines) + "\n")
    natives = {fn: (cxx, unit.stub(fn, f"{fn}_final", f"{fn}_final", checks))}
    kernel = launch(name, unit, fn, checks, nest.rows, nest.group.id,
                     {p: v for p, v in partials.items() if p in params}, w.slot_base)  # fmt: skip
    return kernel, natives


def _fold(nest: Nest, q: int, src: dict[str, str], row: str, first: str, end: str) -> list[str]:
    """C++ that folds root ``q``'s partials ``[first, end)`` of the row starting at ``row``
    (each state read from its array in ``src``) in order into ``s<q>_<state>``, with the
    op's own combine template (the one fixed order of `_final_kernel` and `_combine_kernel`)."""
    t = nest.templates[nest.roots[q]]
    lines = [f"{c_type} s{q}_{state} = {src[state]}[{row} + {first}];" for state, c_type in t.state]
    lines.append(f"for (int p = {first} + 1; p < {end}; ++p) {{")
    lines += [f"    const {c_type} o{q}_{state} = {src[state]}[{row} + p];" for state, c_type in t.state]
    return [*lines, "    " + t.combine.format(**drivers.subst(nest, q)), "}"]


def _combine_kernel(
    graph: Graph,
    nest: Nest,
    name: str,
    slots: list[Any],
    lay: drivers.Layout,
    partials: dict[str, tuple[str, int]],
    size: int,
) -> tuple[Any, dict[str, tuple[str, str]], dict[str, tuple[str, int]], int]:
    """The first level of a CUDA reduction's two-level combine: thread ``t = o * groups + g``
    folds the partials ``[g G, (g + 1) G)`` of output ``o`` in order (``G``: ``size``,
    `Target.combine_group`) into one group partial (``$partial:<root>:<state>:group``), which
    `_final_kernel` then folds in ``g`` order. Every fold order is fixed by ``parts`` and ``G``:
    a result is the same for any launch. Returns the kernel, its C++, the partials (the group
    partials added) and ``groups``."""
    groups = -(-lay.parts // size)
    params: list[str] = []
    w = ElementWriter(graph, nest, params, slots, name, False)
    out = dict(partials)
    body = [f"const int o = t / {groups}, g = t - o * {groups}, p0 = g * {size};"]
    body.append(f"const int p1 = {drivers.c_min(f'p0 + {size}', lay.parts)};")
    for q, root in enumerate(nest.roots):
        t = nest.templates[root]
        src = {state: w.param(f"$partial:{root}:{state}") for state, _ in t.state}
        body += _fold(nest, q, src, f"o * {lay.parts}", "p0", "p1")
        for state, c_type in t.state:
            group = f"$partial:{root}:{state}:group"
            out[group] = (DTYPE_OF_C[c_type], nest.rows * groups)
            body.append(f"{w.param(group)}[t] = s{q}_{state};")
    written = {p for p in out if p.endswith(":group")}
    unit = Unit(graph, params, written, out, w.constants)
    lines = [f"DP_FN void {TOKEN}_combine({unit.sig()}, int* st, int sb, int t) {{", "    (void)st; (void)sb;"]
    lines += [*("    " + s for s in body), "}"]
    fn, cxx = hashed("\n".join(lines) + "\n")
    natives = {fn: (cxx, unit.stub(fn, f"{fn}_combine", f"{fn}_combine", False))}
    used = {p: v for p, v in out.items() if p in params}
    kernel = launch(name, unit, fn, False, nest.rows * groups, nest.group.id, used, w.slot_base)
    return kernel, natives, out, groups

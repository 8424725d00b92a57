"""The module source of a program's plans: every fusion group lowered by the C++ path.

Assumes: scheduled graphs whose kernel plans hold fusion's typed groups. Guarantees: each
group becomes the launches `dpt_ir.backends.cxx.kernels.group_kernels` gives (C++ element
functions with CPU and CUDA drivers, called from ``@wp.kernel`` stubs through
``wp.func_native``), but a group that writes only zero-size values, which has none
(`empty`); a group the C++ path cannot lower is a ContractError naming the group, its ops
and what is missing, raised here, at compile time, before any kernel runs. Warp is the
build driver, runtime, array library and tape; the op math is C++ only.

Kernel text never carries a value's name (parameters are positional, status flags relative
to a per-launch base, C++ units named by a hash of their text), so structurally identical
fusion groups give identical kernels, and `generate` defines each distinct kernel once: the
module grows with the number of distinct groups, not of groups (`_share`).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpt_ir.backends.base import Target
from dpt_ir.backends.cxx import kernels as cxx_kernels
from dpt_ir.backends.cxx import rows as cxx_rows
from dpt_ir.backends.cxx import sites as cxx_sites
from dpt_ir.backends.cxx.nest import missing_lowering, user_functions
from dpt_ir.backends.launches import KernelSource, StatusSlot
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup, plan_of


def _header(group: KernelGroup) -> str:
    nodes = ", ".join(group.nodes)
    return f"# {group.id} [{group.phase}] {group.kind} over {list(group.space)}: {len(group.nodes)} node(s): {nodes}"


@dataclass
class ModuleSource:
    """All launches of one program and the text of the module that defines their kernels
    (one ``@wp.kernel`` per distinct kernel text); ``natives``: the C++ definitions, stub
    name -> (C++ text, Warp stub), as `dpt_ir.backends.cxx.kernels.group_kernels` gives them
    (read by `dpt_ir.export`, which writes them out as CUDA)."""

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
    position and status flags relative to the launch's base, so structurally identical
    fusion groups (the same ops, attributes, types and access pattern over the same space)
    give equal texts whatever their values are called; the launches still bind their own
    buffers, constants and partials (``params``)."""
    distinct: dict[str, KernelSource] = {}
    for k in kernels:
        key = k.text.split("(", 1)[1]  # the signature and body, after ``def <name>``
        first = distinct.setdefault(key, k)
        k.function, k.text = first.name, first.text
    return {k.name: k for k in distinct.values()}


def _refused(graph: Graph, group: KernelGroup, plan: str) -> ContractError:
    """The compile error of a group the C++ path does not lower: the user's ``dp.*``
    functions first, then the group, then what is unsupported (`missing_lowering`)."""
    ops = sorted({graph.node_map[n].opdef.name for n in group.nodes})
    functions = user_functions(graph, list(group.nodes))
    head = f"{', '.join(functions)}: " if functions else ""
    return ContractError(
        f"{head}kernel group {group.id!r} of plan {plan!r} ({group.kind} over {list(group.space)}, ops {ops}): "
        f"expected a group the C++ backend lowers, found {missing_lowering(graph, group)}"
    )


def empty(graph: Graph, group: KernelGroup) -> bool:
    """Whether every value ``group`` writes has no element (a zero-length axis): there is
    nothing to compute, so it has no launch; its buffers are allocated empty. (A value with
    elements computed from empty inputs is a reduction's identity, folded to a constant by
    canonicalize, `OpDef.empty_value`.)"""
    return all(graph.types[v].size == 0 for v in group.outputs)


def generate(
    plans: dict[str, Graph], title: str, header: str, checks: bool, target: Target, denormals: str = "keep"
) -> ModuleSource:
    """Kernels for every fusion group of each named scheduled graph, in one module, laid out
    for ``target`` (its kind, task partition, element blocks, reduction partials and combine
    levels: the object is passed down to every driver that reads them); a kernel shared by
    several launches (`_share`) is defined once, after a comment line per launch naming its
    group and nodes. A row set (`dpt_ir.backends.cxx.rows`) is one row kernel in place of its
    member groups (CPU targets). The C++ units and the math header are the module's CPU and
    CUDA preamble; ``denormals="flush"`` defines ``DP_FLUSH_DENORMALS`` in the CPU one
    (`dp_fp_enter`). ContractError (nothing generated) when a group has no C++ lowering."""
    with cxx_sites.image_maps():  # the views' image maps, shared by the groups of this module
        return _generate(plans, title, header, checks, target, denormals)


def _generate(
    plans: dict[str, Graph], title: str, header: str, checks: bool, target: Target, denormals: str
) -> ModuleSource:
    kernels: list[KernelSource] = []
    slots: list[StatusSlot] = []
    natives: dict[str, tuple[str, str]] = {}
    headers: dict[str, str] = {}  # launch -> its group's description
    wide = False  # a contraction group: its module is built for 512-bit vectors (`_module_options`)
    for prefix, graph in plans.items():
        replaced: set[str] = set()  # members of a row set emitted as one row kernel (`cxx.rows`)
        for group in plan_of(graph).groups:
            if group.id in replaced or empty(graph, group):
                continue
            row_set = cxx_rows.starting_at(graph, group, prefix, slots, checks, target)
            if row_set is not None:  # its members, this group first, are one row kernel
                ks, more, heads, members = row_set
                natives.update(more)
                kernels += ks
                headers.update(heads)
                replaced.update(members)
                continue
            wide |= group.kind == "contraction"
            lowered = cxx_kernels.group_kernels(graph, group, f"{prefix}_{group.id}", slots, checks, target)
            if lowered is None:
                raise _refused(graph, group, prefix)
            ks, more = lowered
            natives.update(more)
            kernels += ks
            headers.update({k.name: f"# {k.name}: [cxx] {_header(group)[2:]}" for k in ks})
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
            *_module_options(natives, wide, denormals == "flush"),
            "",
            *(stub + "\n" for _, stub in natives.values()),
            *("\n".join([*users[name], k.text]) + "\n" for name, k in distinct.items()),
        ]
    )
    return ModuleSource(kernels, slots, text, natives)


def _module_options(natives: dict[str, tuple[str, str]], wide: bool, flush: bool = False) -> list[str]:
    """The module's options; with C++ kernels, their source and the math header as the CPU
    and CUDA preambles (one text for both devices), and on the CPU the thread pool's native
    side (``dp_pool.h``, `dpt_ir.backends.warp.tasks`); the CPU flags of `cpu_flags`, with
    ``wide`` (a matrix product in the module) ``-mprefer-vector-width=512`` added. ``flush``: the CPU preamble
    starts by defining ``DP_FLUSH_DENORMALS`` (denormals flushed to zero in its kernels)."""
    # max_unroll 1: the stubs hold no loops; kept so that Warp never unrolls into a module.
    options = '"enable_backward": False, "max_unroll": 1'
    if not natives:
        return [f"wp.set_module_options({{{options}}})"]
    source = "\n".join(cxx for cxx, _ in natives.values())
    if "'''" in source or "\\" in source:
        raise ContractError("generated C++ contains a triple quote or a backslash; it cannot be embedded in the module")
    cpu = ('"#define DP_FLUSH_DENORMALS 1\\n" + ' if flush else "") + "_PREAMBLE + pool_header()"
    build = f"wp.ModuleBuildOptions(extra_cpu_preamble={cpu}, extra_cuda_preamble=_PREAMBLE)"
    # `cpu_flags`: -march=native in place of Warp's default raised inlining thresholds (the same
    # speed, builds about 2 s shorter; `dpt_ir.backends.warp.flags`). ``wide``: clang's
    # -march=native prefers 256-bit vectors on AVX-512 cores (Skylake-X on), so the micro
    # kernel's loops would use half the register width: 88 -> 147 GFLOP/s at 1024² float32,
    # 37 -> 62 float64 (one thread, 2026-12-04). Vector width never reorders a sum (no
    # fast-math): same bits (checked at 64² to 2048²).
    options += f', "cpu_compiler_flags": cpu_flags({wide})'
    return [
        "from dpt_ir.backends.cxx import math_header, pool_header",
        "from dpt_ir.backends.warp.flags import cpu_flags",
        "",
        f"_CXX = r'''\n{source}'''",
        '_PREAMBLE = math_header() + "\\n" + _CXX',
        f'wp.set_module_options({{{options}, "extra_build_options": {build}}})',
    ]

"""The CUDA build of a program's plans and its one translation unit, ``kernels.cu``.

Assumes: a validated graph and the options `dp.compile` used. Guarantees: `cuda_plans` runs
the pass pipelines as `dp.compile` does for a GPU (the CUDA budgets, the CUDA partition of
reductions into ordered partials) and generates their launches, with no GPU and no Warp
module build (every launch is a C++ unit: `codegen.generate` raises ContractError, naming
the group and its ops, for a group the C++ path cannot lower). `kernels_cu` gives a file
that builds three ways:

- NVRTC / nvcc: the math header, each unit's element function and CUDA driver, and one
  ``extern "C" __global__ void k_<unit>(<pointers>, int* st, int sb, int n)`` per unit, one
  thread per task ``t < n``;
- host C++: the CPU drivers and ``extern "C" void h_<unit>(void* const* a, int* st, int sb,
  int t0, int t1)`` running tasks ``[t0, t1)``;
- host C++ with ``-DDP_CUDA``: the same ``h_<unit>`` entry points running the CUDA drivers as
  plain C++ (the CUDA intrinsics of ``dp_math.h`` get exact host equivalents), which replays
  the CUDA partition and combine on the CPU.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from dpt_ir.backends.base import target_for
from dpt_ir.backends.cxx import math_header
from dpt_ir.backends.cxx.units import TASK0
from dpt_ir.backends.launches import STATUS, STATUS_BASE, KernelSource, StatusSlot
from dpt_ir.backends.warp import codegen
from dpt_ir.driver.compile import PLAN_PREFIX
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.passes.options import CompileOptions

_CALL = re.compile(r"\bn_(dpk_[0-9a-f]{16})\(")


@dataclass(frozen=True)
class Unit:
    """One C++ unit a launch calls: its name, text and the parameters of its drivers
    (C types, the trailing ``int* st, int sb, int t`` left out)."""

    name: str
    text: str
    cpu: str
    cuda: str
    pointers: list[str]


@dataclass
class CudaBuild:
    graphs: dict[str, Graph]  # plan (or piece) name -> scheduled graph
    kernels: dict[str, list[KernelSource]]  # plan (or piece) name -> its launches, in order
    slots: list[StatusSlot]
    units: dict[str, Unit]  # launch name -> unit
    host_tasks: dict[str, int]  # launch name -> its unit's CPU driver's tasks, where not ``dim`` (`host_tasks`)


def cuda_plans(graph: Graph, pipelines: dict[str, CompileOptions], checks: bool) -> CudaBuild:
    """Scheduled graphs and C++ launches of ``pipelines`` (plan name -> options)."""
    from dpt_ir.passes.manager import run_pipeline

    graphs = {name: run_pipeline(graph, opts).graph for name, opts in pipelines.items()}
    return _generate(graph.name, graphs, {k: PLAN_PREFIX[k] for k in graphs}, checks)


def cuda_pieces(title: str, pieces: dict[str, Graph], base: dict[str, Any]) -> CudaBuild:
    """A loop program's pieces (segments, bodies, body vjps: name -> graph) as
    `dpt_ir.driver.compile.compile_pieces` builds them, forward-only ``run`` pipelines with the CUDA
    options ``base`` (`dpt_ir.driver.compile.options_of`), in one module: one status table."""
    from dpt_ir.driver.compile import pipelines
    from dpt_ir.passes.manager import run_pipeline

    graphs = {name: run_pipeline(g, pipelines(g, (), None, base)["run"]).graph for name, g in pieces.items()}
    return _generate(title, graphs, {name: f"p{k}" for k, name in enumerate(pieces)}, base["checks"])


def _generate(title: str, graphs: dict[str, Graph], prefixes: dict[str, str], checks: bool) -> CudaBuild:
    """Generate the CUDA launches of scheduled ``graphs`` (name -> graph; kernel names start
    with ``prefixes[name]``), each launch's C++ unit found."""
    source = codegen.generate(
        {prefixes[k]: g for k, g in graphs.items()}, title, "CUDA export", checks, target_for("cuda")
    )
    kernels = {name: [k for k in source.kernels if k.name.startswith(prefixes[name] + "_")] for name in graphs}
    units = {}
    for ks in kernels.values():
        for k in ks:
            fn = _CALL.search(k.text)
            if fn is None or fn.group(1) not in source.natives:
                raise ContractError(f"export of {title!r}: launch {k.name!r} calls no C++ unit; found {k.text!r}")
            units[k.name] = _unit(fn.group(1), source.natives[fn.group(1)][0])
    return CudaBuild(graphs, kernels, source.slots, units, host_tasks(graphs, prefixes, units, checks))


def host_tasks(
    graphs: dict[str, Graph], prefixes: dict[str, str], units: dict[str, Unit], checks: bool
) -> dict[str, int]:
    """The tasks of launches whose CPU driver does not run ``dim`` tasks (launch name ->
    count). A unit's CPU driver is generated on the launch's CUDA layout (one task per CUDA
    thread), except where its partition does not depend on the device (a reduction over
    leading axes, `columns.layout`: blocks of columns on the CPU): then the CPU build of
    the same graphs launches the same unit, and that launch's ``dim`` is the driver's task
    count."""
    source = codegen.generate(
        {prefixes[k]: g for k, g in graphs.items()}, "CPU tasks", "CUDA export", checks, target_for("cpu")
    )
    out = {}
    for k in source.kernels:
        fn = _CALL.search(k.text)
        if k.name in units and fn is not None and fn.group(1) == units[k.name].name:
            out[k.name] = k.dim
    return out


def _unit(name: str, text: str) -> Unit:
    """The unit's entry names (`group_kernels`: ``<name>_cpu``/``<name>_cuda``, or one
    ``<name>_final`` or ``<name>_combine`` for both devices) and its pointer parameters, from
    its signature."""
    both = f"{name}_combine" if f"{name}_combine(" in text else f"{name}_final"
    cpu, cuda = (f"{name}_cpu", f"{name}_cuda") if f"{name}_cuda(" in text else (both,) * 2
    match = re.search(rf"DP_FN void {cuda}\(([^)]*)\)", text)
    if match is None:
        raise ContractError(f"C++ unit {name!r}: no driver {cuda!r} found in its text")
    params = [p.strip() for p in match.group(1).split(",")]
    if [p.rsplit(" ", 1)[-1] for p in params[-3:]] != ["st", "sb", "t"]:
        raise ContractError(f"C++ unit {name!r}: expected drivers ending in (int* st, int sb, int t), found {params}")
    return Unit(name, text, cpu, cuda, [p.rsplit(" ", 1)[0] for p in params[:-3]])


def pointer_params(k: KernelSource) -> list[str]:
    """The buffers a launch binds to its unit's pointer parameters, in order."""
    return [p for p in k.params if p not in (STATUS, STATUS_BASE, TASK0)]


_HOST_SHIMS = """\
#if !defined(__CUDACC__) && !defined(__CUDACC_RTC__)
#include <math.h>
#include <string.h>
#ifdef DP_CUDA  // the CUDA drivers as host C++: exact host forms of the intrinsics dp_math.h uses
static inline float __int_as_float(int i) { float f; memcpy(&f, &i, 4); return f; }
static inline int __float_as_int(float f) { int i; memcpy(&i, &f, 4); return i; }
static inline double __longlong_as_double(long long i) { double d; memcpy(&d, &i, 8); return d; }
static inline long long __double_as_longlong(double d) { long long i; memcpy(&i, &d, 8); return i; }
static inline float __fmaf_rn(float a, float b, float c) { return fmaf(a, b, c); }
static inline double __fma_rn(double a, double b, double c) { return fma(a, b, c); }
static inline float __fsqrt_rn(float x) { return sqrtf(x); }
#endif
#endif
"""


def _entries(unit: Unit) -> list[str]:
    ptrs = ", ".join(f"{c} a{k}" for k, c in enumerate(unit.pointers))
    args = "".join(f"a{k}, " for k in range(len(unit.pointers)))
    casts = "".join(f"({c})a[{k}], " for k, c in enumerate(unit.pointers))
    loop = "for (int t = t0; t < t1; ++t) "
    return [
        "#if defined(__CUDACC__) || defined(__CUDACC_RTC__)",
        f'extern "C" __global__ void k_{unit.name}({ptrs}{", " if ptrs else ""}int* st, int sb, int n) {{',
        "    const int t = (int)(blockIdx.x * blockDim.x + threadIdx.x);",
        f"    if (t < n) {unit.cuda}({args}st, sb, t);",
        "}",
        "#else",
        f'extern "C" void h_{unit.name}(void* const* a, int* st, int sb, int t0, int t1) {{',
        "    (void)a;",
        "#ifdef DP_CUDA",
        f"    {loop}{unit.cuda}({casts}st, sb, t);",
        "#else",
        f"    {loop}{unit.cpu}({casts}st, sb, t);",
        "#endif",
        "}",
        "#endif",
    ]


def kernels_cu(title: str, units: list[Unit]) -> str:
    """The translation unit of ``units`` (each once, in first-use order)."""
    distinct = {u.name: u for u in units}
    lines = [
        f"// Generated by dpt_ir for graph {title!r} (dpt-ir export-cuda). Do not edit.",
        "// Builds with NVRTC/nvcc (k_* kernels) or a host C++ compiler (h_* entry points; with",
        "// -DDP_CUDA they run the CUDA drivers). See docs/gpu-check.md.",
        _HOST_SHIMS,
        math_header(),
    ]
    for u in distinct.values():
        lines += [f"// -- unit {u.name}", u.text, *_entries(u), ""]
    return "\n".join(lines)

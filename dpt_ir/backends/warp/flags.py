"""`cpu_flags`: the CPU compiler flags of dpt_ir's generated modules.

Warp 1.19's default ``wp.config.cpu_compiler_flags`` (`WARP_DEFAULT`) raises LLVM's inlining
thresholds (``-inline-threshold=9000``, ``-inline-cold-callsite-threshold=3000``) and caps SLP
recursion at 4, for Warp's own Python kernels. dpt_ir's kernels are C++ whose functions are
nearly all ``always_inline`` or ``noinline`` (``DP_FN``, ``DP_COLD`` in ``dp_math.h``; the
exceptions are a few lambdas, such as the flat runs' ``one_row``, and the thread pool's
helpers), so the raised thresholds find little left to inline and cost build time: the wave program's module
(`benchmarks/bench_wave.py`, ``add_at`` sources) builds in 3.2-3.4 s with ``-march=native``
against 5.1-5.5 s with Warp's default, and ran as fast (16.04 against 16.01 ms, 16.25 against
16.16, mask sources 15.71 against 15.89, interleaved in one process, the same bits; the heat
scan, the radon step and `bench_gemm.py --quick` were unchanged too, 2026-12-07). So where
the flags are Warp's default, a module gets ``-march=native`` (the host's features, LLVM's
default thresholds: what Warp's documentation names for that); flags a user set are kept as
they are. ``wide`` modules (a matrix product) add ``-mprefer-vector-width=512``
(`dpt_ir.backends.warp.codegen`).

Assumes: nothing (reads ``wp.config`` when a generated module is imported, which is when
Warp resolves its options). Guarantees: the same flags for every module of one setting;
Warp's module hash covers them, so a change rebuilds.
"""

from __future__ import annotations

import warp as wp

WARP_DEFAULT = (
    "-march=native -mllvm=-inline-threshold=9000 -mllvm=-inline-cold-callsite-threshold=3000"
    " -mllvm=-slp-recursion-max-depth=4"
)
WIDE = " -mprefer-vector-width=512"


def cpu_flags(wide: bool = False) -> str:
    """The CPU flags of a generated module (see the module docstring)."""
    user = wp.config.cpu_compiler_flags
    base = "-march=native" if user is None or user == WARP_DEFAULT else user
    return base + (WIDE if wide else "")

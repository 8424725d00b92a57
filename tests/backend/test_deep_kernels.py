"""A kernel as long as the size bound allows is written without deep recursion: the C++
emitter evaluates an elementwise member's operands with an explicit stack
(`dpt_ir.backends.cxx.emit.ElementWriter._operands_first`), so the depth of a chain fused
into one kernel does not meet Python's recursion limit. Code generation only (no build).
"""

from __future__ import annotations

import sys

import dpt_ir as dp
from dpt_ir.backends.base import target_for
from dpt_ir.backends.warp import codegen
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.fusion_steps import MAX_KERNEL_WORK
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

LINKS = MAX_KERNEL_WORK  # y * 1.0001 + 0.5 per link: cut after about MAX_KERNEL_WORK / 2 links


def test_a_chain_as_deep_as_the_bound_is_written_under_a_low_recursion_limit() -> None:
    g = dp.GraphBuilder("deep_chain")
    x = g.input("x", (64,), "float32")
    y = x
    for _ in range(LINKS):
        y = y * 1.0001 + 0.5
    g.output("y", y)
    plan = run_pipeline(g.build(), CompileOptions()).graph
    deepest = max(len(k.nodes) for k in plan_of(plan).groups)
    assert deepest >= MAX_KERNEL_WORK // 2, deepest  # a kernel hundreds of nodes deep
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(600)  # below 3 frames per fused node
    try:
        source = codegen.generate({"run": plan}, "deep_chain", "", True, target_for("cpu"))
    finally:
        sys.setrecursionlimit(limit)
    assert source.functions()

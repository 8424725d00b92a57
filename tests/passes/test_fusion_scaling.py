"""Fusion on long chains (time-stepped models unroll into them): vertical fusion across
written values, and passes that neither recurse nor search per pair."""

from __future__ import annotations

import time

import pytest

import dpt_ir as dp
from benchmarks.compile_scaling import chain
from dpt_ir.backends.base import target_for
from dpt_ir.backends.warp import codegen
from dpt_ir.driver.compile import options_of, pipelines
from dpt_ir.ir.kernel_ir import KernelGroup, plan_of
from dpt_ir.ir.records import saved_plan_of, saved_values
from dpt_ir.passes.fusion_steps import MAX_KERNEL_WORK
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

from .graphs import CASES


def _forward_groups(graph: dp.Graph) -> list[KernelGroup]:
    return [g for g in plan_of(graph).groups if g.phase == "forward"]


def test_saved_values_are_written_by_the_kernel_that_keeps_computing() -> None:
    """chain16 under the CPU recompute budget saves values mid-chain; the forward, the chain
    and its sum, stays one kernel that writes them (it took 4 kernels when each saved
    value ended a kernel)."""
    case = CASES["chain16"]
    graph = run_pipeline(case.graph, CompileOptions(wrt=case.wrt, recompute_budget=16)).graph
    saved = saved_values(graph)
    assert len(saved) >= 2
    (forward,) = _forward_groups(graph)
    assert saved <= set(forward.outputs), (saved, forward.outputs)


def test_a_long_chain_needs_few_kernels_and_no_recursion() -> None:
    """A 300-step chain (1,800 nodes, deeper than Python's recursion limit) goes through
    every pass; its tape forward saves a value per step yet takes a few kernels, each
    within the group size cap."""
    graph = run_pipeline(chain(300, (16,)), CompileOptions(wrt=("x",), recompute_budget=16)).graph
    forward = _forward_groups(graph)
    saved = saved_plan_of(graph)
    assert saved is not None and len(saved.saved) >= 250
    assert len(forward) <= 40, len(forward)


@pytest.fixture(scope="module")
def chain_plans() -> tuple[dict[str, dp.Graph], float]:
    """A 333-step chain (1,999 nodes) through the three pipelines of `dp.compile` (run,
    value_and_grad, tape) at the CPU budgets: the scheduled graphs and the CPU seconds."""
    base = options_of(target_for("cpu"))
    graph = chain(333, (16,))
    assert len(graph.nodes) == 1999
    start = time.process_time()
    plans = {}
    for name, options in pipelines(graph, ("x",), "loss", base).items():
        result = run_pipeline(graph, options)
        assert [r.name for r in result.records][-3:] == ["saved_attributes", "fusion", "schedule"]
        plans[name] = result.graph
    return plans, time.process_time() - start


def test_a_2000_node_chain_runs_every_pipeline_within_a_time_bound(
    chain_plans: tuple[dict[str, dp.Graph], float],
) -> None:
    """The three pipelines of the 2,000-node chain run within a generous CPU-time bound
    (process time, so other processes on a shared machine do not count): about 2.2 s of
    CPU here, 5.0 s before the passes were made near-linear; the scaling figures are in
    docs/benchmarks.md."""
    plans, seconds = chain_plans
    for name, plan in plans.items():
        assert plan_of(plan).groups, name
        # No kernel inlines the whole chain (value_and_grad fused all 2,000 nodes into one).
        biggest = max(sum(plan.node_map[n].opdef.work for n in g.nodes) for g in plan_of(plan).groups)
        assert biggest <= 2 * MAX_KERNEL_WORK, (name, biggest)
    assert seconds < 20.0, seconds


def test_a_long_chains_backward_pieces_share_kernels(chain_plans: tuple[dict[str, dp.Graph], float]) -> None:
    """The value_and_grad and tape modules of the 2,000-node chain hold few distinct kernels
    (counted in the generated source, no Warp build): the size bound cuts every strand of
    the ladder (forward state, cotangent, gradient accumulator) at the same step, so the
    pieces repeat. Before, the pieces were cut at offsets drifting against the step and
    value_and_grad's 55 launches ran 44 distinct kernels (24 at 1,000 nodes): the module
    grew with the chain."""
    plans, _ = chain_plans
    for name in ("value_and_grad", "tape"):
        source = codegen.generate({name: plans[name]}, "chain333", "", True, target_for("cpu"))
        distinct = len(source.functions())
        assert distinct <= 12, (name, distinct, len(source.kernels))
        assert len(source.kernels) >= 2 * distinct, (name, distinct, len(source.kernels))

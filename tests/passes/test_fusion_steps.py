"""Kernel cuts that repeat with a time-stepped model's period (`dpt_ir.passes.fusion_steps`):
each step of an unrolled model is cut at the same place, so its kernels are identical and
the backend's sharing defines each once.

Cheap by construction: small shapes, the passes and the generated source only (no Warp
build); the three heat pipelines are run once per module.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks.compile_scaling import LAPLACIAN, chain, heat, wide
from dpt_ir.backends.base import target_for
from dpt_ir.backends.warp import codegen
from dpt_ir.driver.compile import options_of, pipelines
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes import fusion_steps
from dpt_ir.passes.dumps import fusion_table
from dpt_ir.passes.manager import run_pipeline

BASE = options_of(target_for("cpu"))
STEPS = 20


def _plans(graph: dp.Graph) -> dict[str, dp.Graph]:
    """The run / value_and_grad / tape plans `dp.compile` builds on the CPU."""
    return {name: run_pipeline(graph, o).graph for name, o in pipelines(graph, ("x",), "loss", BASE).items()}


@pytest.fixture(scope="module")
def heat_plans() -> dict[str, dp.Graph]:
    return _plans(heat(STEPS, 16))  # issue 14's model (the scaling benchmark's), on 16²


def test_heat_steps_run_one_forward_and_one_backward_stencil_kernel(heat_plans: dict[str, dp.Graph]) -> None:
    """20 heat steps: the module (three pipelines) defines 2 distinct stencil kernels (issue
    14 asks at most 4; there were 7: pairs of steps, the odd step left over, and the last
    step fused with the misfit, each pipeline its own), the forward step launched once per
    step in each pipeline and the backward step once per step in each gradient pipeline."""
    source = codegen.generate(heat_plans, "heat", "", True, target_for("cpu"))
    launches: dict[str, int] = {}
    for k in source.kernels:
        if _holds_a_stencil(heat_plans, k):
            launches[k.function] = launches.get(k.function, 0) + 1
    assert len(launches) <= 4, launches
    assert sorted(launches.values()) == [2 * STEPS, 3 * STEPS], launches


def _holds_a_stencil(plans: dict[str, dp.Graph], kernel: codegen.KernelSource) -> bool:
    """Whether ``kernel``'s fusion group (in the plan its launch name starts with) holds a
    stencil op: the kernel evaluates a stencil, on either code path."""
    (plan,) = [g for name, g in plans.items() if kernel.name.startswith(name + "_")]
    (group,) = [g for g in plan_of(plan).groups if g.id == kernel.group]
    return any(plan.node_map[n].opdef.kind == "stencil" for n in group.nodes)


def test_every_step_cut_is_explained(heat_plans: dict[str, dp.Graph]) -> None:
    """fusion.txt says why each step boundary is written: the value a step carries into the
    next step's stencil, or the last step's result, computed as those are."""
    text = fusion_table(heat_plans["value_and_grad"])
    assert text.count("the value a step carries into") >= 2 * (STEPS - 1), text
    assert "computed as the step value" in text, text


def test_a_filter_used_a_few_times_is_not_a_step() -> None:
    """One blur and its adjoint (fewer than `STEP_REPEATS` uses of the operator) keep the
    halo budget's choice: the cheap producer is recomputed at every tap, not written."""
    g = dp.GraphBuilder("blur_once")
    x = g.input("x", (12, 12), "float32")
    g.output("loss", dp.sum(dp.square(dp.correlate(dp.exp(-x), np.array(LAPLACIAN), mode="nearest"))))
    for plan in _plans(g.build()).values():
        assert not any("a step carries" in b.reason for b in plan_of(plan).boundaries)


def test_a_chains_pieces_repeat_with_its_steps(monkeypatch: pytest.MonkeyPatch) -> None:
    """With a small size bound (48 of work), the value_and_grad module of a 120-step chain holds
    as many distinct kernels as a 60-step chain's: every strand of the ladder is cut at the
    same step, so the pieces repeat and the module does not grow with the steps."""
    monkeypatch.setattr(fusion_steps, "MAX_KERNEL_WORK", 48)
    distinct = []
    for steps in (60, 120):
        graph = chain(steps, (16,))
        (options,) = [o for name, o in pipelines(graph, ("x",), "loss", BASE).items() if name == "value_and_grad"]
        plan = run_pipeline(graph, options).graph
        distinct.append(len(codegen.generate({"vg": plan}, graph.name, "", True, target_for("cpu")).functions()))
    assert distinct[1] == distinct[0], distinct


def test_the_terms_of_a_wide_sum_are_not_strands(monkeypatch: pytest.MonkeyPatch) -> None:
    """A wide sum's forward terms, read again by its backward, are recomputed from the
    input there, not written when the size bound cuts: they do not recur (`_recurs`)."""
    monkeypatch.setattr(fusion_steps, "MAX_KERNEL_WORK", 48)
    graph = wide(40, (16,))
    (options,) = [o for name, o in pipelines(graph, ("x",), "loss", BASE).items() if name == "value_and_grad"]
    plan = run_pipeline(graph, options).graph
    reasons = [b.reason for b in plan_of(plan).boundaries]
    assert any("its inline code reached" in r for r in reasons), reasons  # the bound did cut
    assert not any("a state computed in" in r for r in reasons), reasons

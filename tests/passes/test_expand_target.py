"""The expansion is a target decision (`Target.expand` -> `CompileOptions.expand`): the CPU plans
of softmax_xent keep one exp per element (the row kernel shares it), the CUDA plans keep the
fused logsumexp reduction and its own derivative, the launches they had before the `expand`
pass existed (commit 09415e4's parent: 3 for value_and_grad and for tape; with the expansion
they were 4 each). The fact keys the caches (options JSON and `Target.fingerprint`).

Cheap: the passes and code generation only (no Warp build)."""

from __future__ import annotations

import dpt_ir as dp
from benchmarks.graphs import softmax_xent
from dpt_ir.backends.base import Target, target_for
from dpt_ir.backends.warp import codegen
from dpt_ir.driver.compile import cache_key, options_of, pipelines
from dpt_ir.passes.manager import run_pipeline

SHAPE = (64, 256)


def _plans(kind: str) -> dict[str, dp.Graph]:
    graph = softmax_xent(SHAPE)
    options = pipelines(graph, ("z",), "loss", options_of(target_for(kind)))
    return {name: run_pipeline(graph, o).graph for name, o in options.items()}


def _launches(plan: dp.Graph, kind: str) -> list[str]:
    return [k.name for k in codegen.generate({"p": plan}, "softmax_xent", "", True, target_for(kind)).kernels]


def _ops(plan: dp.Graph, op: str, shape: tuple[int, ...] | None = None) -> int:
    return sum(1 for n in plan.nodes if n.op == op and (shape is None or n.type.shape == shape))


def test_the_target_decides_and_keys_the_caches() -> None:
    cpu, cuda = target_for("cpu"), target_for("cuda")
    assert (cpu.expand, cuda.expand) == (True, False)
    assert (options_of(cpu)["expand"], options_of(cuda)["expand"]) == (True, False)
    flipped = Target(**{**dict(cpu), "expand": False})
    assert flipped.fingerprint() != cpu.fingerprint()
    assert cache_key("g", "o", flipped) != cache_key("g", "o", cpu)
    graph = softmax_xent(SHAPE)
    vg = {
        kind: pipelines(graph, ("z",), "loss", options_of(t))["value_and_grad"]
        for kind, t in [("cpu", cpu), ("cuda", cuda)]
    }
    assert (vg["cpu"].expand, vg["cuda"].expand) == (True, False)
    assert vg["cpu"].model_dump_json() != vg["cuda"].model_dump_json()


def test_cpu_plans_share_one_exp_per_element() -> None:
    for name, plan in _plans("cpu").items():
        if name == "run":
            continue
        assert _ops(plan, "logsumexp") == 0, name
        assert _ops(plan, "exp", SHAPE) == 1, (name, [n.op for n in plan.nodes])
        assert _ops(plan, "max", (SHAPE[0], 1)) == 1, name
    assert len(_launches(_plans("cpu")["value_and_grad"], "cpu")) == 2  # the row kernel, the mean


def test_cuda_plans_keep_the_fused_reduction() -> None:
    """No max, no sum of exps: the logsumexp reduction (with the dot) is one launch, the
    gradient ``exp(z - lse)`` one, the mean one."""
    plans = _plans("cuda")
    for name in ("value_and_grad", "tape"):
        plan = plans[name]
        assert _ops(plan, "logsumexp") == 1, name
        assert _ops(plan, "max") == 0 and _ops(plan, "exp", SHAPE) == 1, (name, [n.op for n in plan.nodes])
        assert len(_launches(plan, "cuda")) == 3, (name, _launches(plan, "cuda"))

"""Every pass preserves values: evaluating the graph after each pass of the pipeline gives
the forward outputs of ``dp.interpret`` on the original graph and, once autodiff has
run, the gradients of ``dp.interpret_grad`` (same seeds), for the hand-written graphs
and for random graphs from `tests/strategies.py`."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from strategies import LOSS, graph_and_inputs, wrt_for

import dpt_ir as dp
from dpt_ir.ir.records import autodiff_of, cotangents, gradients, joint_record
from dpt_ir.ir.types import is_float
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions
from dpt_ir.reference.interpreter import evaluate

from .graphs import CASES

RTOL_F64 = 1e-10  # every float value of the graph is float64: passes may only reorder sums
RTOL_F32 = 2e-5  # some value is float32: merged duplicates round differently in float32


def _rtol(graph: dp.Graph) -> float:
    return RTOL_F32 if any(t.dtype == "float32" for t in graph.types.values()) else RTOL_F64


def _close(actual: np.ndarray, expected: np.ndarray, rtol: float, what: str) -> None:
    assert actual.shape == expected.shape and actual.dtype == expected.dtype, (
        f"{what}: {actual.dtype}{list(actual.shape)} != {expected.dtype}{list(expected.shape)}"
    )
    if not is_float(str(expected.dtype)):
        np.testing.assert_array_equal(actual, expected, err_msg=what)
        return
    finite = expected[np.isfinite(expected)]
    scale = float(np.max(np.abs(finite))) if finite.size else 1.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * max(1.0, scale), err_msg=what)


def _cotangents(joint: dp.Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """A random cotangent for each output whose seed the joint graph takes as an input."""
    out = {}
    for name, ct in cotangents(joint).items():
        t = joint.types[ct]
        out[name] = np.asarray(rng.normal(0.0, 1.0, t.shape)).astype(t.dtype)
    return out


def check_pipeline(graph: dp.Graph, inputs: dict[str, np.ndarray], options: CompileOptions) -> None:
    """Evaluate the graph after every pass; compare outputs and gradients with the oracle."""
    forward = dp.interpret(graph, **inputs)
    result = run_pipeline(graph, options)
    joint = result.after("autodiff")
    seeds: dict[str, Any] = _cotangents(joint, np.random.default_rng(1))
    feed = {**inputs, **{joint_record(joint).cotangents[k]: v for k, v in seeds.items()}}
    record = autodiff_of(joint)
    seeds.update(record.fixed_seeds if record is not None else {})
    rtol = _rtol(graph)
    grads = dp.interpret_grad(graph, list(options.wrt), seed=seeds, **inputs) if options.wrt else {}
    for rec, stage in zip(result.records, result.stages, strict=True):
        where = f"{graph.name} after pass {rec.index} {rec.name}"
        env = evaluate(stage, {i.name: feed[i.name] for i in stage.inputs})
        for name, value in forward.items():
            _close(env[stage.output_value(name)], value, rtol, f"{where}: output {name!r}")
        for w, out in gradients(stage).items():
            _close(env[stage.output_value(out)], grads[w], rtol, f"{where}: gradient of {w!r}")
    if options.wrt:
        assert set(joint_record(result.graph).gradients) == set(options.wrt)


VARIANTS: dict[str, dict[str, Any]] = {
    "cotangent": {},
    "fixed_seed": {"seeds": ("loss",), "seed_values": {"loss": 1.0}},
    "no_fuse": {"fuse": False},
    "no_recompute": {"recompute": False},
    "recompute_budget": {"recompute_budget": 8},  # tight: keeps (and saves) most chains' values
    "forward_only": {"wrt": ()},
}


@pytest.mark.parametrize("variant", sorted(VARIANTS))
@pytest.mark.parametrize("name", sorted(CASES))
def test_hand_written_graphs(name: str, variant: str) -> None:
    case = CASES[name]
    options = CompileOptions(**{"wrt": case.wrt, **VARIANTS[variant]})
    check_pipeline(case.graph, case.inputs(), options)


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_and_inputs(), st.data())
def test_random_graphs_with_cotangent_inputs(drawn: Any, data: st.DataObject) -> None:
    graph, inputs = drawn
    wrt = data.draw(wrt_for(graph), label="wrt")
    budget = data.draw(st.sampled_from([None, 4, 16]), label="recompute_budget")
    check_pipeline(graph, inputs, CompileOptions(wrt=tuple(wrt), recompute_budget=budget))


@settings(max_examples=100, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(graph_and_inputs(), st.data())
def test_random_graphs_with_fixed_seed(drawn: Any, data: st.DataObject) -> None:
    graph, inputs = drawn
    wrt = data.draw(wrt_for(graph), label="wrt")
    options = CompileOptions(wrt=tuple(wrt), seeds=(LOSS,), seed_values={LOSS: 1.0})
    check_pipeline(graph, inputs, options)

"""Compiled imaging pipelines equal the interpreter (``run``, ``value_and_grad`` and a tape
pass), float64 to rtol 1e-12 and float32 to 1e-5, for every boundary mode; and the
``transmission`` pipeline's value_and_grad plan takes at most 4 kernel launches.

Each program is small (a 7 x 9 image; one 2-D correlation with an even kernel and one
separable Gaussian blur) and compiled once per session.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi

import dpt_ir as dp
from dpt_ir.backends.base import target_for
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

from .helpers import MODES

SHAPE = (7, 9)
K24 = np.array([[1.0, -2.0, 0.5, 0.75], [-0.25, 1.25, 2.0, -1.5]])
CVAL = 0.3
SIGMA = (2.0, 1.2)  # radius 8 along the first axis: wider than its 7 rows
RTOL = {"float64": 1e-12, "float32": 1e-5}
# (mode, dtype) of each compiled pipeline: every mode in float64, one in float32.
PIPELINES = [(m, "float64") for m in MODES] + [("wrap", "float32")]


def pipeline_graph(mode: str, dtype: str) -> dp.Graph:
    """``y = correlate(x, K24)`` (even kernel, non-zero origin) and
    ``loss = poisson_deviance(gaussian_filter(exp(-x), SIGMA), counts, w, mask)``, both in ``mode``."""
    g = dp.GraphBuilder(f"pipeline_{mode.replace('-', '_')}_{dtype}")
    x = g.input("x", SHAPE, dtype)
    counts = g.input("counts", SHAPE, dtype, requires_grad=False)
    w = g.input("w", SHAPE, dtype, requires_grad=False)
    mask = g.input("mask", SHAPE, "bool", requires_grad=False)
    g.output("y", dp.correlate(x, K24, mode=mode, cval=CVAL, origin=(0, -1)))
    blurred = dp.gaussian_filter(dp.exp(-x), SIGMA, mode=mode, cval=CVAL)
    g.output("loss", dp.poisson_deviance(blurred, counts, w, mask))
    return g.build()


def pipeline_inputs(dtype: str, seed: int = 0, shape: tuple[int, ...] = SHAPE) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = rng.uniform(size=shape) > 0.25
    return {
        "x": rng.uniform(0.0, 1.0, shape).astype(dtype),
        "counts": rng.poisson(1.0, shape).astype(dtype),
        "w": rng.uniform(0.5, 1.5, shape).astype(dtype),
        "mask": mask,
    }


def assert_matches(actual: np.ndarray, expected: np.ndarray, dtype: str, what: str) -> None:
    """Equal to the dtype's rtol, with an absolute floor relative to the magnitude."""
    rtol = RTOL[dtype]
    scale = float(np.max(np.abs(expected))) if np.size(expected) else 0.0
    assert np.asarray(actual).dtype == np.dtype(dtype), what
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * scale, err_msg=what)


@pytest.fixture(scope="session", params=PIPELINES, ids=[f"{m}-{d}" for m, d in PIPELINES])
def pipeline(request: pytest.FixtureRequest) -> tuple[dp.Program, str]:
    """(the compiled pipeline of one mode and dtype, its dtype)."""
    mode, dtype = request.param
    return dp.compile(pipeline_graph(mode, dtype), wrt=["x"], loss="loss", device="cpu"), dtype


def test_run_matches_interpreter(pipeline: tuple[dp.Program, str]) -> None:
    program, dtype = pipeline
    inputs = pipeline_inputs(dtype)
    out = program.run(**inputs)
    ref = dp.interpret(program.graph, **inputs)
    for name in ("y", "loss"):
        assert_matches(out[name], ref[name], dtype, name)


def test_value_and_grad_matches_interpreter(pipeline: tuple[dp.Program, str]) -> None:
    program, dtype = pipeline
    inputs = pipeline_inputs(dtype, seed=1)
    outs, grads = program.value_and_grad(**inputs)
    ref = dp.interpret(program.graph, **inputs)
    for name in ("y", "loss"):
        assert_matches(outs[name], ref[name], dtype, name)
    ref_grad = dp.interpret_grad(program.graph, ["x"], seed={"loss": 1.0}, **inputs)["x"]
    assert_matches(grads["x"], ref_grad, dtype, "grad x")


def test_tape_pass_matches_interpreter(pipeline: tuple[dp.Program, str]) -> None:
    """Both outputs seeded: an array cotangent for ``y`` and a scalar for ``loss``."""
    program, dtype = pipeline
    inputs = pipeline_inputs(dtype, seed=2)
    rng = np.random.default_rng(3)
    seed = {"y": rng.uniform(-1.0, 1.0, program.graph.types[program.graph.output_value("y")].shape).astype(dtype),
            "loss": 0.75}  # fmt: skip
    with program.tape_pass() as tp:
        outs = tp.forward(**inputs)
    grads = tp.backward(seed=seed)
    ref = dp.interpret(program.graph, **inputs)
    for name in ("y", "loss"):
        assert_matches(outs[name].numpy().reshape(ref[name].shape), ref[name], dtype, name)
    ref_grad = dp.interpret_grad(program.graph, ["x"], seed=seed, **inputs)["x"]
    assert_matches(grads["x"].numpy().reshape(SHAPE), ref_grad, dtype, "grad x")
    tp.close()


def test_masked_lanes_are_ignored_compiled(pipeline: tuple[dp.Program, str]) -> None:
    """Garbage counts and weights in masked lanes change neither loss nor gradient."""
    program, dtype = pipeline
    inputs = pipeline_inputs(dtype, seed=4)
    ref_outs, ref_grads = program.value_and_grad(**inputs)
    bad = {k: v.copy() for k, v in inputs.items()}
    off = ~inputs["mask"]
    bad["counts"][off] = np.where(np.arange(off.sum()) % 2, np.nan, -3.0).astype(dtype)
    bad["w"][off] = -1.0
    outs, grads = program.value_and_grad(**bad)
    np.testing.assert_array_equal(outs["loss"], ref_outs["loss"])
    np.testing.assert_array_equal(grads["x"], ref_grads["x"])


def test_compiled_float32_correlation_is_as_accurate_as_scipy() -> None:
    """The compiled tap loop accumulates float32 in float64 and rounds once, as
    scipy.ndimage does: within one float32 ulp of scipy's result (the session's float32
    pipeline, no new compile)."""
    program = dp.compile(pipeline_graph("wrap", "float32"), wrt=["x"], loss="loss", device="cpu")
    x = np.random.default_rng(5).uniform(0.0, 1.0, SHAPE).astype(np.float32)
    inputs = {**pipeline_inputs("float32", seed=5), "x": x}
    y = program.run(**inputs)["y"]
    expected = ndi.correlate(x, K24, mode="wrap", cval=CVAL, origin=(0, -1))
    assert y.dtype == expected.dtype == np.float32
    ulp = np.spacing(np.float32(np.max(np.abs(expected))))
    assert np.max(np.abs(y.astype(np.float64) - expected)) <= ulp


# -- the transmission pipeline: kernel count ----------------------------------------------------
TRANSMISSION = (32, 32)


def transmission_graph() -> dp.Graph:
    """``poisson_deviance(gaussian_filter(exp(-x), 1.5), counts, w, mask)`` on 32 x 32 (float32)."""
    g = dp.GraphBuilder("transmission")
    x = g.input("x", TRANSMISSION, "float32")
    counts = g.input("counts", TRANSMISSION, "float32", requires_grad=False)
    w = g.input("w", TRANSMISSION, "float32", requires_grad=False)
    mask = g.input("mask", TRANSMISSION, "bool", requires_grad=False)
    g.output("loss", dp.poisson_deviance(dp.gaussian_filter(dp.exp(-x), 1.5), counts, w, mask))
    return g.build()


@pytest.fixture(scope="session")
def transmission() -> dp.Program:
    # The launch goal holds with the GPU cost model, which recomputes exp(-x) over the
    # first blur's halo; the CPU default writes it once instead (one more launch, less
    # work on a one-thread CPU: see the next test and docs/benchmarks.md).
    return dp.compile(transmission_graph(), wrt=["x"], device="cpu", halo_budget=target_for("cuda").halo_budget)


def test_transmission_cpu_cost_model_trades_a_launch_for_less_work() -> None:
    """With the CPU halo budget the value_and_grad plan takes 5 kernels, and fusion.txt
    says the extra boundary is exp(-x), read 13 times per element by the blur."""
    budget = target_for("cpu").halo_budget
    options = CompileOptions(wrt=("x",), seeds=("loss",), seed_values={"loss": 1.0}, halo_budget=budget)
    fused = run_pipeline(transmission_graph(), options).graph
    assert len(plan_of(fused).groups) == 5
    reasons = [b.reason for b in plan_of(fused).boundaries]
    assert any("read 13 times per element" in r for r in reasons), reasons


def test_transmission_value_and_grad_takes_at_most_4_launches(transmission: dp.Program) -> None:
    inputs = pipeline_inputs("float32", seed=5, shape=TRANSMISSION)
    outs, grads = transmission.value_and_grad(**inputs)
    plan = transmission.report.plans["value_and_grad"]
    assert plan.kernels <= 4, plan
    assert transmission.launch_count <= 4, transmission.launch_count
    ref = dp.interpret(transmission.graph, **inputs)["loss"]
    ref_grad = dp.interpret_grad(transmission.graph, ["x"], **inputs)["x"]
    assert_matches(outs["loss"], ref, "float32", "loss")
    assert_matches(grads["x"], ref_grad, "float32", "grad x")

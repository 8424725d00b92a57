"""The C++ path (issue 11): which groups take it, values against the interpreter on sizes
that span several CPU tasks (partials combined in order, rows split across tasks), the
precise rerun of blocks with huge trig arguments, and bit-identical results for
``threads=1`` and ``threads=2``.

Cost: one graph of 300 x 301 (two 64 K-element tasks per flat space) compiled once per
module (run, value_and_grad and tape pipelines); the 2-thread program reuses its module.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.base import target_for
from dpt_ir.backends.warp import tasks

from .harness import assert_gradient_close, assert_same_bits, off_cxx

SHAPE = (300, 301)  # 90,300 elements: 2 tasks of a flat space, rows split over 2 tasks


def mixed() -> dp.Graph:
    """Reductions of every lane template (sum, mean, max, logsumexp, argmax) over all axes and
    over rows, a trig chain, and pointwise outputs, in one graph."""
    g = dp.GraphBuilder("cxx_mixed")
    x = g.input("x", SHAPE, "float32")
    w = g.input("w", SHAPE, "float32", requires_grad=False)
    b = g.input("b", (SHAPE[1],), "float32", requires_grad=False)
    y = dp.sin(x * 3.0) * w + b
    g.output("loss", dp.sum(dp.square(y)) + dp.mean(dp.exp(-x)))
    g.output("rowmax", dp.max(y, axis=1))
    g.output("lse", dp.logsumexp(x * w, axis=1))
    g.output("arg", dp.argmax(y, axis=1))
    g.output("y", dp.tanh(y))
    return g.build()


def inputs(seed: int, huge: bool = False) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    x = rng.uniform(-2.0, 2.0, SHAPE).astype(np.float32)
    if huge:  # a few arguments past the fast trig reduction's range, in two blocks
        x.ravel()[[5, 70_000]] = np.float32(1.0e6) / 3.0
    return {
        "x": x,
        "w": rng.uniform(0.5, 1.5, SHAPE).astype(np.float32),
        "b": rng.uniform(-1.0, 1.0, SHAPE[1]).astype(np.float32),
    }


@pytest.fixture(scope="module")
def programs() -> tuple[dp.Program, dp.Program]:
    graph = mixed()
    return dp.compile(graph, wrt=["x"], loss="loss", threads=1), dp.compile(graph, wrt=["x"], loss="loss", threads=2)


def test_every_launch_takes_the_cxx_path(programs: tuple[dp.Program, dp.Program]) -> None:
    """Every launch of run, value_and_grad and the tape (whose backward broadcasts its seeds
    through views: reads of a scalar)."""
    one, _ = programs
    for name in ("run", "value_and_grad", "tape"):
        plan = one.plans[name]
        off = off_cxx(plan.kernels, plan.module.text)
        assert plan.kernels and not off, (name, off)
    vg = one.plans["value_and_grad"]
    assert any(k.name.endswith("_final") for k in vg.kernels), "the 90,300-element sums should combine partials"
    assert max(k.dim for k in vg.kernels) > 1, "some launch should span several tasks"


@pytest.mark.parametrize("huge", [False, True], ids=["moderate", "huge_trig_arguments"])
def test_values_and_gradients_match_the_interpreter(programs: tuple[dp.Program, dp.Program], huge: bool) -> None:
    one, _ = programs
    ins = inputs(1, huge)
    got = one.run(**ins)
    want = dp.interpret(one.graph, **ins)
    for name in ("loss", "rowmax", "lse", "y"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)
    np.testing.assert_array_equal(got["arg"], want["arg"])
    assert_gradient_close(one, ins)


def test_one_and_two_threads_are_bit_identical(programs: tuple[dp.Program, dp.Program]) -> None:
    one, two = programs
    assert two.plans["run"].threads == 2 and one.plans["run"].threads == 1
    ins = inputs(2, huge=True)
    assert_same_bits(one, two, ins)


def test_two_threads_rebind_every_range_to_each_calls_arrays(programs: tuple[dp.Program, dp.Program]) -> None:
    """Arrays A, then B, then A again: each range of a split launch (its own recorded
    command) reads the call's arrays, so two threads stay bit-identical to one, and one
    thread matches the interpreter."""
    one, two = programs
    assert two.plans["run"].threads == 2 and max(launch.dim for launch in two.plans["run"].launches) > 1
    a, b = inputs(3), inputs(4)
    for ins in (a, b, a):
        assert_same_bits(one, two, ins)
        np.testing.assert_allclose(two.run(**ins)["y"], dp.interpret(one.graph, **ins)["y"], rtol=1e-5, atol=1e-5)


def test_threads_must_be_positive() -> None:
    with pytest.raises(dp.ContractError, match="threads"):
        dp.compile(mixed(), threads=0)


def test_task_ranges_are_contiguous_and_cover_every_task() -> None:
    for dim in (1, 2, 7, 64):
        for threads in (1, 2, 3, 16):
            parts = tasks.ranges(dim, threads)
            assert [first for first, _ in parts] == [sum(c for _, c in parts[:k]) for k in range(len(parts))]
            assert sum(c for _, c in parts) == dim and len(parts) == min(dim, threads)
    assert target_for("cpu").cpu_task == 65536  # the partition the docs and the figures describe

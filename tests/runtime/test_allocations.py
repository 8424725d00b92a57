"""Steady-state evaluation allocates no device memory (DESIGN §6): buffers are allocated
once per program; repeated ``run``, ``value_and_grad`` and tape passes only launch.

Device memory is counted where Warp takes it: the ``allocate`` method of every allocator
of the program's device. Zero-copy ``wp.array(numpy, copy=False)`` wrappers (how numpy
inputs and seeds are bound on CPU) and views (``flatten``/``reshape``) allocate nothing
there and are counted separately, as information. The numpy arrays ``run`` and
``value_and_grad`` return are host copies made for the caller, not device memory.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp

from .conftest import make_inputs, to_warp

REPEATS = 5


class AllocationSpy:
    """Counts device allocations (bytes per call) and wp.array constructions."""

    def __init__(self) -> None:
        self.allocations: list[int] = []
        self.arrays: Counter[str] = Counter()

    def reset(self) -> None:
        self.allocations.clear()
        self.arrays.clear()


@pytest.fixture
def spy(program: dp.Program, monkeypatch: pytest.MonkeyPatch) -> Iterator[AllocationSpy]:
    result = AllocationSpy()
    device = wp.get_device(program.device)
    allocators = {
        id(a): a
        for name in dir(device)
        if name.endswith("_allocator") and hasattr(a := getattr(device, name), "allocate")
    }
    assert allocators, f"no allocator found on {device}"
    for allocator in allocators.values():
        original = allocator.allocate

        def counted(size: int, _original: Callable[[int], Any] = original) -> Any:
            result.allocations.append(size)
            return _original(size)

        monkeypatch.setattr(allocator, "allocate", counted)

    original_init = wp.array.__init__

    def counted_init(self: wp.array, *args: Any, **kwargs: Any) -> None:
        original_init(self, *args, **kwargs)
        kind = "zero-copy wrapper" if kwargs.get("copy") is False else "other wp.array"
        result.arrays[kind] += 1

    monkeypatch.setattr(wp.array, "__init__", counted_init)
    yield result


def _tape_pass_warp(program: dp.Program, inputs: dict[str, wp.array]) -> None:
    with program.tape_pass() as tp:
        tp.forward(**inputs)
    tp.backward(seed={"loss": 1.0, "pred": 0.5})
    tp.close()


def _tape_pass_numpy(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    with program.tape_pass() as tp:
        tp.forward(**inputs)
    tp.backward(seed={"pred": np.full(inputs["x"].shape, 0.5, np.float32)})
    tp.close()


@pytest.mark.parametrize("entry", ["run", "value_and_grad", "tape pass (wp.array inputs)", "tape pass (numpy inputs)"])
def test_steady_state_allocates_no_device_memory(program: dp.Program, spy: AllocationSpy, entry: str) -> None:
    inputs = make_inputs(70)
    warp_inputs = to_warp(inputs, program.device)  # made before counting: the caller's arrays
    calls: dict[str, Callable[[], object]] = {
        "run": lambda: program.run(**inputs),
        "value_and_grad": lambda: program.value_and_grad(**inputs),
        "tape pass (wp.array inputs)": lambda: _tape_pass_warp(program, warp_inputs),
        "tape pass (numpy inputs)": lambda: _tape_pass_numpy(program, inputs),
    }
    call = calls[entry]
    call()  # warm-up: first-use staging (CUDA) may allocate once
    spy.reset()
    for _ in range(REPEATS):
        call()
    print(f"\n{entry} on {program.device}: {REPEATS} calls, device allocations {spy.allocations}, {dict(spy.arrays)}")
    assert spy.allocations == [], f"{entry}: steady state allocated {spy.allocations} bytes on {program.device}"


def test_spy_sees_allocations(program: dp.Program, spy: AllocationSpy) -> None:
    """The counter is live: a plain wp.zeros on the program's device is counted."""
    wp.zeros(16, dtype=wp.float32, device=program.device)
    assert spy.allocations == [64]


def test_direct_gradients_are_fresh_per_call(program: dp.Program) -> None:
    """The gradients the kernels write straight into (`runtime._direct_results`, the set fixed
    per plan) are new arrays per call: a later call neither shares nor overwrites them."""
    plan = program.plans["value_and_grad"]
    assert {plan.outputs[g] for g in plan.gradients.values()} <= plan.direct_values
    _, first = program.value_and_grad(**make_inputs(1))
    kept = {k: v.copy() for k, v in first.items()}
    _, second = program.value_and_grad(**make_inputs(2))
    for name, grad in first.items():
        assert not np.shares_memory(grad, second[name]), name
        np.testing.assert_array_equal(grad, kept[name])
        assert not np.array_equal(grad, second[name]), name


def test_direct_run_outputs_are_fresh_per_call(program: dp.Program) -> None:
    """`run`'s outputs that the kernels write straight into (`ExecutionPlan.direct_run_outputs`)
    are new arrays per call, as the direct gradients are: a later call neither shares nor
    overwrites them."""
    plan = program.plans["run"]
    direct = [name for name, value in plan.outputs.items() if value in plan.direct_run_outputs]
    assert direct or program.device != "cpu"
    first = program.run(**make_inputs(1))
    kept = {k: v.copy() for k, v in first.items()}
    second = program.run(**make_inputs(2))
    for name in direct:
        assert not np.shares_memory(first[name], second[name]), name
        np.testing.assert_array_equal(first[name], kept[name])
        assert not np.array_equal(first[name], second[name]), name


def test_gradients_sharing_one_value_are_arrays_of_their_own() -> None:
    """``sin(a) * x + sin(a) * y``: both gradients are the one value ``sin(a)``, which is then
    no direct value (`ExecutionPlan.direct_values`: the value of exactly one output), so each
    gradient is its own copy, not one array returned twice."""
    g = dp.GraphBuilder("shared_gradient")
    x, y, a = g.input("x", (16,)), g.input("y", (16,)), g.input("a", (16,))
    g.output("loss", dp.sum(dp.sin(a) * x + dp.sin(a) * y))
    program = dp.compile(g.build(), wrt=["x", "y"])
    plan = program.plans["value_and_grad"]
    shared = plan.outputs["grad.x"]
    assert plan.outputs["grad.y"] == shared and shared not in plan.direct_values
    rng = np.random.default_rng(3)
    inputs = {n: rng.uniform(-1, 1, 16).astype(np.float32) for n in ("x", "y", "a")}
    _, grads = program.value_and_grad(**inputs)
    assert not np.shares_memory(grads["x"], grads["y"])
    np.testing.assert_allclose(grads["x"], np.sin(inputs["a"]), rtol=1e-6)
    grads["x"][:] = 0.0
    np.testing.assert_allclose(grads["y"], np.sin(inputs["a"]), rtol=1e-6)

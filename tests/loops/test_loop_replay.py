"""A loop step replays its body's launches through the plan's recorded launches
(`ExecutionPlan.run` -> `dpt_ir.runtime.recorded.RecordedPhase`), recorded once per
workspace and re-pointed at every step's arrays.

What must hold: every step reads its own ``xs`` row and carry and writes its own ``y`` row
(a pointer kept from an earlier step, call or program would read or write the wrong
row); two programs sharing one compiled body, each with its own workspace, interleave
without reading each other's arrays; after the first call no step calls ``wp.launch``
and a loop's forward and reverse allocate no device memory.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp
from dpt_ir.runtime import recorded

STEPS, N = 5, 7
WRT = ["c0", "xs", "w"]


def graph() -> dp.Graph:
    """A scan whose xs rows and ys rows change every step, with a closed-over weight; its
    reverse reruns forward steps from two stored carries (those steps bind no ``y``)."""
    g = dp.GraphBuilder("replayed_scan")
    c0, xs, w = g.input("c0", (N,)), g.input("xs", (STEPS, N)), g.input("w", (N,))
    carry, ys = dp.scan(lambda c, x: ((v := dp.tanh(c * w + x)), v * x + c), c0, xs, checkpoint=2)
    g.output("loss", dp.sum(carry * carry) + dp.sum(ys * ys))
    g.output("ys", ys)
    return g.build()


def inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "c0": rng.uniform(-1, 1, N).astype(np.float32),
        "xs": rng.uniform(-1, 1, (STEPS, N)).astype(np.float32),
        "w": rng.uniform(0.5, 1.5, N).astype(np.float32),
    }


@pytest.fixture(scope="module")
def programs() -> tuple[Any, Any]:
    g = graph()
    return dp.compile(g, wrt=WRT, loss="loss"), dp.compile(g, wrt=WRT, loss="loss")


def _loops(program: Any) -> list[Any]:
    """The `Loop` stages of ``program``'s run and value_and_grad."""
    return [loop for s in (program.forward, program.joint) for kind, loop, _ in s.stages if kind == "loop"]


def _check(program: Any, x: dict[str, np.ndarray]) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    g = program.graph
    want, grads_want = dp.interpret(g, **x), dp.interpret_grad(g, WRT, seed={"loss": 1.0}, **x)
    out = program.run(**x)
    np.testing.assert_allclose(out["ys"], want["ys"], rtol=1e-5, atol=1e-6)
    values, grads = program.value_and_grad(**x)
    np.testing.assert_allclose(values["ys"], want["ys"], rtol=1e-5, atol=1e-6)
    np.testing.assert_allclose(values["loss"], want["loss"], rtol=1e-5)
    for name in WRT:
        np.testing.assert_allclose(grads[name], grads_want[name], rtol=1e-4, atol=1e-5)
    return out, grads


def test_two_programs_sharing_a_body_interleave_calls_with_other_inputs(programs: tuple[Any, Any]) -> None:
    """Calls alternate between two programs (one compiled body, a workspace each) and between
    inputs: every result is the interpreter's for that call's inputs, and a repeated call is
    bit-identical to the first with the same inputs."""
    first, second = programs
    shared = {id(loop.fwd_plan) for loop in _loops(first)} & {id(loop.fwd_plan) for loop in _loops(second)}
    assert shared, "the two programs compile one body"
    for loop in [*_loops(first), *_loops(second)]:
        loop.ready()  # the workspaces are made at a loop's first use
    assert not {id(loop.fwd_ws) for loop in _loops(first)} & {id(loop.fwd_ws) for loop in _loops(second)}
    a, b = inputs(1), inputs(2)
    runs = [(first, a), (second, b), (first, b), (second, a), (first, a)]
    seen: dict[tuple[int, int], tuple[dict[str, np.ndarray], dict[str, np.ndarray]]] = {}
    for program, x in runs:
        out, grads = _check(program, x)
        key = (id(program), id(x))
        if key in seen:
            assert np.array_equal(out["ys"], seen[key][0]["ys"])
            assert all(np.array_equal(grads[n], seen[key][1][n]) for n in WRT)
        seen[key] = (out, grads)


def test_inputs_changed_in_place_are_read_again(programs: tuple[Any, Any]) -> None:
    """The same NumPy objects, changed in place between calls: the steps read the new rows."""
    program = programs[0]
    x = inputs(3)
    _check(program, x)
    for arr in x.values():
        arr *= np.float32(-0.5)
    _check(program, x)


def test_steady_state_steps_launch_through_the_recorded_launches(
    programs: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """After a warm-up, a call records nothing: every step replays (no ``wp.launch``)."""
    program = programs[1]
    x = inputs(4)
    calls: list[Callable[[], object]] = [lambda: program.run(**x), lambda: program.value_and_grad(**x)]
    for call in calls:
        call()
    launched: list[object] = []
    launch = recorded.wp.launch
    monkeypatch.setattr(recorded.wp, "launch", lambda *a, **k: launched.append(a) or launch(*a, **k))
    for call in calls:
        call()
    assert launched == []


def test_steady_state_steps_allocate_no_device_memory(
    programs: tuple[Any, Any], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A loop's forward and reverse, run again on the same arrays, allocate nothing on the
    device: the replayed steps bind views and their workspace's buffers."""
    loops = _loops(programs[0])
    assert {loop.node.op for loop in loops} == {"scan", "scan_vjp"}
    rng = np.random.default_rng(6)

    def flat(size: int) -> wp.array:
        return wp.array(rng.uniform(-1, 1, size).astype(np.float32), device=loops[0].device)

    calls: list[Callable[[], object]] = []
    for loop in loops:
        arrays = [flat(t.size) for t in loop.in_types]
        if loop.node.op == "scan":
            calls.append(lambda loop=loop, arrays=arrays: loop.forward(arrays))
        else:
            gy = flat(sum(t.size for t in loop.results))
            calls.append(lambda loop=loop, arrays=arrays, gy=gy: loop.reverse([*arrays, gy]))
    for call in calls:
        call()
    sizes: list[int] = []
    device = wp.get_device(loops[0].device)
    allocators = [getattr(device, n) for n in dir(device) if n.endswith("_allocator")]
    allocators = [a for a in allocators if hasattr(a, "allocate")]
    assert allocators, f"no allocator found on {device}"
    for allocator in allocators:
        original = allocator.allocate
        monkeypatch.setattr(allocator, "allocate", lambda size, _o=original: sizes.append(size) or _o(size))
    for call in calls * 2:
        call()
    assert sizes == []

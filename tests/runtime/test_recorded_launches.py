"""The lean call path (issue 11): each plan phase's launches are recorded once per workspace
(`dpt_ir.runtime.recorded`) and every later call only re-points the descriptors of the
arrays it binds (its inputs, seeds and fresh result arrays) before replaying them.

What must hold: a call's results come from that call's arrays, never from an earlier call's
(the caller may pass other arrays every call; a kept pointer would read the old ones); a
direct value a call does not bind goes back to the workspace's own buffer; a steady-state
call packs no launch and wraps no NumPy array in a `wp.array`; anything but a plan input or
a direct value is refused as a binding.
"""

from __future__ import annotations

import gc
import weakref
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp
from dpt_ir.runtime import recorded

from .conftest import WRT, assert_close, make_inputs, to_warp


def _check_call(program: dp.Program, inputs: dict[str, Any], want: dict[str, Any], grad: dict[str, Any]) -> None:
    out = program.run(**inputs)
    for name in want:
        assert_close(out[name], want[name], f"run {name}")
    out, grads = program.value_and_grad(**inputs)
    assert_close(out["loss"], want["loss"], "value_and_grad loss")
    assert_close(grads["x"], grad["x"], "value_and_grad grad x")


def test_arrays_a_then_b_then_a_again(program: dp.Program) -> None:
    """Different arrays each call, then the first ones again (the same objects, changed in
    place in between): every result is the interpreter's for that call's arrays."""
    a, b = make_inputs(11), make_inputs(12)
    for inputs in (a, b, a):
        want, grad = dp.interpret(program.graph, **inputs), dp.interpret_grad(program.graph, WRT, **inputs)
        _check_call(program, inputs, want, grad)
    a["x"] *= 1.5  # same array, new values: the pointer is the same, the data is not
    want, grad = dp.interpret(program.graph, **a), dp.interpret_grad(program.graph, WRT, **a)
    _check_call(program, a, want, grad)
    fresh = {k: v.copy() for k, v in b.items()}  # b's values at new addresses
    want, grad = dp.interpret(program.graph, **fresh), dp.interpret_grad(program.graph, WRT, **fresh)
    _check_call(program, fresh, want, grad)


def test_numpy_and_warp_inputs_alternate_in_tape_passes(program: dp.Program) -> None:
    """A tape pass's forward and backward bind the call's arrays (NumPy or `wp.array`) and
    its seed, alternating kinds on one workspace."""
    for k, seed in enumerate((21, 22, 21, 23)):
        inputs = make_inputs(seed)
        given = to_warp(inputs, program.device) if k % 2 else inputs
        want = dp.interpret(program.graph, **inputs)
        scale = 0.5 + k
        grad = dp.interpret_grad(program.graph, WRT, seed={"loss": scale}, **inputs)
        with program.tape_pass() as tp:
            out = tp.forward(**given)
            assert_close(out["pred"].numpy(), want["pred"], "tape pred")
        grads = tp.backward(seed={"loss": scale})
        assert_close(grads["x"].numpy(), grad["x"], "tape grad x")
        tp.close()


def test_an_unbound_direct_value_falls_back_to_the_workspace_buffer(program: dp.Program) -> None:
    """`value_and_grad` binds fresh gradient arrays (direct values); a run of the same plan
    that binds none writes the workspace's own buffer, not the last call's fresh array."""
    plan = program.plans["value_and_grad"]
    _, first = program.value_and_grad(**make_inputs(31))
    kept = first["x"].copy()
    inputs = make_inputs(32)
    with plan.workspace() as ws:
        bound = plan.bind(inputs, {i.name: i.type for i in program.graph.inputs}, ws)
        ws.clear_status()
        plan.run("forward", bound, ws)
        plan.run("backward", bound, ws)
        got = plan.output_copy(plan.gradients["x"], ws)
    np.testing.assert_array_equal(first["x"], kept)  # the earlier call's result is untouched
    assert_close(got, dp.interpret_grad(program.graph, WRT, **inputs)["x"], "grad x in the workspace")


def test_steady_state_packs_no_launch_and_wraps_no_array(program: dp.Program, monkeypatch: pytest.MonkeyPatch) -> None:
    """After a warm-up call (the recording), calls replay: no ``wp.launch`` and no
    `wp.array` made, for ``run`` and ``value_and_grad`` with NumPy inputs on the CPU."""
    if program.device != "cpu":
        pytest.skip("NumPy inputs are staged into wp.arrays off the CPU")
    inputs = make_inputs(41)
    calls: list[Callable[[], object]] = [lambda: program.run(**inputs), lambda: program.value_and_grad(**inputs)]
    for call in calls:
        call()
    counts = {"launch": 0, "array": 0}
    launch, init = wp.launch, wp.array.__init__

    def counted_launch(*args: Any, **kwargs: Any) -> Any:
        counts["launch"] += 1
        return launch(*args, **kwargs)

    def counted_init(self: wp.array, *args: Any, **kwargs: Any) -> None:
        counts["array"] += 1
        init(self, *args, **kwargs)

    monkeypatch.setattr(recorded.wp, "launch", counted_launch)
    monkeypatch.setattr(wp.array, "__init__", counted_init)
    for _ in range(3):
        for call in calls:
            call()
    assert counts == {"launch": 0, "array": 0}
    assert program.launch_count > 0


def test_recording_keeps_no_array_of_the_call_that_recorded(program: dp.Program) -> None:
    """The call that records a workspace's launches (here a second workspace, checked out
    while the first is held) leaves no reference to its arrays behind."""
    inputs = make_inputs(61)
    alive = [weakref.ref(v) for v in inputs.values()]
    plan = program.plans["value_and_grad"]
    with plan.workspace():  # the next call needs a workspace of its own, recorded for it
        before = len(plan._all)
        out, grads = program.value_and_grad(**inputs)
        assert len(plan._all) == before + 1
    del inputs
    gc.collect()
    assert [ref() is None for ref in alive] == [True] * len(alive)


def test_address_is_the_data_pointer() -> None:
    """`recorded.address` (read from the array object on the call path) is NumPy's own data
    pointer for arrays, views and subclasses, and a `wp.array`'s ``ptr``."""
    base = np.arange(24, dtype=np.float32).reshape(4, 6)
    for arr in (base, base[1:], base[:, 2:], base.T, np.empty(0), base.view(np.matrix), np.float64(2.0) * base):
        assert recorded.address(arr) == arr.ctypes.data
    w = wp.zeros(5, dtype=wp.float32, device="cpu")
    assert recorded.address(w) == w.ptr


def test_only_inputs_and_direct_values_can_be_bound(program: dp.Program) -> None:
    """A binding the recorded launches would ignore is refused, and the program stays usable."""
    plan = program.plans["run"]
    inputs = make_inputs(51)
    with plan.workspace() as ws:
        bound = plan.bind(inputs, {i.name: i.type for i in program.graph.inputs}, ws)
        bound["$status"] = np.zeros(1, np.int32)
        with pytest.raises(dp.ContractError, match="cannot be bound"):
            plan.run("forward", bound, ws)
    out = program.run(**inputs)  # still usable
    assert_close(out["loss"], dp.interpret(program.graph, **inputs)["loss"], "loss after the refusal")

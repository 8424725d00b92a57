"""The TapePass lifecycle (DESIGN §6): ``new -> recording -> recorded -> complete ->
closed``, one evaluation per pass, ``LifecycleError`` for every misuse, an exception
while recording closes the pass; seeds per output (scalar or array, unnamed outputs
zero) give the interpreter's gradients."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp

from .conftest import SHAPE, WRT, assert_close, assert_program_works, make_inputs, to_warp


def _recorded(program: dp.Program, inputs: dict[str, np.ndarray]) -> dp.TapePass:
    """A pass whose forward ran and whose ``with`` block is left."""
    with program.tape_pass() as tp:
        tp.forward(**to_warp(inputs, program.device))
    return tp


def _grad_x(tp: dp.TapePass, seed: dict[str, object]) -> np.ndarray:
    return tp.backward(seed=seed)["x"].numpy().copy()


# -- happy path ------------------------------------------------------------------------


def test_states_progress(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    tp = program.tape_pass()
    assert tp.state == "new"
    with tp as entered:
        assert entered is tp
        assert tp.state == "recording"
        out = tp.forward(**to_warp(inputs, program.device))
        assert tp.state == "recording"
    assert tp.state == "recorded"
    assert set(out) == {"loss", "pred", "above"}
    assert all(isinstance(a, wp.array) for a in out.values())
    assert_close(out["loss"].numpy().reshape(()), dp.interpret(program.graph, **inputs)["loss"])
    grads = tp.backward(seed={"loss": 1.0})
    assert tp.state == "complete"
    assert set(grads) == {"x"} and isinstance(grads["x"], wp.array)
    assert_close(grads["x"].numpy(), dp.interpret_grad(program.graph, WRT, **inputs)["x"])
    tp.close()
    assert tp.state == "closed"


def test_scalar_and_array_seed_agree(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """An array output seeded with a scalar is the same as seeded with that constant array."""
    want = dp.interpret_grad(program.graph, WRT, seed={"pred": 2.0}, **inputs)["x"]
    tp = _recorded(program, inputs)
    scalar = _grad_x(tp, {"pred": 2.0})
    tp.close()
    tp = _recorded(program, inputs)
    array = _grad_x(tp, {"pred": np.full(SHAPE, 2.0, dtype=np.float32)})
    tp.close()
    assert_close(scalar, want)
    assert_close(array, want)
    np.testing.assert_array_equal(scalar, array)


def test_scalar_output_seed_as_array(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """A scalar output takes a 0-d array seed too."""
    tp = _recorded(program, inputs)
    got = _grad_x(tp, {"loss": np.array(0.5, dtype=np.float32)})
    tp.close()
    assert_close(got, dp.interpret_grad(program.graph, WRT, seed={"loss": 0.5}, **inputs)["x"])


def test_unnamed_outputs_get_zero_seed(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """Seeding only ``pred`` ignores ``loss``: the gradient is pred's alone, and not what a
    stale cotangent from an earlier pass would give."""
    c = np.random.default_rng(3).normal(size=SHAPE).astype(np.float32)
    tp = _recorded(program, inputs)
    tp.backward(seed={"loss": 1.0})  # leaves a loss cotangent behind in the program's buffers
    tp.close()
    tp = _recorded(program, inputs)
    got = _grad_x(tp, {"pred": c})
    tp.close()
    pred_only = dp.interpret_grad(program.graph, WRT, seed={"pred": c}, **inputs)["x"]
    assert_close(got, pred_only)
    both = dp.interpret_grad(program.graph, WRT, seed={"pred": c, "loss": 1.0}, **inputs)["x"]
    assert not np.allclose(pred_only, both)


def test_two_outputs_seeded_together(program: dp.Program) -> None:
    inputs = make_inputs(7)
    c = np.random.default_rng(4).normal(size=SHAPE).astype(np.float32)
    seed = {"loss": 0.5, "pred": c}
    tp = _recorded(program, inputs)
    got = _grad_x(tp, seed)
    tp.close()
    assert_close(got, dp.interpret_grad(program.graph, WRT, seed=seed, **inputs)["x"])


def test_passes_are_independent(program: dp.Program) -> None:
    """Consecutive passes on new inputs each give their own interpreter gradients."""
    for seed in (11, 12):
        inputs = make_inputs(seed)
        tp = _recorded(program, inputs)
        got = _grad_x(tp, {"loss": 1.0})
        tp.close()
        assert_close(got, dp.interpret_grad(program.graph, WRT, **inputs)["x"])


# -- misuse ------------------------------------------------------------------------------


def _expect_lifecycle(action: Callable[[], object], *words: str) -> dp.LifecycleError:
    with pytest.raises(dp.LifecycleError) as info:
        action()
    assert isinstance(info.value, dp.ContractError)
    message = str(info.value)
    for word in words:
        assert word in message, message
    return info.value


def test_backward_before_forward(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    tp = program.tape_pass()
    _expect_lifecycle(lambda: tp.backward(seed={"loss": 1.0}), "backward", "'new'")
    with tp:
        pass
    _expect_lifecycle(lambda: tp.backward(seed={"loss": 1.0}), "backward", "forward")
    tp.close()
    assert_program_works(program)


def test_backward_twice(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    tp = _recorded(program, inputs)
    tp.backward(seed={"loss": 1.0})
    _expect_lifecycle(lambda: tp.backward(seed={"loss": 1.0}), "backward", "'complete'")
    tp.close()
    assert_program_works(program)


def test_forward_twice(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """The second forward raises; raised while recording, it also closes the pass."""
    tp = program.tape_pass()
    with pytest.raises(dp.LifecycleError, match="forward"):
        with tp:
            tp.forward(**to_warp(inputs, program.device))
            tp.forward(**to_warp(inputs, program.device))
    assert tp.state == "closed"
    _expect_lifecycle(lambda: tp.backward(seed={"loss": 1.0}), "closed")
    assert_program_works(program)


def test_forward_after_leaving_with(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    tp = program.tape_pass()
    _expect_lifecycle(lambda: tp.forward(**inputs), "forward", "'new'")
    tp = _recorded(program, inputs)
    _expect_lifecycle(lambda: tp.forward(**inputs), "forward", "'recorded'")
    tp.close()


def test_backward_while_recording(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    tp = program.tape_pass()
    with pytest.raises(dp.LifecycleError, match="recording"):
        with tp:
            tp.forward(**to_warp(inputs, program.device))
            tp.backward(seed={"loss": 1.0})
    assert tp.state == "closed"
    assert_program_works(program)


def test_reuse_after_close(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    tp = _recorded(program, inputs)
    tp.backward(seed={"loss": 1.0})
    tp.close()
    _expect_lifecycle(lambda: tp.forward(**inputs), "forward", "'closed'")
    _expect_lifecycle(lambda: tp.backward(seed={"loss": 1.0}), "backward", "'closed'")
    _expect_lifecycle(lambda: tp.__enter__(), "'closed'")


def test_reuse_after_close_before_backward(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """Closing a recorded pass consumes its forward: no backward after it."""
    tp = _recorded(program, inputs)
    tp.close()
    _expect_lifecycle(lambda: tp.backward(seed={"loss": 1.0}), "backward", "'closed'")


def test_enter_twice(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    tp = _recorded(program, inputs)
    _expect_lifecycle(lambda: tp.__enter__(), "'recorded'")
    tp.close()


def test_close_twice(program: dp.Program) -> None:
    tp = program.tape_pass()
    tp.close()
    assert tp.state == "closed"
    _expect_lifecycle(tp.close, "closed")


def test_inside_foreign_tape(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """An active wp.Tape that was not passed in: refused before anything runs."""
    tp = program.tape_pass()
    with wp.Tape():
        _expect_lifecycle(lambda: tp.__enter__(), "wp.Tape", "tape=")
        other = program.tape_pass()
        with pytest.raises(dp.LifecycleError):
            with other:
                pytest.fail("the body must not run")  # pragma: no cover
    assert tp.state == "new"
    tp.close()
    assert_program_works(program)


def test_inside_other_tape_than_passed(program: dp.Program) -> None:
    """Passing one tape while another is active is refused too."""
    mine = wp.Tape()
    tp = program.tape_pass(tape=mine)
    with wp.Tape():
        _expect_lifecycle(lambda: tp.__enter__(), "wp.Tape")
    tp.close()


@pytest.mark.parametrize("where", ["before forward", "after forward"])
def test_user_exception_closes_pass(program: dp.Program, inputs: dict[str, np.ndarray], where: str) -> None:
    tp = program.tape_pass()
    with pytest.raises(RuntimeError, match="user code failed"):
        with tp:
            if where == "after forward":
                tp.forward(**to_warp(inputs, program.device))
            raise RuntimeError("user code failed")
    assert tp.state == "closed"
    _expect_lifecycle(lambda: tp.backward(seed={"loss": 1.0}), "closed")
    _expect_lifecycle(lambda: tp.forward(**inputs), "closed")
    _expect_lifecycle(tp.close, "closed")
    assert_program_works(program)


def test_contract_error_in_forward_closes_pass(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """A bad input raises ContractError (not LifecycleError) and closes the pass."""
    tp = program.tape_pass()
    bad = dict(inputs, x=inputs["x"].astype(np.float64))
    with pytest.raises(dp.ContractError, match="'x'") as info:
        with tp:
            tp.forward(**bad)
    assert not isinstance(info.value, dp.LifecycleError)
    assert tp.state == "closed"
    assert_program_works(program)


def test_bad_seed_keeps_pass_usable(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """A bad seed is a ContractError before anything runs; the pass may then be seeded right."""
    tp = _recorded(program, inputs)
    with pytest.raises(dp.ContractError, match="'nope'"):
        tp.backward(seed={"nope": 1.0})
    assert tp.state == "recorded"
    got = _grad_x(tp, {"loss": 1.0})
    tp.close()
    assert_close(got, dp.interpret_grad(program.graph, WRT, **inputs)["x"])


def test_pending_passes_keep_their_own_buffers(program: dp.Program) -> None:
    """Each pass owns a workspace from forward to close: while one pass's forward awaits
    its backward, a second pass runs its own forward and backward without touching the
    first's outputs or saved values; both gradients are right, in either order."""
    first_inputs, second_inputs, third_inputs = make_inputs(31), make_inputs(32), make_inputs(33)
    first = _recorded(program, first_inputs)
    second = _recorded(program, second_inputs)
    third = _recorded(program, third_inputs)
    assert_close(_grad_x(third, {"loss": 1.0}), dp.interpret_grad(program.graph, WRT, **third_inputs)["x"])
    third.close()
    assert_close(_grad_x(second, {"loss": 1.0}), dp.interpret_grad(program.graph, WRT, **second_inputs)["x"])
    assert_close(_grad_x(first, {"loss": 1.0}), dp.interpret_grad(program.graph, WRT, **first_inputs)["x"])
    second.close()
    first.close()


def test_pending_pass_outputs_are_not_overwritten(program: dp.Program) -> None:
    """The arrays a pass's forward returned are its own until close: other passes and calls
    in between do not overwrite them."""
    first_inputs, other_inputs = make_inputs(34), make_inputs(35)
    with program.tape_pass() as first:
        outs = first.forward(**to_warp(first_inputs, program.device))
    with program.tape_pass() as second:
        second.forward(**to_warp(other_inputs, program.device))
    program.run(**other_inputs)
    program.value_and_grad(**other_inputs)
    want = dp.interpret(program.graph, **first_inputs)
    assert_close(outs["loss"].numpy().reshape(()), want["loss"], "first pass loss")
    assert_close(outs["pred"].numpy(), want["pred"], "first pass pred")
    second.close()
    first.close()


def test_closing_a_recorded_pass_returns_its_buffers(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """A pass closed without a backward hands its workspace back: the next pass reuses it
    (no new workspace is allocated) and computes right."""
    first = _recorded(program, inputs)
    first.close()
    plan = program.plans["tape"]
    pooled = len(plan._free)
    assert_program_works(program)
    assert len(plan._free) == pooled, "a sequential pass allocated a workspace instead of reusing the pool"


def test_dropped_recorded_pass_does_not_block(program: dp.Program, inputs: dict[str, np.ndarray]) -> None:
    """A pass the caller no longer references cannot run its backward: it blocks nothing."""
    _recorded(program, inputs)
    assert_program_works(program)

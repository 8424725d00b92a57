"""A program composed with the user's own Warp kernels on one ``wp.Tape`` (DESIGN §6):

    u --affine--> y = 2u + 1 = x --program--> (loss, pred) --user kernels--> final
    final = 3 * loss + sum(pred * c)

``program.tape_pass(tape=tape)`` registers the program's backward on the tape, so one
``tape.backward`` runs through the user kernels and the program. The expected gradient
is chained by hand: d final / du = 2 * interpret_grad(seed={"loss": 3, "pred": c}).
"""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp

from . import user_kernels as uk
from .conftest import SHAPE, WRT, assert_close, assert_program_works

K = 3.0


def _data(seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    u = rng.uniform(0.1, 0.5, SHAPE).astype(np.float32)  # x = 2u + 1 in [1.2, 2]: inside log's domain
    obs = rng.uniform(0.0, 1.0, SHAPE).astype(np.float32)
    w = rng.uniform(0.1, 1.0, SHAPE).astype(np.float32)
    c = rng.normal(size=SHAPE).astype(np.float32)
    return u, obs, w, c


def _expected(
    graph: dp.Graph, u: np.ndarray, obs: np.ndarray, w: np.ndarray, c: np.ndarray
) -> tuple[float, np.ndarray]:
    x = (2.0 * u + 1.0).astype(np.float32)
    out = dp.interpret(graph, x=x, obs=obs, w=w)
    final = K * float(out["loss"]) + float(np.sum(out["pred"].astype(np.float64) * c))
    dx = dp.interpret_grad(graph, WRT, seed={"loss": K, "pred": c}, x=x, obs=obs, w=w)["x"]
    return final, 2.0 * dx


def _composed(program: dp.Program, seed: int) -> None:
    """Record user kernel -> program -> user kernels on one tape, run one tape.backward and
    compare the value and ``u.grad`` with the chained interpreter result."""
    dev = program.device
    u_np, obs_np, w_np, c_np = _data(seed)
    u = wp.array(u_np, dtype=wp.float32, device=dev, requires_grad=True)
    y = wp.zeros(SHAPE, dtype=wp.float32, device=dev, requires_grad=True)
    obs = wp.array(obs_np, dtype=wp.float32, device=dev)
    w = wp.array(w_np, dtype=wp.float32, device=dev)
    c = wp.array(c_np, dtype=wp.float32, device=dev)
    final = wp.zeros(1, dtype=wp.float32, device=dev, requires_grad=True)

    tape = wp.Tape()
    with tape:
        wp.launch(uk.affine, dim=SHAPE, inputs=[u], outputs=[y], device=dev)
        with program.tape_pass(tape=tape) as tp:
            assert tp.state == "recording"
            out = tp.forward(x=y, obs=obs, w=w)
        assert tp.state == "recorded"
        wp.launch(uk.scale_into, dim=1, inputs=[out["loss"], K], outputs=[final], device=dev)
        wp.launch(uk.weighted_sum, dim=SHAPE, inputs=[out["pred"], c], outputs=[final], device=dev)

    tape.backward(grads={final: wp.ones(1, dtype=wp.float32, device=dev)})
    assert tp.state == "complete"
    want_final, want_du = _expected(program.graph, u_np, obs_np, w_np, c_np)
    assert_close(final.numpy()[0], want_final, "final")
    assert_close(u.grad.numpy(), want_du, "u.grad")

    tp.close()
    assert tp.state == "closed"
    assert not tape.launches
    assert not np.any(u.grad.numpy()), "close resets the tape, which zeroes the gradients it tracks"
    with pytest.raises(dp.LifecycleError):
        tp.backward(seed={"loss": 1.0})


def test_tape_backward_through_user_kernels_and_program(program: dp.Program) -> None:
    _composed(program, seed=21)


def test_composition_repeats(program: dp.Program) -> None:
    """A second composed pass (new data, new tape) gives its own gradients: nothing stale."""
    _composed(program, seed=22)
    _composed(program, seed=23)
    assert_program_works(program)


def test_second_tape_backward_is_refused(program: dp.Program) -> None:
    """The program's backward runs once per pass: a second ``tape.backward`` raises."""
    dev = program.device
    u_np, obs_np, w_np, _ = _data(24)
    x = wp.array(2.0 * u_np + 1.0, dtype=wp.float32, device=dev, requires_grad=True)
    obs = wp.array(obs_np, dtype=wp.float32, device=dev)
    w = wp.array(w_np, dtype=wp.float32, device=dev)
    tape = wp.Tape()
    with tape:
        with program.tape_pass(tape=tape) as tp:
            out = tp.forward(x=x, obs=obs, w=w)
    tape.backward(loss=out["loss"])
    want = dp.interpret_grad(program.graph, WRT, x=x.numpy(), obs=obs_np, w=w_np)["x"]
    assert_close(x.grad.numpy(), want, "x.grad")
    with pytest.raises(dp.LifecycleError):
        tape.backward(loss=out["loss"])
    tp.close()
    assert_program_works(program)


def test_unclosed_composed_pass_does_not_leak(program: dp.Program) -> None:
    """A composed pass left complete but never closed keeps cotangents in the program's
    output ``.grad`` arrays; the next pass must not accumulate onto them."""
    dev = program.device
    u_np, obs_np, w_np, c_np = _data(25)
    obs = wp.array(obs_np, dtype=wp.float32, device=dev)
    w = wp.array(w_np, dtype=wp.float32, device=dev)
    c = wp.array(c_np, dtype=wp.float32, device=dev)
    x1 = wp.array(2.0 * u_np + 1.0, dtype=wp.float32, device=dev, requires_grad=True)
    final = wp.zeros(1, dtype=wp.float32, device=dev, requires_grad=True)
    tape1 = wp.Tape()
    with tape1:
        with program.tape_pass(tape=tape1) as first:
            out = first.forward(x=x1, obs=obs, w=w)
        wp.launch(uk.weighted_sum, dim=SHAPE, inputs=[out["pred"], c], outputs=[final], device=dev)
    tape1.backward(grads={final: wp.ones(1, dtype=wp.float32, device=dev)})
    assert first.state == "complete"  # not closed: out["pred"].grad still holds c

    x2 = wp.array(2.0 * u_np + 1.0, dtype=wp.float32, device=dev, requires_grad=True)
    tape2 = wp.Tape()
    with tape2:
        with program.tape_pass(tape=tape2) as second:
            out = second.forward(x=x2, obs=obs, w=w)
    tape2.backward(loss=out["loss"])
    want = dp.interpret_grad(program.graph, WRT, x=x2.numpy(), obs=obs_np, w=w_np)["x"]
    assert_close(x2.grad.numpy(), want, "x.grad of the second pass")
    second.close()
    first.close()

"""Unread loop gradients (`dpt_ir.runtime.loop_pieces.unread_gradients`): ``value_and_grad``'s
reverse leaves out the gradient of a closed-over tensor that depends on no input requiring one
(a damping profile, as `examples/fwi.py`'s sponge), and with it that gradient's running sum,
a read and a write of the closure a step. The gradients that are returned keep their bits:
equal to the tape pass's (whose reverse keeps every gradient) and to the interpreter's."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.runtime.loop_pieces import ACC_PREFIX

LAP = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
SHAPE = (12, 10)


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("unread")
    u0 = g.input("u0", SHAPE)
    k = g.input("k", SHAPE)
    damp = g.input("damp", SHAPE, requires_grad=False)
    obs = g.input("obs", SHAPE, requires_grad=False)
    kk = k * k  # a closure that depends on k: its gradient is read
    gain = damp * 0.5 + 0.5  # one that depends on no input requiring a gradient: unread

    def step(u: Any, _: Any) -> tuple[Any, None]:
        return gain * (u + 0.1 * kk * dp.correlate(u, LAP, mode="nearest")), None

    u, _ = dp.scan(step, u0, length=7)
    g.output("loss", dp.sum(dp.square(u - obs)))
    return g.build()


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "u0": rng.normal(size=SHAPE).astype(np.float32),
        "k": rng.uniform(0.5, 1.0, SHAPE).astype(np.float32),
        "damp": rng.uniform(0.8, 1.0, SHAPE).astype(np.float32),
        "obs": rng.normal(size=SHAPE).astype(np.float32),
    }


@pytest.fixture(scope="module")
def program() -> Any:
    return dp.compile(_graph(), wrt=["u0", "k"], threads=1)


def _reverse(program: Any) -> Any:
    return next(loop for kind, loop, node in program.joint.stages if kind == "loop" and node.op == "scan_vjp")


def test_the_unread_closure_has_no_gradient_sum(program: Any) -> None:
    loop = _reverse(program)
    names = loop.names
    gain = next(n for n in loop.unread)
    assert loop.unread == frozenset({gain}) and gain.startswith("closure.")
    inputs = {i.name for i in loop.vjp.graph.inputs}  # the compiled vjp piece's
    assert ACC_PREFIX + gain not in inputs  # its running sum is gone ...
    live = [n for n in names if n.startswith("closure.") and n != gain]
    assert all(ACC_PREFIX + n in inputs for n in live)  # ... the read one's stays


def test_gradients_keep_their_bits(program: Any) -> None:
    x = _inputs()
    _, grads = program.value_and_grad(**x)
    with program.tape_pass() as tp:  # the tape pass's reverse keeps every gradient
        tp.forward(**x)
    taped = tp.backward(seed={"loss": 1.0})
    tp.close()
    for name in ("u0", "k"):
        assert grads[name].tobytes() == taped[name].numpy().tobytes()
    oracle = dp.interpret_grad(_graph(), ["u0", "k"], **x)
    for name in ("u0", "k"):
        np.testing.assert_allclose(grads[name], oracle[name], rtol=1e-4, atol=1e-5)

"""A compiled loop runs its steps as one native call (`dpt_ir.runtime.loop_native`).

What must hold: after the first call, a loop call makes no Python call and no ctypes call
per step (the count of both, for 4 and 40 steps, is the same); the results are
bit-identical to the step-by-step path (`Loop._native` switched off) and for 1 and 2
threads, with store-all and binomial checkpointing, and match the interpreter.
"""

from __future__ import annotations

import sys
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.runtime import loop as loop_module

N = 9
LAP = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
WRT = ["u0", "k"]


def graph(steps: int, checkpoint: int | None) -> dp.Graph:
    """Two carries (one a leapfrog-style pair), an ``xs`` row added each step and a ``y`` row."""
    g = dp.GraphBuilder(f"native_loop_{steps}_{checkpoint}")
    u0, k = g.input("u0", (N, N)), g.input("k", (N, N))
    xs = g.input("xs", (steps, N), requires_grad=False)

    def step(carry: Any, x: Any) -> tuple[Any, Any]:
        prev, u = carry
        new = 2.0 * u - prev + 0.1 * k * dp.correlate(u, LAP, mode="constant") + 0.01 * x
        return (u, new), dp.sum(new, axis=0)

    (_, u), ys = dp.scan(step, (u0, u0), xs, checkpoint=checkpoint)
    g.output("loss", dp.sum(dp.square(u)) + dp.sum(ys * ys))
    return g.build()


def inputs(steps: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(steps)
    return {
        "u0": rng.uniform(-1, 1, (N, N)).astype(np.float32),
        "k": rng.uniform(0.5, 1.0, (N, N)).astype(np.float32),
        "xs": rng.uniform(-1, 1, (steps, N)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def programs() -> dict[tuple[int, int | None, int], Any]:
    """(steps, checkpoint, threads) -> its program."""
    keys = [(4, 2, 1), (40, 2, 1), (4, 2, 2), (4, None, 1), (4, None, 2)]
    return {key: dp.compile(graph(key[0], key[1]), wrt=WRT, threads=key[2]) for key in keys}


def _events(program: Any, x: dict[str, np.ndarray]) -> int:
    """Python and C calls made by one ``value_and_grad`` (after a warm-up call)."""
    program.value_and_grad(**x)
    count = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            count[0] += 1

    sys.setprofile(profile)
    try:
        program.value_and_grad(**x)
    finally:
        sys.setprofile(None)
    return count[0]


def test_a_loop_call_makes_no_call_per_step(programs: dict[Any, Any]) -> None:
    """The number of Python and C (ctypes included) calls of a call does not grow with the steps."""
    assert _events(programs[(4, 2, 1)], inputs(4)) == _events(programs[(40, 2, 1)], inputs(40))


@pytest.mark.parametrize("checkpoint", [None, 2])
def test_native_steps_are_the_step_by_step_bits(
    programs: dict[Any, Any], checkpoint: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Native loop == step by step == 2 threads, bit for bit; and the interpreter's values."""
    x = inputs(4)
    one, two = programs[(4, checkpoint, 1)], programs[(4, checkpoint, 2)]
    out, grads = one.value_and_grad(**x)
    want = dp.interpret_grad(one.graph, WRT, seed={"loss": 1.0}, **x)
    for name in WRT:
        np.testing.assert_allclose(grads[name], want[name], rtol=1e-4, atol=1e-5)
    out2, grads2 = two.value_and_grad(**x)
    monkeypatch.setattr(loop_module.Loop, "_native", lambda self, *args: False)
    out3, grads3 = one.value_and_grad(**x)
    for other_out, other in ((out2, grads2), (out3, grads3)):
        assert np.array_equal(out["loss"], other_out["loss"])
        assert all(np.array_equal(grads[n], other[n]) for n in WRT)

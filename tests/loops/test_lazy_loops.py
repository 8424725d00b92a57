"""A loop program allocates nothing data-sized at compile (issue 27): its loops' carries,
stored checkpoints, packed results and workspaces are made at the first call."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from tests.runtime.test_lazy_workspace import _device_allocations

SHAPE = (64, 48)


def _heat(name: str) -> dp.Graph:
    g = dp.GraphBuilder(name)
    u0 = g.input("u0", SHAPE, "float32")
    k = g.input("k", SHAPE, "float32")

    def step(u: dp.Tensor, _: object) -> tuple[dp.Tensor, dp.Tensor]:
        return u + 0.1 * k * dp.gradient(u, axis=0), dp.sum(u)

    u, ys = dp.scan(step, u0, length=12, checkpoint=3)
    g.output("loss", dp.sum(dp.square(u)) + dp.sum(ys))
    return g.build()


def test_compiling_a_loop_program_allocates_nothing_then_the_first_call_does(monkeypatch: pytest.MonkeyPatch) -> None:
    dp.compile(_heat("heat_warm"), wrt=["k"], device="cpu")  # the pieces' module: built and cached
    seen = _device_allocations("cpu", monkeypatch)
    program = dp.compile(_heat("heat_lazy"), wrt=["k"], device="cpu")
    carry = SHAPE[0] * SHAPE[1] * 4
    assert not [n for n in seen if n >= carry], f"compile allocated {sorted(seen)[-3:]} bytes"
    rng = np.random.default_rng(0)
    inputs = {n: rng.uniform(0.1, 1.0, SHAPE).astype(np.float32) for n in ("u0", "k")}
    out, grads = program.value_and_grad(**inputs)
    assert [n for n in seen if n >= carry], "the first call allocates the loop's buffers"
    want = dp.interpret_grad(program.graph, ["k"], **inputs)["k"]
    np.testing.assert_allclose(grads["k"], want, rtol=2e-4, atol=1e-5)
    (vjp,) = [r for r in program.report.loops if r.op == "scan_vjp"]
    # measured on the arrays the call made: the step buffers, and the forward's first-sweep carries
    assert vjp.carry_bytes_held + vjp.kept_bytes == (3 + 2) * carry

"""Loop programs through the three adapters (`dpt_ir.interop.CompiledProgram`): the small
float32 heat loop of `tests/loops` (its compiled pieces are cached in process) as a SciPy
objective, a PyTorch and a JAX function, with cotangents on the loss alone (scaled loss
gradients) and on both outputs (a tape pass of the loop program), against the interpreter."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
import dpt_ir.scipy as dps
from tests.interop.conftest import require
from tests.loops.test_compiled_scan import SHAPE, WRT, heat, inputs

dpt = require("dpt_ir.torch")
dpj = require("dpt_ir.jax")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import torch  # noqa: E402

FIELD_WEIGHT = np.linspace(-1.0, 1.0, SHAPE[0] * SHAPE[1]).reshape(SHAPE).astype(np.float32)


@pytest.fixture(scope="module")
def program() -> Any:
    return dp.compile(heat(checkpoint=2), wrt=WRT, loss="loss")


def oracle(program: Any, both: bool) -> dict[str, np.ndarray]:
    """The interpreter's gradients of ``loss`` (+ ``sum(FIELD_WEIGHT * field)`` with ``both``)."""
    seed: dict[str, Any] = {"loss": 1.0, **({"field": FIELD_WEIGHT} if both else {})}
    return dp.interpret_grad(program.graph, WRT, seed=seed, **inputs())


def test_scipy_objective_of_a_loop_program(program: Any) -> None:
    x = inputs()
    fun = dps.objective(program)
    value, grad = fun(fun.x0(**x))
    outs, grads = program.value_and_grad(**x)
    assert value == float(outs["loss"])
    assert np.array_equal(grad, np.concatenate([grads[n].ravel() for n in WRT]).astype(np.float64))
    assert fun.nfev == 1


@pytest.mark.parametrize("both", [False, True])
def test_torch_function_of_a_loop_program(program: Any, both: bool) -> None:
    f = dpt.function(program)
    tensors = {k: torch.from_numpy(v).requires_grad_(True) for k, v in inputs().items()}
    loss, field = f(**tensors)
    total = loss + (torch.sum(torch.from_numpy(FIELD_WEIGHT) * field) if both else 0.0)
    total.backward()
    expected = oracle(program, both)
    for name in WRT:
        np.testing.assert_allclose(tensors[name].grad.numpy(), expected[name], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("both", [False, True])
def test_jax_function_of_a_loop_program(program: Any, both: bool) -> None:
    f = dpj.function(program)
    weight = jnp.asarray(FIELD_WEIGHT)

    def total(u0: jax.Array, k: jax.Array, xs: jax.Array) -> jax.Array:
        loss, field = f(u0, k, xs)
        return loss + (jnp.sum(weight * field) if both else 0.0)

    x = inputs()
    got = jax.jit(jax.grad(total, argnums=(0, 1, 2)))(*(jnp.asarray(x[n]) for n in WRT))
    expected = oracle(program, both)
    for name, g in zip(WRT, got, strict=True):
        np.testing.assert_allclose(np.asarray(g), expected[name], rtol=1e-4, atol=1e-5)


def test_adapters_refuse_what_is_not_a_compiled_program() -> None:
    for make, where in ((dps.objective, "scipy.objective"), (dpt.function, "torch.function")):
        with pytest.raises(dp.ContractError, match=f"{where}: expected a compiled program"):
            make(object())


def test_forward_mode_of_a_loop_program_in_both_adapters(program: Any) -> None:
    """torch.func.jvp and jax.jvp of the loop program (its LoopProgram.jvp) equal the interpreter's jvp."""
    x = inputs()
    rng = np.random.default_rng(7)
    v = {n: rng.uniform(-1.0, 1.0, x[n].shape).astype(np.float32) for n in WRT}
    _, expected = dp.interpret_jvp(program.graph, v, **x)
    f, g = dpt.function(program), dpj.function(program)
    _, torch_tangents = torch.func.jvp(
        f, tuple(torch.from_numpy(x[n]) for n in WRT), tuple(torch.from_numpy(v[n]) for n in WRT)
    )
    _, jax_tangents = jax.jvp(g, tuple(jnp.asarray(x[n]) for n in WRT), tuple(jnp.asarray(v[n]) for n in WRT))
    for name, t, j in zip(("loss", "field"), torch_tangents, jax_tangents, strict=True):
        np.testing.assert_allclose(t.numpy(), expected[name], rtol=1e-4, atol=1e-5)
        np.testing.assert_allclose(np.asarray(j), expected[name], rtol=1e-4, atol=1e-5)

"""dpt_ir.jax.function: ``jax.jit(jax.grad(...))`` through the program equals JAX's own
gradient of the same function (float64, 1e-10); vmap, subsets of outputs, contracts."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from tests.interop.conftest import pair_inputs, require
from tests.interop.jax_oracle import pair_reference, x64  # noqa: F401 (x64: an autouse fixture)

dpj = require("dpt_ir.jax")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def objective(fn, a: jax.Array, b: jax.Array, w: jax.Array) -> jax.Array:  # type: ignore[no-untyped-def]
    """Cotangents on both float outputs."""
    loss, c = fn(a, b, w)[:2]
    return 3.0 * loss + jnp.sum(jnp.cos(c))


def test_jit_grad_equals_jax_gradient(pair_program: dp.Program) -> None:
    f = dpj.function(pair_program)
    args = [jnp.asarray(v) for v in pair_inputs(10).values()]  # a, b, w
    got = jax.jit(jax.grad(lambda a, b, w: objective(f, a, b, w), argnums=(0, 1)))(*args)
    want = jax.grad(lambda a, b, w: objective(pair_reference, a, b, w), argnums=(0, 1))(*args)
    for g, r in zip(got, want, strict=True):
        assert g.dtype == jnp.float64
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-10, atol=1e-12)


def test_values_vjp_and_vmap(pair_program: dp.Program) -> None:
    f = dpj.function(pair_program)
    arrays = {k: jnp.asarray(v) for k, v in pair_inputs(11).items()}
    loss, c, above = jax.jit(f)(**arrays)
    rl, rc = pair_reference(**arrays)
    np.testing.assert_allclose(float(loss), float(rl), rtol=1e-12)
    np.testing.assert_allclose(np.asarray(c), np.asarray(rc), rtol=1e-12)
    assert above.dtype == jnp.bool_
    (ga,) = jax.grad(lambda a: jnp.sum(f(a, arrays["b"], arrays["w"])[1]), argnums=(0,))(arrays["a"])
    np.testing.assert_allclose(np.asarray(ga), np.sin(np.asarray(arrays["b"])), rtol=1e-12)
    batch = jnp.stack([arrays["a"], 2.0 * arrays["a"]])
    losses = jax.vmap(lambda a: f(a, arrays["b"], arrays["w"])[0])(batch)
    for k in range(2):
        np.testing.assert_allclose(float(losses[k]), float(pair_reference(batch[k], arrays["b"], arrays["w"])[0]))


def test_contract_errors_at_trace_time(pair_program: dp.Program) -> None:
    f = dpj.function(pair_program)
    good = {k: jnp.asarray(v) for k, v in pair_inputs(12).items()}
    for what, bad in {"shape": jnp.zeros((4, 3)), "dtype": good["a"].astype(jnp.float32)}.items():
        with pytest.raises(dp.ContractError) as info:
            jax.jit(f)(bad, good["b"], good["w"])
        with pytest.raises(dp.ContractError) as ran:
            pair_program.run(a=np.asarray(bad), b=np.asarray(good["b"]), w=np.asarray(good["w"]))
        assert str(info.value) == str(ran.value), what
    with pytest.raises(dp.ContractError, match="missing input"):
        f(good["a"], good["b"])


def test_float64_program_needs_x64(pair_program: dp.Program) -> None:
    f = dpj.function(pair_program)
    with jax.enable_x64(False), pytest.raises(dp.ContractError, match="jax_enable_x64"):
        f(*pair_inputs(13).values())


def test_grad_of_the_loss_alone_scales_the_kept_gradients(pair_program: dp.Program) -> None:
    f = dpj.function(pair_program)
    args = [jnp.asarray(v) for v in pair_inputs(14).values()]
    got = jax.jit(jax.grad(lambda a, b, w: 2.5 * f(a, b, w)[0], argnums=(0, 1)))(*args)
    want = jax.grad(lambda a, b, w: 2.5 * pair_reference(a, b, w)[0], argnums=(0, 1))(*args)
    for g, r in zip(got, want, strict=True):
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-10, atol=1e-12)

"""dpt_ir.jax.function under forward mode and second order: jax.jvp, jacfwd, jacrev, hessian,
grad of grad and jvp of grad equal JAX's own autodiff of the same model written in jax.numpy
(float64); gradients of the loss still evaluate the program once; what dpt_ir does not derive
is a ContractError naming it."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from tests.interop.conftest import pair_inputs, require
from tests.interop.jax_oracle import pair_reference, x64  # noqa: F401 (x64: an autouse fixture)

dpj = require("dpt_ir.jax")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


def arrays(seed: int) -> dict[str, jax.Array]:
    return {k: jnp.asarray(v) for k, v in pair_inputs(seed).items()}


def both(program: dp.Program, w: jax.Array) -> list[Callable[..., Any]]:
    """The program and the oracle as functions of (a, b) returning (loss, c), w fixed."""
    f = dpj.function(program)
    return [lambda a, b: tuple(f(a, b, w)[:2]), lambda a, b: pair_reference(a, b, w)]


def close(got: Any, want: Any) -> None:
    for g, r in zip(jax.tree.leaves(got), jax.tree.leaves(want), strict=True):
        assert g.shape == r.shape and g.dtype == r.dtype
        np.testing.assert_allclose(np.asarray(g), np.asarray(r), rtol=1e-11, atol=1e-12)


def test_jvp_equals_jax_jvp(pair_program: dp.Program) -> None:
    t = arrays(30)
    va, vb = jnp.ones((3, 4)), jnp.linspace(-1.0, 1.0, 12).reshape(3, 4)
    mine, ref = both(pair_program, t["w"])
    want = jax.jvp(ref, (t["a"], t["b"]), (va, vb))
    close(jax.jvp(mine, (t["a"], t["b"]), (va, vb)), want)
    close(jax.jit(lambda a, b: jax.jvp(mine, (a, b), (va, vb)))(t["a"], t["b"]), want)


@pytest.mark.parametrize("transform", ["jacfwd", "jacrev"])
def test_jacobian_of_an_array_output(pair_program: dp.Program, transform: str) -> None:
    t = arrays(31)
    mine, ref = (lambda a, g=g: g(a, t["b"])[1] for g in both(pair_program, t["w"]))
    jac = getattr(jax, transform)
    close(jac(mine)(t["a"]), jac(ref)(t["a"]))


def test_hessian_and_second_derivatives_of_the_loss(pair_program: dp.Program) -> None:
    t = arrays(32)
    mine, ref = (lambda a, b, g=g: g(a, b)[0] for g in both(pair_program, t["w"]))
    v = jnp.linspace(-1.0, 2.0, 12).reshape(3, 4)
    want = jax.hessian(ref, argnums=(0, 1))(t["a"], t["b"])
    close(jax.hessian(mine, argnums=(0, 1))(t["a"], t["b"]), want)
    close(jax.jit(jax.hessian(mine, argnums=(0, 1)))(t["a"], t["b"]), want)
    m, r = (lambda a, g=g: g(a, t["b"]) for g in (mine, ref))
    close(jax.jacrev(jax.jacrev(m))(t["a"]), jax.hessian(r)(t["a"]))
    close(
        jax.grad(lambda a: jnp.sum(jax.grad(m)(a) * v))(t["a"]), jax.grad(lambda a: jnp.sum(jax.grad(r)(a) * v))(t["a"])
    )
    close(jax.jvp(jax.grad(m), (t["a"],), (v,)), jax.jvp(jax.grad(r), (t["a"],), (v,)))
    batch = jnp.stack([t["a"], 2.0 * t["a"]])
    close(jax.vmap(jax.grad(m))(batch), jax.vmap(jax.grad(r))(batch))


class Counting:
    """A compiled program whose evaluations are counted (the adapter's whole API, delegated)."""

    def __init__(self, program: dp.Program) -> None:
        self._program, self.calls = program, []

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._program, name)
        if name in ("run", "value_and_grad", "tape_pass", "jvp", "hvp"):
            return lambda *a, **k: (self.calls.append(name), attr(*a, **k))[1]
        return attr


def test_gradient_of_the_loss_evaluates_once(pair_program: dp.Program) -> None:
    """jax.grad of the loss: one fused value_and_grad, whose gradients the backward scales."""
    counted = Counting(pair_program)
    f = dpj.function(counted)
    t = arrays(33)
    jax.grad(lambda a: 2.5 * f(a, t["b"], t["w"])[0])(t["a"])
    assert counted.calls == ["value_and_grad"]


def test_derivatives_dpt_ir_does_not_derive_are_contract_errors(pair_program: dp.Program) -> None:
    f = dpj.function(pair_program)
    t = arrays(34)
    v = jnp.ones((3, 4))
    name = r"function\('interop_pair'\): "

    def loss(a: jax.Array) -> jax.Array:
        return f(a, t["b"], t["w"])[0]

    with pytest.raises(dp.ContractError, match=name + r"a derivative of second order of outputs other than the loss"):
        jax.hessian(lambda a: jnp.sum(f(a, t["b"], t["w"])[1]))(t["a"])
    with pytest.raises(dp.ContractError, match=name + r"input\(s\) \['w'\] have a tangent but are not in"):
        jax.jvp(lambda w: f(t["a"], t["b"], w)[0], (t["w"],), (v,))
    with pytest.raises(dp.ContractError, match=r"jvp of jvp"):
        jax.jvp(lambda a: jax.jvp(loss, (a,), (v,))[1], (t["a"],), (v,))
    with pytest.raises(dp.ContractError, match=r"is not supported"):
        jax.jacrev(jax.hessian(loss))(t["a"])  # third order

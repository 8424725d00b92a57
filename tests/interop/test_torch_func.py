"""dpt_ir.torch.function under torch.func transforms: jvp, grad, vmap, jacrev, jacfwd, hessian,
grad of grad and jvp of grad equal torch.func of the same model written in torch (float64);
the derivatives dpt_ir does not derive are ContractErrors naming them; inputs are read in place."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from tests.interop.conftest import pair_inputs, pipeline_inputs, require

dpt = require("dpt_ir.torch")
import torch  # noqa: E402
import torch.func as tf  # noqa: E402


def tensors(arrays: dict[str, np.ndarray]) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v) for k, v in arrays.items()}


def pair_reference(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The pair graph in eager torch: the oracle."""
    return (w * torch.exp(a) * b).sum() + (a * a).sum(), a * torch.sin(b)


def both(f: Any, t: dict[str, torch.Tensor]) -> list[Callable[..., Any]]:
    """The program and the oracle, as functions of (a, b) with w fixed."""
    return [lambda a, b: f(a, b, t["w"])[:2], lambda a, b: pair_reference(a, b, t["w"])]


def close(got: Any, want: Any, rtol: float = 1e-12, atol: float = 1e-12) -> None:
    torch.testing.assert_close(got, want, rtol=rtol, atol=atol)


def test_jvp_equals_torch_func_jvp(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(20))
    va, vb = torch.ones_like(t["a"]), torch.linspace(-1.0, 1.0, 12, dtype=torch.float64).reshape(3, 4)
    got, want = (tf.jvp(g, (t["a"], t["b"]), (va, vb)) for g in both(f, t))
    close(got, want)
    (loss, c), (dloss, dc) = got
    assert loss.shape == () and c.shape == (3, 4) and dloss.shape == () and dc.shape == (3, 4)


def test_jvp_of_the_imaging_pipeline(pipeline_program: dp.Program) -> None:
    """A tangent in mu only; the uint8 mask and the float inputs outside wrt are closed over."""
    f = dpt.function(pipeline_program)
    t = tensors(pipeline_inputs(21))
    v = torch.linspace(-0.1, 0.1, 64, dtype=torch.float64).reshape(8, 8)
    value, tangent = tf.jvp(lambda mu: f(mu, t["counts"], t["weights"], t["mask"]), (t["mu"],), (v,))
    grad = tf.grad(lambda mu: f(mu, t["counts"], t["weights"], t["mask"]))(t["mu"])
    close(value, torch.tensor(pipeline_program.run(**pipeline_inputs(21))["loss"]))
    close(tangent, (grad * v).sum(), rtol=1e-10, atol=1e-14)  # <∇L, v>: reverse mode agrees


def test_grad_vjp_and_vmap_equal_torch_func(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(22))
    u = torch.linspace(0.5, 1.5, 12, dtype=torch.float64).reshape(3, 4)
    mine, ref = both(f, t)
    close(tf.grad(lambda a, b: mine(a, b)[0], argnums=(0, 1))(t["a"], t["b"]),
          tf.grad(lambda a, b: ref(a, b)[0], argnums=(0, 1))(t["a"], t["b"]))  # fmt: skip
    (_, back), (_, ref_back) = (tf.vjp(g, t["a"], t["b"]) for g in (mine, ref))
    close(back((torch.tensor(2.0, dtype=torch.float64), u)), ref_back((torch.tensor(2.0, dtype=torch.float64), u)))
    batch = torch.stack([t["a"], 2.0 * t["a"], -t["a"]])
    close(tf.vmap(lambda a: mine(a, t["b"]))(batch), tf.vmap(lambda a: ref(a, t["b"]))(batch))


@pytest.mark.parametrize("transform", ["jacrev", "jacfwd"])
def test_jacobian_of_an_array_output(pair_program: dp.Program, transform: str) -> None:
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(23))
    mine, ref = (lambda a, g=g: g(a, t["b"])[1] for g in both(f, t))
    jac = getattr(tf, transform)
    close(jac(mine)(t["a"]), jac(ref)(t["a"]))


def test_hessian_and_second_derivatives_of_the_loss(pair_program: dp.Program) -> None:
    """hessian (jacfwd over jacrev), jacrev over jacrev, grad of grad and jvp of grad (the
    forward-over-reverse Hessian-vector product), all through program.hvp."""
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(24))
    mine, ref = (lambda a, g=g: g(a, t["b"])[0] for g in both(f, t))
    v = torch.linspace(-1.0, 2.0, 12, dtype=torch.float64).reshape(3, 4)
    want = tf.hessian(ref)(t["a"])
    assert want.shape == (3, 4, 3, 4)
    close(tf.hessian(mine)(t["a"]), want)
    close(tf.jacrev(tf.jacrev(mine))(t["a"]), want)
    close(
        tf.grad(lambda a: (tf.grad(mine)(a) * v).sum())(t["a"]), tf.grad(lambda a: (tf.grad(ref)(a) * v).sum())(t["a"])
    )
    close(tf.jvp(tf.grad(mine), (t["a"],), (v,)), tf.jvp(tf.grad(ref), (t["a"],), (v,)))


def test_hessian_in_two_inputs(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(25))
    mine, ref = (lambda a, b, g=g: g(a, b)[0] for g in both(f, t))
    close(tf.hessian(mine, argnums=(0, 1))(t["a"], t["b"]), tf.hessian(ref, argnums=(0, 1))(t["a"], t["b"]))


def test_inputs_are_read_in_place(pair_program: dp.Program, monkeypatch: pytest.MonkeyPatch) -> None:
    """Under the transforms the program reads the caller's own memory (no functorch wrapper, no copy)."""
    seen: list[int] = []
    view = dpt.host_view
    monkeypatch.setattr(dpt, "host_view", lambda t: (seen.append(t.data_ptr()), view(t))[1])
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(26))
    v = torch.ones_like(t["a"])
    tf.jvp(lambda a: f(a, t["b"], t["w"])[0], (t["a"],), (v,))
    assert {t["a"].data_ptr(), t["b"].data_ptr(), t["w"].data_ptr(), v.data_ptr()} <= set(seen)


def test_derivatives_dpt_ir_does_not_derive_are_contract_errors(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(27))
    v = torch.ones_like(t["a"])
    name = r"function\('interop_pair'\)"

    def loss(a: torch.Tensor) -> torch.Tensor:
        return f(a, t["b"], t["w"])[0]

    with pytest.raises(dp.ContractError, match=name + r" under torch.func: .*of outputs other than the loss"):
        tf.hessian(lambda a: f(a, t["b"], t["w"])[1].sum())(t["a"])
    with pytest.raises(dp.ContractError, match=name + r": input\(s\) \['w'\] have a tangent but are not in"):
        tf.jvp(lambda w: f(t["a"], t["b"], w)[0], (t["w"],), (v,))
    with pytest.raises(dp.ContractError, match=r"jvp of jvp"):
        tf.jvp(lambda a: tf.jvp(loss, (a,), (v,))[1], (t["a"],), (v,))
    with pytest.raises(dp.ContractError, match="of third order"):
        tf.jacrev(tf.hessian(loss))(t["a"])
    with pytest.raises(dp.ContractError, match="'w' requires grad but is not in the program's wrt"):
        tf.grad(lambda w: f(t["a"], t["b"], w)[0])(t["w"])

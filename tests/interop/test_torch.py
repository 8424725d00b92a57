"""dpt_ir.torch.function: gradcheck (float64), cotangents on any subset of the outputs,
reentrancy, gradient accumulation, zero-copy inputs and `run`'s ContractErrors."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from tests.interop.conftest import pair_inputs, pipeline_inputs, require

dpt = require("dpt_ir.torch")
import torch  # noqa: E402


def tensors(arrays: dict[str, np.ndarray], grad: tuple[str, ...] = ()) -> dict[str, torch.Tensor]:
    return {k: torch.tensor(v, requires_grad=k in grad) for k, v in arrays.items()}


def pair_reference(a: torch.Tensor, b: torch.Tensor, w: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """The pair graph in eager torch: the oracle."""
    return (w * torch.exp(a) * b).sum() + (a * a).sum(), a * torch.sin(b)


def test_gradcheck_two_inputs_two_outputs(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(0), grad=("a", "b"))
    assert torch.autograd.gradcheck(lambda a, b: f(a, b, t["w"])[:2], (t["a"], t["b"]))


def test_gradcheck_imaging_pipeline(pipeline_program: dp.Program) -> None:
    f = dpt.function(pipeline_program)
    t = tensors(pipeline_inputs(0), grad=("mu",))
    assert torch.autograd.gradcheck(lambda mu: f(mu, t["counts"], t["weights"], t["mask"]), (t["mu"],))


@pytest.mark.parametrize("used", [("loss",), ("c",), ("loss", "c")])
def test_cotangents_on_any_subset_of_outputs(pair_program: dp.Program, used: tuple[str, ...]) -> None:
    f = dpt.function(pair_program)
    arrays = pair_inputs(1)
    mine, ref = tensors(arrays, grad=("a", "b")), tensors(arrays, grad=("a", "b"))
    loss, c, above = f(**mine)
    assert above.dtype == torch.bool and not above.requires_grad
    rl, rc = pair_reference(**ref)
    weight = torch.linspace(-1.0, 2.0, c.numel(), dtype=torch.float64).reshape(c.shape)
    pick = {"loss": lambda lo, co: 3.0 * lo, "c": lambda lo, co: (weight * co).sum()}
    sum(pick[u](loss, c) for u in used).backward()
    sum(pick[u](rl, rc) for u in used).backward()
    torch.testing.assert_close(loss, rl, rtol=1e-12, atol=0)
    torch.testing.assert_close(c, rc, rtol=1e-12, atol=0)
    for k in ("a", "b"):
        torch.testing.assert_close(mine[k].grad, ref[k].grad, rtol=1e-12, atol=1e-14)


def test_reentrant_two_forwards_before_backward(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    x1, x2 = tensors(pair_inputs(2), grad=("a",)), tensors(pair_inputs(3), grad=("a",))
    r1, r2 = tensors(pair_inputs(2), grad=("a",)), tensors(pair_inputs(3), grad=("a",))
    l1, l2 = f(**x1)[0], f(**x2)[0]
    (l1 + 2 * l2).backward()
    (pair_reference(**r1)[0] + 2 * pair_reference(**r2)[0]).backward()
    torch.testing.assert_close(x1["a"].grad, r1["a"].grad, rtol=1e-12, atol=1e-14)
    torch.testing.assert_close(x2["a"].grad, r2["a"].grad, rtol=1e-12, atol=1e-14)


def test_gradients_accumulate_once_into_existing_grad(pair_program: dp.Program) -> None:
    """The Warp bridge's bug: aliasing torch's grad buffer doubled the gradient."""
    f = dpt.function(pair_program)
    arrays = pair_inputs(4)
    mine, ref = tensors(arrays, grad=("a",)), tensors(arrays, grad=("a",))
    mine["a"].grad = torch.ones_like(mine["a"])
    f(**mine)[0].backward()
    pair_reference(**ref)[0].backward()
    torch.testing.assert_close(mine["a"].grad, ref["a"].grad + 1.0, rtol=1e-12, atol=1e-14)


def test_positional_and_keyword_arguments_agree(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(5))
    by_position, by_keyword = f(t["a"], t["b"], t["w"]), f(w=t["w"], b=t["b"], a=t["a"])
    for p, k in zip(by_position, by_keyword, strict=True):
        assert torch.equal(p, k)
    assert f is dpt.function(pair_program)  # one registration per program


def test_cpu_inputs_reach_the_program_without_a_copy(pair_program: dp.Program, monkeypatch: Any) -> None:
    seen: dict[str, Any] = {}

    def spy(program: dp.Program, inputs: dict[str, Any]) -> dict[str, np.ndarray]:
        seen.update(inputs)
        return program.run(**inputs)

    monkeypatch.setattr(dpt, "forward", spy)
    t = tensors(pair_inputs(6))
    dpt.function(pair_program)(**t)
    for k, v in t.items():
        assert np.shares_memory(seen[k], v.numpy()), k


def test_cpu_inputs_keep_their_storage_resizable(pair_program: dp.Program) -> None:
    """Reading a tensor in place leaves its storage resizable: FSDP frees a gathered
    parameter by resizing its storage to zero (Tensor.numpy() would forbid that for good)."""
    t = tensors(pair_inputs(7), grad=("a",))
    loss = dpt.function(pair_program)(**t)[0]
    loss.backward()
    for k, v in t.items():
        v.detach().untyped_storage().resize_(0)  # raises "not resizable" after Tensor.numpy()
        assert v.untyped_storage().size() == 0, k


def run_error(program: dp.Program, **inputs: Any) -> str:
    with pytest.raises(dp.ContractError) as info:
        program.run(**inputs)
    return str(info.value)


def test_bad_tensors_raise_runs_contract_errors(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    good = pair_inputs(7)
    cases = {
        "shape": {**good, "a": np.zeros((4, 3))},
        "dtype": {**good, "b": good["b"].astype(np.float32)},
        "missing": {k: v for k, v in good.items() if k != "w"},
    }
    for what, arrays in cases.items():
        with pytest.raises(dp.ContractError) as info:
            f(**tensors(arrays))
        assert str(info.value) == run_error(pair_program, **arrays), what


def test_misuse_raises_contract_errors(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(8))
    with pytest.raises(dp.ContractError, match="'w'.*expected a torch.Tensor, found ndarray"):
        f(t["a"], t["b"], pair_inputs(8)["w"])
    with pytest.raises(dp.ContractError, match="'w' requires grad but is not in the program's wrt"):
        f(t["a"], t["b"], t["w"].clone().requires_grad_())
    with pytest.raises(dp.ContractError, match="expected dtype float64, found torch.bfloat16"):
        f(t["a"], t["b"].to(torch.bfloat16), t["w"])
    with pytest.raises(dp.ContractError, match="'a' given both by position and by keyword"):
        f(t["a"], a=t["a"], b=t["b"], w=t["w"])
    with pytest.raises(dp.ContractError, match="'a': expected an array on cpu, found one on meta"):
        f(t["a"].to("meta"), t["b"], t["w"])


def test_registered_op_gradcheck_in_eager(pair_program: dp.Program) -> None:
    """The custom op torch.compile uses (eager calls take an autograd.Function over the
    same implementations): gradients through it, called directly, pass gradcheck too."""
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(14), grad=("a", "b"))
    assert f.forward_op._qualname == f"dpt_ir::{f.name}"
    assert torch.autograd.gradcheck(lambda a, b: tuple(f.forward_op([a, b, t["w"]])[:2]), (t["a"], t["b"]))


def test_double_backward_of_the_loss_is_its_hessian_vector_product(pair_program: dp.Program) -> None:
    """A gradient of the loss taken with create_graph=True differentiates again through
    program.hvp: the second derivatives equal PyTorch's own on the reference model (float64),
    for the inputs and for the loss's cotangent; gradgradcheck passes."""
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(15), grad=("a", "b"))
    r = {k: v.detach().clone().requires_grad_(k in ("a", "b")) for k, v in t.items()}
    (ga, gb) = torch.autograd.grad(f(**t)[0], (t["a"], t["b"]), create_graph=True)
    (ra, rb) = torch.autograd.grad(pair_reference(**r)[0], (r["a"], r["b"]), create_graph=True)
    torch.testing.assert_close(ga, ra, rtol=1e-12, atol=1e-12)
    u = torch.linspace(-1.0, 1.0, ga.numel(), dtype=ga.dtype).reshape(ga.shape)
    got = torch.autograd.grad((ga * u).sum() + (gb * u).sum(), (t["a"], t["b"]))
    want = torch.autograd.grad((ra * u).sum() + (rb * u).sum(), (r["a"], r["b"]))
    for x, y in zip(got, want, strict=True):
        torch.testing.assert_close(x, y, rtol=1e-10, atol=1e-12)
    a, b, w = (t[k].detach().clone().requires_grad_(k != "w") for k in ("a", "b", "w"))
    assert torch.autograd.gradgradcheck(lambda a, b: f(a, b, w)[0], (a, b))


def test_other_second_derivatives_are_refused(pair_program: dp.Program) -> None:
    """A gradient of another output (a tape pass), taken with create_graph=True, is the right
    first-order value; differentiating it again is a ContractError naming what is missing (not
    torch's "does not require grad", nor a silent zero)."""
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(15), grad=("a",))
    (first,) = torch.autograd.grad(f(**t)[1].sum(), t["a"])
    (ga,) = torch.autograd.grad(f(**t)[1].sum(), t["a"], create_graph=True)
    torch.testing.assert_close(ga, first, rtol=0, atol=0)
    assert ga.requires_grad
    with pytest.raises(dp.ContractError, match=r"function\('interop_pair'\): .*of outputs other than the loss"):
        ga.sum().backward()


def test_third_order_is_refused(pair_program: dp.Program) -> None:
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(17), grad=("a",))
    (ga,) = torch.autograd.grad(f(**t)[0], t["a"], create_graph=True)
    (gga,) = torch.autograd.grad(ga.sum(), t["a"], create_graph=True)
    with pytest.raises(dp.ContractError, match="of third order"):
        gga.sum().backward()


def test_backward_twice_with_retained_graph_accumulates_fresh_gradients(pair_program: dp.Program) -> None:
    """Kept loss gradients are scaled into a fresh tensor each backward, never handed out twice."""
    f = dpt.function(pair_program)
    t = tensors(pair_inputs(16), grad=("a",))
    loss = f(**t)[0]
    loss.backward(retain_graph=True)
    first = t["a"].grad.clone()
    loss.backward()
    torch.testing.assert_close(t["a"].grad, 2.0 * first, rtol=0, atol=0)

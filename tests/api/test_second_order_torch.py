"""Forward mode and second order against ``torch.func`` (float64): the interpreter's
``J v`` (`dp.interpret_jvp`) equals ``torch.func.jvp`` and its ``H v`` (`dp.interpret_hvp`)
equals forward-over-reverse ``torch.func.jvp(torch.func.grad(f))``, on every op case whose
graph is one op that PyTorch has under the same name (table-driven), and on the five
benchmark cases (`benchmarks.peers_torch.LOSSES`, at a small shape). Skipped without torch."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks.cases import CASES as BENCH
from tests.api.second_order_cases import LOSS, WEIGHT, Problem, problems, rel_error

torch = pytest.importorskip("torch")
from torch.func import grad, jvp  # noqa: E402

SPECIAL = {"softplus": lambda: torch.nn.functional.softplus}


def _torch_op(p: Problem) -> Callable[..., Any] | None:
    """The torch function of a case that is one attribute-free op on its inputs, or None."""
    nodes = [n for n in p.case.build("float64").nodes]
    if len(nodes) != 1 or nodes[0].attrs or p.case.op not in {n.op for n in nodes}:
        return None
    if p.case.op in SPECIAL:
        return SPECIAL[p.case.op]()
    return getattr(torch, p.case.op, None)


TORCH_CASES = [(p, f) for p in problems() if (f := _torch_op(p)) is not None]


def _torch_products(loss: Callable[..., Any], wrt: list[str], inputs: dict[str, np.ndarray],
                    v: dict[str, np.ndarray]) -> tuple[Any, list[np.ndarray]]:  # fmt: skip
    """``J v`` of ``loss`` (a scalar function of the wrt tensors) and ``H v`` per wrt input."""
    primals = tuple(torch.from_numpy(np.ascontiguousarray(inputs[w], dtype=np.float64)) for w in wrt)
    tangents = tuple(torch.from_numpy(np.ascontiguousarray(v[w], dtype=np.float64)) for w in wrt)
    _, jv = jvp(loss, primals, tangents)
    _, hv = jvp(grad(loss, argnums=tuple(range(len(wrt)))), primals, tangents)
    # A product torch knows to be zero comes back as a ZeroTensor, which has no .numpy()
    return jv.numpy(), [torch.zeros_like(h).add_(h).numpy() for h in hv]


@pytest.mark.parametrize(("p", "fn"), TORCH_CASES, ids=[p.case.name for p, _ in TORCH_CASES])
def test_op_case_equals_torch_func(p: Problem, fn: Callable[..., Any]) -> None:
    names = [i.name for i in p.case.build("float64").inputs]
    wrt = list(p.case.wrt)
    held = {k: torch.from_numpy(np.ascontiguousarray(p.inputs[k])) for k in names if k not in wrt}
    weight = torch.from_numpy(p.inputs[WEIGHT])

    def loss(*xs: Any) -> Any:
        args = {**held, **dict(zip(wrt, xs, strict=True))}
        return torch.sum(fn(*(args[k] for k in names)) * weight)

    want_jv, want_hv = _torch_products(loss, wrt, p.inputs, p.tangents)
    _, tangents = dp.interpret_jvp(p.graph, p.tangents, **p.inputs)
    _, _, hvps = dp.interpret_hvp(p.graph, wrt, p.tangents, loss=LOSS, **p.inputs)
    assert rel_error(tangents[LOSS], want_jv) <= 1e-10
    for w, h in zip(wrt, want_hv, strict=True):
        assert rel_error(hvps[w], h) <= 1e-10, f"H v of {w}"


def test_the_table_has_torch_cases() -> None:
    assert len({p.case.op for p, _ in TORCH_CASES}) >= 20


@pytest.mark.parametrize("name", list(BENCH))
def test_benchmark_case_equals_torch_func(name: str) -> None:
    from benchmarks import peers_torch

    case, shape, rng = BENCH[name], (6, 8), np.random.default_rng(4)
    graph, inputs = case.build(shape), case.inputs(shape, rng)
    v = {case.wrt: rng.standard_normal(shape).astype(np.float32)}
    held = {k: peers_torch._tensor(k, a, "cpu") for k, a in inputs.items() if k != case.wrt}
    held = {k: t.double() if t.is_floating_point() else t for k, t in held.items()}

    def loss(x: Any) -> Any:
        return peers_torch.LOSSES[name](**{case.wrt: x}, **held)

    want_jv, (want_hv,) = _torch_products(loss, [case.wrt], inputs, v)
    _, tangents = dp.interpret_jvp(graph, v, **inputs)
    _, _, hvps = dp.interpret_hvp(graph, [case.wrt], v, **inputs)
    # dpt_ir in the graphs' float32, torch in float64
    assert rel_error(tangents["loss"], want_jv) <= 1e-4
    assert rel_error(hvps[case.wrt], want_hv) <= 1e-4

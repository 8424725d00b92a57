"""Every op at special values (±0, ±inf, NaN, the dtype's extremes and overflow thresholds;
`op_cases.SPECIAL_CASES`), interpreted: values equal NumPy's, gradients equal PyTorch's
autograd (the limit conventions it and JAX share: e.g. pow's gradient at 0 ** 0, atan2's at
the origin, a NaN slice of amax), or a documented dpt_ir rule where PyTorch and JAX
disagree or dpt_ir chose otherwise (docs/design-decisions.md, "Special values"). Never a
silently different finite number. The compiled side is `tests/backend/test_compiled_ops.py`.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from op_cases import NO_SPECIAL_VALUES, OUTPUT, SPECIAL_CASES, OpCase, special_mismatch, special_seed

import dpt_ir as dp

PARAMS = [pytest.param(c, d, id=f"{c.name}-{d}") for c in SPECIAL_CASES for d in c.dtypes]
GRAD_PARAMS = [p for p in PARAMS if p.values[0].wrt]

try:  # the oracle of the cases marked ``torch:<name>`` (the [torch] or [peers] extra)
    import torch
except ImportError:
    torch = None


def torch_function(name: str) -> Callable[..., Any]:
    """The PyTorch function of the cases' inputs (in name order) for oracle ``torch:<name>``."""
    assert torch is not None
    special = {
        "softplus": torch.nn.functional.softplus,
        "clamp": lambda a: torch.clamp(a, -0.5, 0.7),
    }
    return special[name] if name in special else getattr(torch, name)


def _sum_to(g: np.ndarray, shape: tuple[int, ...]) -> np.ndarray:
    """``g`` summed over the axes broadcasting added to ``shape``."""
    lead = g.ndim - len(shape)
    g = g.sum(axis=tuple(range(lead))) if lead else g
    axes = tuple(k for k, n in enumerate(shape) if n == 1 and g.shape[k] != 1)
    return g.sum(axis=axes, keepdims=True) if axes else g


def _extremum_rule(take_a: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> Callable[..., dict[str, np.ndarray]]:
    """maximum/minimum: the gradient goes where the forward takes its value from: a on
    ties and where a is NaN, else b."""

    def rule(gy: np.ndarray, a: np.ndarray, b: np.ndarray) -> dict[str, np.ndarray]:
        takes_a = take_a(a, b) | np.isnan(a)
        zero = np.zeros_like(gy)
        return {"a": _sum_to(np.where(takes_a, gy, zero), a.shape), "b": _sum_to(np.where(takes_a, zero, gy), b.shape)}

    return rule


def _reduction_rule(arg: Callable[..., np.ndarray]) -> Callable[..., dict[str, np.ndarray]]:
    """max/min over axis 1: the cotangent to the first extremum; a NaN result's whole row
    gets NaN (PyTorch's amax/amin and JAX's max agree)."""

    def rule(gy: np.ndarray, a: np.ndarray) -> dict[str, np.ndarray]:
        out = np.zeros_like(a)
        out[np.arange(a.shape[0]), arg(a, axis=1)] = gy
        out[np.isnan(a).any(axis=1)] = np.nan
        return {"a": out}

    return rule


def _softmax_rule(gy: np.ndarray, a: np.ndarray) -> dict[str, np.ndarray]:
    """logsumexp over axis 1: the softmax exp(a - m) / sum(exp(a - m)), m the row maximum (0
    where it is not finite), in float64, as JAX's gradient. PyTorch's exp(a - logsumexp(a))
    gives 1 (not 1/2) to each of two maxima at the dtype's maximum, where logsumexp rounds."""
    a64 = a.astype(np.float64)
    top = np.max(a64, axis=1, keepdims=True)
    with np.errstate(invalid="ignore"):
        e = np.exp(a64 - np.where(np.isfinite(top), top, 0.0))
        softmax = e / e.sum(axis=1, keepdims=True)
    return {"a": (gy.astype(np.float64)[:, None] * softmax).astype(a.dtype)}


RULES: dict[str, Callable[..., dict[str, np.ndarray]]] = {
    # abs: sign(a) times the cotangent, NaN at NaN (PyTorch gives 0 there, JAX -1).
    "abs": lambda gy, a: {"a": gy * np.sign(a)},
    # relu: 0 at NaN, as JAX (PyTorch passes the cotangent): the NaN is visible in the value.
    "relu": lambda gy, a: {"a": np.where(a > 0, gy, np.zeros_like(gy))},
    "maximum": _extremum_rule(np.greater_equal),
    "minimum": _extremum_rule(np.less_equal),
    "max": _reduction_rule(np.argmax),
    "min": _reduction_rule(np.argmin),
    "logsumexp": _softmax_rule,
}


def torch_gradients(
    fn: Callable[..., Any], inputs: dict[str, np.ndarray], wrt: tuple[str, ...], seed: np.ndarray
) -> dict[str, np.ndarray]:
    ts = {k: torch.tensor(v, requires_grad=k in wrt) for k, v in inputs.items()}
    y = fn(*ts.values())
    y.backward(torch.tensor(seed))
    return {k: ts[k].grad.numpy() for k in wrt}


def expected_gradients(case: OpCase, dtype: str, seed: np.ndarray) -> dict[str, np.ndarray]:
    """The oracle's gradients of ``sum(seed * out)`` at the case's special inputs."""
    inputs = case.inputs(np.random.default_rng(0), dtype)
    kind, _, name = case.grad_oracle.partition(":")
    if kind == "torch":
        if torch is None:
            pytest.skip("PyTorch, the oracle of this case, is not installed (pip install -e '.[torch]')")
        return torch_gradients(torch_function(name), inputs, case.wrt, seed)
    if kind == "rule":
        return RULES[name](seed, *inputs.values())
    assert kind == "linear", case.grad_oracle
    zeros = {k: np.zeros_like(v) if v.dtype.kind == "f" else v for k, v in inputs.items()}
    return dp.interpret_grad(case.build(dtype), list(case.wrt), seed={OUTPUT: seed}, **zeros)


def test_every_op_with_float_values_has_special_cases() -> None:
    covered = {c.op for c in SPECIAL_CASES}
    missing = sorted({op.name for op in dp.all_ops()} - covered - set(NO_SPECIAL_VALUES))
    assert not missing, f"ops without special-value cases in tests/op_cases.py: {missing}"
    assert all(c.grad_oracle for c in SPECIAL_CASES if dp.get_op(c.op).differentiable and c.wrt)


@pytest.mark.parametrize(("case", "dtype"), PARAMS)
def test_special_values_equal_numpy(case: OpCase, dtype: str) -> None:
    graph = case.build(dtype)
    inputs = case.inputs(np.random.default_rng(0), dtype)
    out = dp.interpret(graph, **inputs)[OUTPUT]
    expected = case.expect(**inputs)
    # A float64 reference of a float32 result (a literal) is compared once rounded.
    if expected.dtype.kind == out.dtype.kind == "f":
        assert out.dtype == np.dtype(graph.types[graph.output_value(OUTPUT)].dtype)
        expected = expected.astype(out.dtype)
    msg = special_mismatch(out, expected, f"{case.name} ({dtype}) value")
    assert not msg, msg


@pytest.mark.parametrize(("case", "dtype"), GRAD_PARAMS)
def test_special_value_gradients_equal_the_oracle(case: OpCase, dtype: str) -> None:
    seed = special_seed(case, dtype)
    inputs = case.inputs(np.random.default_rng(0), dtype)
    grads = dp.interpret_grad(case.build(dtype), list(case.wrt), seed=seed, **inputs)
    expected = expected_gradients(case, dtype, seed[OUTPUT])
    problems = [special_mismatch(grads[w], expected[w], f"d/d{w} ({case.grad_oracle})") for w in case.wrt]
    problems = [p for p in problems if p]
    assert not problems, f"{case.name} ({dtype}):\n" + "\n".join(problems)

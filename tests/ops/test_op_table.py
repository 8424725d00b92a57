"""The whole op table against the NumPy interpreter: values against independent NumPy
references, gradients against central finite differences, float32 against float64,
documented tie and bound behaviour, and NumPy 2 dtype promotion."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import networkx as nx
import numpy as np
import pytest
from op_cases import CASES, OUTPUT, OpCase

import dpt_ir as dp

GRAD_CASES = [c for c in CASES if c.wrt]
F32_CASES = [c for c in CASES if "float32" in c.dtypes]
FD_REL_TOL = 1e-6
F32_REL_TOL = 1e-5


def _ids(cases: list[OpCase]) -> list[str]:
    return [c.name for c in cases]


def rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / max(||actual||, ||expected||), 0 when both are zero."""
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    scale = max(np.linalg.norm(a), np.linalg.norm(e))
    return float(np.linalg.norm(a - e) / scale) if scale > 0 else 0.0


def random_seed(graph: dp.Graph, rng: np.random.Generator) -> np.ndarray:
    """A random cotangent for the output, so every output element is checked."""
    t = graph.types[graph.output_value(OUTPUT)]
    return rng.standard_normal(t.shape).astype(t.dtype)


def fd_gradient(
    graph: dp.Graph, inputs: Mapping[str, np.ndarray], name: str, seed: np.ndarray, step: float | None
) -> np.ndarray:
    """Central finite differences of sum(seed * out) with respect to input ``name``.

    The step is ``step`` or 1e-6 * max(1, |x|); the divisor is the difference of the
    perturbed values as actually stored in the input's dtype."""
    seed64 = seed.astype(np.float64)

    def loss(x: np.ndarray) -> float:
        out = dp.interpret(graph, **{**inputs, name: x})[OUTPUT]
        return float(np.sum(seed64 * out.astype(np.float64)))

    x = inputs[name]
    grad = np.zeros(x.shape)
    for idx in np.ndindex(x.shape):
        h = step if step is not None else 1e-6 * max(1.0, abs(float(x[idx])))
        xp, xm = x.copy(), x.copy()
        xp[idx] += h
        xm[idx] -= h
        grad[idx] = (loss(xp) - loss(xm)) / (float(xp[idx]) - float(xm[idx]))
    return grad


# -- the table is covered ---------------------------------------------------------------
def test_every_registered_op_has_a_case() -> None:
    missing = sorted({op.name for op in dp.all_ops()} - {c.op for c in CASES})
    assert not missing, f"ops without an entry in tests/op_cases.py: {missing}"


def test_case_names_are_unique() -> None:
    names = [c.name for c in CASES]
    assert len(names) == len(set(names))


@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_case_exercises_its_op(case: OpCase) -> None:
    for dtype in case.dtypes:
        graph = case.build(dtype)
        assert case.op in {n.op for n in graph.nodes}, f"{case.name}: no {case.op!r} node in {dtype} graph"
        assert set(case.inputs(np.random.default_rng(0), dtype)) == set(graph.input_map)


def _differentiated_inputs(case: OpCase) -> set[int]:
    """Input positions of ``case.op`` nodes that depend on a wrt input, found in the graph."""
    graph = case.build("float64")
    reach = set(case.wrt).union(*(nx.descendants(graph.to_networkx(), w) for w in case.wrt))
    return {
        i
        for node in graph.nodes
        if node.op == case.op
        for i, value in enumerate(node.inputs)
        if value in reach and graph.types[value].dtype in ("float32", "float64")
    }


def test_gradient_cases_cover_every_differentiable_input() -> None:
    """Each differentiable op has gradient cases, and together they differentiate every
    input position that has a derivative formula."""
    problems = []
    for op in dp.all_ops():
        if not op.differentiable:
            continue
        cases = [c for c in GRAD_CASES if c.op == op.name]
        covered = set().union(*(_differentiated_inputs(c) for c in cases))
        arities = {len(n.inputs) for c in cases for n in c.build("float64").nodes if n.op == op.name}
        needed = set().union(*(op.differentiable_inputs(k) for k in arities)) if arities else {0}
        if not needed <= covered:
            problems.append(f"{op.name}: inputs {sorted(needed - covered)} never differentiated")
    assert not problems, problems


# -- values -----------------------------------------------------------------------------
@pytest.mark.parametrize("case", CASES, ids=_ids(CASES))
def test_values_match_numpy(case: OpCase) -> None:
    graph = case.build("float64")
    inputs = case.inputs(np.random.default_rng(1), "float64")
    out = dp.interpret(graph, **inputs)[OUTPUT]
    expected = np.asarray(case.expect(**inputs))
    assert out.dtype == np.dtype(graph.types[graph.output_value(OUTPUT)].dtype)
    assert out.shape == expected.shape
    if out.dtype.kind == "f":
        np.testing.assert_allclose(out, expected, rtol=1e-12, atol=1e-12)
    else:
        np.testing.assert_array_equal(out, expected)


# -- gradients --------------------------------------------------------------------------
@pytest.mark.parametrize("case", GRAD_CASES, ids=_ids(GRAD_CASES))
def test_gradients_match_finite_differences(case: OpCase) -> None:
    rng = np.random.default_rng(2)
    graph = case.build("float64")
    inputs = case.inputs(rng, "float64")
    seed = random_seed(graph, rng)
    grads = dp.interpret_grad(graph, list(case.wrt), seed={OUTPUT: seed}, **inputs)
    for name in case.wrt:
        assert grads[name].shape == inputs[name].shape
        assert grads[name].dtype == inputs[name].dtype
        expected = fd_gradient(graph, inputs, name, seed, case.fd_step)
        err = rel_error(grads[name], expected)
        assert err <= FD_REL_TOL, f"{case.name}: d/d{name} relative error {err:.2e}"


# -- float32 ----------------------------------------------------------------------------
def _close(a32: np.ndarray, a64: np.ndarray, what: str) -> None:
    if a64.dtype.kind != "f":
        np.testing.assert_array_equal(a32, a64, err_msg=what)
        return
    assert np.all(np.isfinite(a32)), f"{what}: non-finite float32 values"
    err = rel_error(a32, a64)
    assert err <= F32_REL_TOL, f"{what}: float32 relative error {err:.2e}"


@pytest.mark.parametrize("case", F32_CASES, ids=_ids(F32_CASES))
def test_float32_close_to_float64(case: OpCase) -> None:
    rng = np.random.default_rng(3)
    g32, g64 = case.build("float32"), case.build("float64")
    x32 = case.inputs(rng, "float32")
    x64 = {k: v.astype(g64.input_map[k].type.dtype) for k, v in x32.items()}
    _close(dp.interpret(g32, **x32)[OUTPUT], dp.interpret(g64, **x64)[OUTPUT], f"{case.name} value")
    if not case.wrt:
        return
    seed32 = random_seed(g32, rng)
    seed64 = seed32.astype(g64.types[g64.output_value(OUTPUT)].dtype)
    grads32 = dp.interpret_grad(g32, list(case.wrt), seed={OUTPUT: seed32}, **x32)
    grads64 = dp.interpret_grad(g64, list(case.wrt), seed={OUTPUT: seed64}, **x64)
    for name in case.wrt:
        assert grads32[name].dtype == x32[name].dtype
        _close(grads32[name], grads64[name], f"{case.name} d/d{name}")


# -- documented behaviour at ties and bounds -------------------------------------------------
def _grad_of(fn: Callable[..., dp.Tensor], *arrays: np.ndarray, wrt: tuple[str, ...] = ("a",)) -> dict[str, np.ndarray]:
    """Gradient of sum(fn(a, b, ...)) for float64 inputs a, b, ..."""
    g = dp.GraphBuilder("t")
    names = "abc"[: len(arrays)]
    xs = [g.input(n, np.shape(x), "float64") for n, x in zip(names, arrays, strict=True)]
    g.output("loss", dp.sum(fn(*xs)))
    inputs = {n: np.asarray(x, np.float64) for n, x in zip(names, arrays, strict=True)}
    return dp.interpret_grad(g.build(), list(wrt), **inputs)


@pytest.mark.parametrize(
    ("reduce", "x", "axis", "expected"),
    [
        (dp.max, [[1.0, 3.0, 3.0], [2.0, 2.0, 0.0]], 1, [[0, 1, 0], [1, 0, 0]]),
        (dp.min, [[1.0, 1.0, 3.0], [0.0, 2.0, 0.0]], 1, [[1, 0, 0], [1, 0, 0]]),
        (dp.max, [[2.0, 1.0], [2.0, 2.0]], None, [[1, 0], [0, 0]]),
        (dp.min, [[1.0, 0.0], [0.0, 0.0]], 0, [[0, 1], [1, 0]]),
    ],
)
def test_reduction_ties_send_gradient_to_first_extremum(
    reduce: Callable[..., dp.Tensor], x: list[list[float]], axis: Any, expected: list[list[int]]
) -> None:
    grad = _grad_of(lambda a: reduce(a, axis=axis), np.array(x))["a"]
    np.testing.assert_array_equal(grad, expected)


def test_multi_axis_reduction_ties_use_row_major_order() -> None:
    grad = _grad_of(lambda a: dp.max(a, axis=(0, 2)), np.zeros((2, 3, 4)))["a"]
    expected = np.zeros((2, 3, 4))
    expected[0, :, 0] = 1.0
    np.testing.assert_array_equal(grad, expected)


@pytest.mark.parametrize("fn", [dp.maximum, dp.minimum])
def test_elementwise_extremum_ties_go_to_first_operand(fn: Callable[..., dp.Tensor]) -> None:
    a = np.array([1.0, 2.0, 3.0])
    grads = _grad_of(fn, a, a.copy(), wrt=("a", "b"))
    np.testing.assert_array_equal(grads["a"], [1, 1, 1])
    np.testing.assert_array_equal(grads["b"], [0, 0, 0])
    scalar_tie = _grad_of(lambda x: fn(x, 2.0), a)["a"]
    np.testing.assert_array_equal(scalar_tie, [fn is dp.minimum, 1, fn is dp.maximum])


def test_clamp_gradient_passes_at_the_bounds() -> None:
    x = np.array([-0.5, 0.7, -0.6, 0.8, 0.1])
    np.testing.assert_array_equal(_grad_of(lambda a: dp.clamp(a, -0.5, 0.7), x)["a"], [1, 1, 0, 0, 1])
    np.testing.assert_array_equal(_grad_of(lambda a: dp.clamp(a, lo=-0.5), x)["a"], [1, 1, 0, 1, 1])
    np.testing.assert_array_equal(_grad_of(lambda a: dp.clamp(a, hi=0.7), x)["a"], [1, 1, 1, 0, 1])


def test_relu_and_abs_have_zero_gradient_at_zero() -> None:
    x = np.array([-1.0, 0.0, 1.0])
    np.testing.assert_array_equal(_grad_of(dp.relu, x)["a"], [0, 0, 1])
    np.testing.assert_array_equal(_grad_of(dp.abs, x)["a"], [-1, 0, 1])


# -- dtype promotion (NumPy 2, weak Python scalars) --------------------------------------------
def _ops(graph: dp.Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def test_float32_times_python_float_stays_float32() -> None:
    g = dp.GraphBuilder("t")
    x = g.input("x", (3,), "float32")
    y = x * 2.0
    assert y.dtype == "float32"
    g.output("y", y)
    graph = g.build()
    assert "cast" not in _ops(graph)
    xv = np.array([1.0, 2.0, 3.0], np.float32)
    out = dp.interpret(graph, x=xv)["y"]
    assert out.dtype == (xv * 2.0).dtype == np.float32


def test_int32_plus_float32_promotes_to_float64_with_casts() -> None:
    g = dp.GraphBuilder("t")
    i = g.input("i", (3,), "int32", requires_grad=False)
    f = g.input("f", (3,), "float32")
    y = i + f
    assert y.dtype == "float64"
    g.output("y", dp.sum(y))
    graph = g.build()
    casts = [n for n in graph.nodes if n.op == "cast"]
    assert sorted(graph.types[n.inputs[0]].dtype for n in casts) == ["float32", "int32"]
    assert all(n.type.dtype == "float64" for n in casts)
    iv, fv = np.array([1, 2, 3], np.int32), np.array([0.5, 0.25, 0.1], np.float32)
    np.testing.assert_array_equal(dp.interpret(graph, i=iv, f=fv)["y"], np.sum(iv + fv))
    grad = dp.interpret_grad(graph, ["f"], i=iv, f=fv)["f"]
    assert grad.dtype == np.float32
    np.testing.assert_array_equal(grad, [1, 1, 1])


def test_int32_true_divide_gives_float64() -> None:
    g = dp.GraphBuilder("t")
    a = g.input("a", (3,), "int32", requires_grad=False)
    b = g.input("b", (3,), "int32", requires_grad=False)
    y = a / b
    assert y.dtype == "float64"
    g.output("y", y)
    av, bv = np.array([1, 7, -3], np.int32), np.array([2, 2, 4], np.int32)
    out = dp.interpret(g.build(), a=av, b=bv)["y"]
    assert out.dtype == (av / bv).dtype == np.float64
    np.testing.assert_array_equal(out, av / bv)


def test_bool_plus_python_int_gives_int32() -> None:
    g = dp.GraphBuilder("t")
    m = g.input("m", (3,), "bool", requires_grad=False)
    y = m + 1
    assert y.dtype == "int32"
    g.output("y", y)
    out = dp.interpret(g.build(), m=np.array([True, False, True]))["y"]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, [2, 1, 2])


@pytest.mark.parametrize(
    ("dtype", "scalar", "expected"),
    [("int32", 2.5, "float64"), ("uint8", 1, "uint8"), ("float32", 3, "float32"), ("int32", True, "int32")],
)
def test_weak_scalars_follow_numpy(dtype: str, scalar: object, expected: str) -> None:
    g = dp.GraphBuilder("t")
    x = g.input("x", (2,), dtype, requires_grad=False)
    assert (x * scalar).dtype == expected == (np.ones(2, dtype) * scalar).dtype.name


def test_float32_with_float64_tensor_promotes() -> None:
    g = dp.GraphBuilder("t")
    a = g.input("a", (2,), "float32")
    b = g.input("b", (2,), "float64")
    assert (a - b).dtype == "float64"


def test_exp_of_int32_is_a_contract_error() -> None:
    g = dp.GraphBuilder("t")
    x = g.input("x", (3,), "int32", requires_grad=False)
    with pytest.raises(dp.ContractError, match=r"exp.*int32"):
        dp.exp(x)

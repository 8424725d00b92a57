"""`reciprocal`: when it rewrites a division (a divisor broadcast from fewer elements,
directly or through views) and when it does not (same shape, same element count through a
view, the option off), and that the rewritten graph keeps the division's IEEE special
values under the interpreter and the compiled kernels."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.passes import dce, reciprocal
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

ROWS, COLS = 6, 5


def _ops(graph: dp.Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def _divide(b_shape: tuple[int, ...], via_view: bool = False, dtype: str = "float64") -> dp.Graph:
    g = dp.GraphBuilder("divide")
    a = g.input("a", (ROWS, COLS), dtype)
    b = g.input("b", b_shape, dtype)
    divisor = dp.transpose(dp.broadcast_to(dp.reshape(b, (1, ROWS)), (COLS, ROWS))) if via_view else b
    g.output("y", a / divisor)
    return g.build()


def test_a_per_row_divisor_becomes_a_reciprocal_at_its_own_shape() -> None:
    out = reciprocal.run(_divide((ROWS, 1)), CompileOptions())
    rcp = next(n for n in out.nodes if n.op == "reciprocal")
    assert rcp.inputs == ("b",) and rcp.type.shape == (ROWS, 1)
    product = out.node_map[out.output_value("y")]
    assert product.op == "mul" and product.inputs == ("a", rcp.name) and product.type.shape == (ROWS, COLS)


def test_the_reciprocal_moves_below_the_views() -> None:
    out = reciprocal.run(_divide((ROWS,), via_view=True), CompileOptions())
    product = out.node_map[out.output_value("y")]
    assert product.op == "mul"
    chain, name = [], product.inputs[1]
    while out.node_map[name].op != "reciprocal":
        chain.append(out.node_map[name].op)
        name = out.node_map[name].inputs[0]
    assert chain == ["transpose", "broadcast_to"]  # the reshape's result is small already
    source = out.node_map[name].inputs[0]
    assert out.node_map[source].op == "reshape" and out.node_map[name].type.shape == (1, ROWS)


def _transposed() -> dp.Graph:
    g = dp.GraphBuilder("transposed")
    a = g.input("a", (ROWS, COLS))
    b = g.input("b", (COLS, ROWS))
    g.output("y", a / dp.transpose(b))
    return g.build()


@pytest.mark.parametrize("graph", [_divide((ROWS, COLS)), _transposed()], ids=["same-shape", "transposed"])
def test_a_divisor_with_as_many_elements_stays_a_division(graph: dp.Graph) -> None:
    assert reciprocal.run(graph, CompileOptions()) is graph


def test_option_off_leaves_the_divisions() -> None:
    graph = _divide((ROWS, 1))
    assert reciprocal.run(graph, CompileOptions(reciprocal=False)) is graph
    assert "div" in _ops(run_pipeline(graph, CompileOptions(reciprocal=False)).graph)
    assert "div" not in _ops(run_pipeline(graph, CompileOptions()).graph)


def _special_inputs(dtype: str) -> dict[str, np.ndarray]:
    a = np.tile(np.array([0.0, 1.0, -2.0, np.inf, np.nan], dtype), (ROWS, 1))
    b = np.array([[0.0], [-0.0], [np.inf], [-np.inf], [np.nan], [4.0]], dtype)
    return {"a": a, "b": b}


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_special_values_keep_the_divisions_pattern(dtype: str) -> None:
    graph = _divide((ROWS, 1), dtype=dtype)
    inputs = _special_inputs(dtype)
    with np.errstate(all="ignore"):
        expected = inputs["a"] / inputs["b"]
        rewritten = dce.run(reciprocal.run(graph, CompileOptions()))
        assert "div" not in _ops(rewritten)
        interpreted = dp.interpret(rewritten, **inputs)["y"]
    compiled = dp.compile(graph, checks=False).run(**inputs)["y"]
    for what, got in (("interpreter", interpreted), ("compiled", compiled)):
        np.testing.assert_array_equal(np.isnan(got), np.isnan(expected), err_msg=what)
        number = ~np.isnan(expected)
        np.testing.assert_array_equal(got[number], expected[number], err_msg=what)
        np.testing.assert_array_equal(np.signbit(got[number]), np.signbit(expected[number]), err_msg=what)


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_finite_values_are_within_about_an_ulp(dtype: str) -> None:
    rng = np.random.default_rng(0)
    inputs = {
        "a": rng.normal(0.0, 1.0, (ROWS, COLS)).astype(dtype),
        "b": rng.uniform(0.1, 10.0, (ROWS, 1)).astype(dtype),
    }
    expected = inputs["a"] / inputs["b"]
    rewritten = reciprocal.run(_divide((ROWS, 1), dtype=dtype), CompileOptions())
    for got in (dp.interpret(rewritten, **inputs)["y"], dp.compile(_divide((ROWS, 1), dtype=dtype)).run(**inputs)["y"]):
        np.testing.assert_allclose(got, expected, rtol=2 * np.finfo(dtype).eps, atol=0)

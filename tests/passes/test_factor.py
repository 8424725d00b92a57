"""`factor`: a sum or mean of a product pulls out the factors constant along its axes (keepdims
on and off, factors nested in the product), leaves it where it must (a shared product, no
varying factor, an integer sum, the option off), keeps the values, and makes the tangent of a
softmax cross-entropy accumulate in the forward's pass over each row."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.api.second_order import derived_graph
from dpt_ir.driver.second_order import PIPELINE
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes import dce, factor
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

ROWS, COLS = 6, 5
RNG = np.random.default_rng(0)


def _graph(keepdims: bool, share: bool = False, dtype: str = "float64") -> dp.Graph:
    """``sum(a * (b * c), axis=1)`` with ``c`` per row: ``(ROWS, 1)``."""
    g = dp.GraphBuilder("scaled_sum")
    a = g.input("a", (ROWS, COLS), dtype)
    b = g.input("b", (ROWS, COLS), dtype)
    c = g.input("c", (ROWS, 1), dtype)
    product = a * (b * c)
    g.output("y", dp.sum(product, axis=1, keepdims=keepdims))
    if share:
        g.output("p", product)
    return g.build()


def _inputs(graph: dp.Graph) -> dict[str, np.ndarray]:
    types = {i.name: graph.types[i.name] for i in graph.inputs}
    return {n: RNG.uniform(0.5, 1.5, t.shape).astype(t.dtype) for n, t in types.items()}


@pytest.mark.parametrize("keepdims", [True, False])
def test_the_per_row_factor_leaves_the_sum_and_scales_its_result(keepdims: bool) -> None:
    graph = _graph(keepdims)
    out = dce.run(factor.run(graph, CompileOptions()))
    scaled = out.node_map[out.output_value("y")]
    assert scaled.op == "mul"
    total = out.node_map[scaled.inputs[0]]
    assert total.op == "sum" and out.node_map[total.inputs[0]].inputs == ("a", "b")
    assert "c" not in out.node_map[total.inputs[0]].inputs
    scale = scaled.inputs[1]
    assert scale == "c" if keepdims else (out.node_map[scale].op == "reshape" and out.types[scale].shape == (ROWS,))
    inputs = _inputs(graph)
    np.testing.assert_allclose(dp.interpret(out, **inputs)["y"], dp.interpret(graph, **inputs)["y"], rtol=1e-14)


def test_a_mean_is_factored_too() -> None:
    g = dp.GraphBuilder("scaled_mean")
    a = g.input("a", (ROWS, COLS), "float64")
    c = g.input("c", (), "float64")
    g.output("y", dp.mean(c * a, axis=0))
    graph = g.build()
    out = dce.run(factor.run(graph, CompileOptions()))
    assert [n.op for n in out.nodes] == ["mean", "reshape", "mul"]
    inputs = _inputs(graph)
    np.testing.assert_allclose(dp.interpret(out, **inputs)["y"], dp.interpret(graph, **inputs)["y"], rtol=1e-14)


def test_what_stays() -> None:
    shared = _graph(True, share=True)
    assert factor.run(shared, CompileOptions()) is shared  # the product is computed anyway
    integer = _graph(True, dtype="int32")
    assert factor.run(integer, CompileOptions()) is integer
    off = _graph(True)
    assert factor.run(off, CompileOptions(factor=False)) is off
    g = dp.GraphBuilder("all_constant")
    c = g.input("c", (ROWS, 1), "float64")
    d = g.input("d", (ROWS, 1), "float64")
    g.output("y", dp.sum(c * d, axis=1))
    constant = g.build()
    assert factor.run(constant, CompileOptions()) is constant  # nothing varies along the axis
    g = dp.GraphBuilder("fewer_terms")
    a = g.input("a", (1, COLS), "float64")
    c = g.input("c", (ROWS, 1), "float64")
    g.output("y", dp.sum(a * c, axis=1))
    fewer = g.build()
    # a alone spans fewer elements than the sum reads: c's count would change; nothing is emitted
    assert factor.run(fewer, CompileOptions()) is fewer


def test_the_softmax_tangent_sums_in_the_forward_pass_over_the_row() -> None:
    g = dp.GraphBuilder("xent")
    z = g.input("z", (ROWS, COLS), "float32")
    t = g.input("t", (ROWS, COLS), "float32", requires_grad=False)
    g.output("loss", dp.mean(dp.logsumexp(z, axis=1) - dp.sum(z * t, axis=1)))
    jvp = derived_graph(g.build(), ("z",), "loss", "jvp", None, expand=True)
    without = tuple(p for p in PIPELINE if p != "factor")
    rows = {name: plan_of(run_pipeline(jvp, CompileOptions(), pipeline).graph).rows for name, pipeline in
            (("with", PIPELINE), ("without", without))}  # fmt: skip
    # max, then exp(z - m) and its sum, then (without) the tangent's sum against 1 / sum: row passes
    assert [len(r.groups) for r in rows["without"]] == [3] and [len(r.groups) for r in rows["with"]] == [2]

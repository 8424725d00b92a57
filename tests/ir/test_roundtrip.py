"""Property tests: random valid graphs survive the textual IR and JSON exactly, joint
forward/backward graphs too, and the strategies give graphs that are well-behaved (finite
values and gradients; smooth float64 graphs match central differences)."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st
from strategies import LOSS, decorated_graphs, differentiable_inputs, graph_and_inputs, graphs, wrt_for

import dpt_ir as dp
from dpt_ir.api.autodiff import joint_graph

KINKED_OPS = {"abs", "relu", "sign", "floor", "ceil", "maximum", "minimum", "clamp", "where", "max", "min"}


@settings(max_examples=200, deadline=None)
@given(decorated_graphs())
def test_text_and_json_round_trip(graph: dp.Graph) -> None:
    text = graph.to_text()
    back = dp.Graph.from_text(text)
    assert back == graph
    assert back.to_text() == text
    assert dp.Graph.model_validate_json(graph.model_dump_json()) == graph


@settings(max_examples=60, deadline=None)
@given(st.data())
def test_joint_graph_round_trips(data: st.DataObject) -> None:
    graph = data.draw(graphs())
    joint = joint_graph(graph, data.draw(wrt_for(graph)), [LOSS])
    assert dp.Graph.from_text(joint.to_text()) == joint
    assert dp.Graph.model_validate_json(joint.model_dump_json()) == joint


def _all_finite(arrays: dict[str, np.ndarray]) -> bool:
    return all(np.isfinite(a).all() for a in arrays.values() if a.dtype.kind == "f")


@settings(max_examples=60, deadline=None)
@given(graph_and_inputs())
def test_generated_graphs_are_well_behaved(case: tuple[dp.Graph, dict[str, np.ndarray]]) -> None:
    graph, inputs = case
    loss_type = graph.types[graph.output_value(LOSS)]
    assert loss_type.shape == () and loss_type.dtype in ("float32", "float64")
    assert {o.value for o in graph.outputs}.isdisjoint(graph.input_map)
    for inp in graph.inputs:
        assert inputs[inp.name].dtype == np.dtype(inp.type.dtype)
        assert np.all((np.abs(inputs[inp.name]) >= 0.5) & (np.abs(inputs[inp.name]) <= 1.5))
    assert _all_finite(dp.interpret(graph, **inputs))
    wrt = [i.name for i in graph.inputs if i.requires_grad]
    assert _all_finite(dp.interpret_grad(graph, wrt, **inputs))


@settings(max_examples=40, deadline=None)
@given(graphs(smooth=True))
def test_smooth_graphs_have_no_kinks(graph: dp.Graph) -> None:
    assert not {n.op for n in graph.nodes} & KINKED_OPS


@settings(max_examples=30, deadline=None)
@given(graph_and_inputs(max_ops=8, smooth=True, dtypes=("float64",)))
def test_smooth_float64_graphs_match_finite_differences(case: tuple[dp.Graph, dict[str, np.ndarray]]) -> None:
    graph, inputs = case
    wrt = differentiable_inputs(graph)
    grads = dp.interpret_grad(graph, wrt, **inputs)
    h = 1e-6
    for name in wrt:
        fd = np.zeros_like(inputs[name])
        for idx in np.ndindex(fd.shape):
            plus, minus = dict(inputs), dict(inputs)
            plus[name], minus[name] = inputs[name].copy(), inputs[name].copy()
            plus[name][idx] += h
            minus[name][idx] -= h
            fd[idx] = (dp.interpret(graph, **plus)[LOSS] - dp.interpret(graph, **minus)[LOSS]) / (2 * h)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-5, atol=1e-5)

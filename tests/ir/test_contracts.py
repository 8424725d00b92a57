"""Every user mistake raises dp.ContractError whose message names the culprit (node, input,
output or tensor), what was expected and what was found.

One bad input per test. `expect_contract_error` rejects any other exception type, so a
leaked KeyError/TypeError/pydantic error fails the test instead of passing it.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp


def expect_contract_error(fn: Callable[[], Any], *fragments: str) -> str:
    """Run ``fn``; it must raise exactly a ContractError whose message holds every fragment."""
    try:
        fn()
    except dp.ContractError as exc:
        message = str(exc)
    except Exception as exc:  # any other type is the failure under test
        pytest.fail(f"expected ContractError, got {type(exc).__name__}: {exc}")
    else:
        pytest.fail("expected ContractError, nothing was raised")
    for fragment in fragments:
        assert fragment in message, f"{fragment!r} not in {message!r}"
    return message


def builder(shape: tuple[int, ...] = (3, 4), dtype: str = "float32") -> tuple[dp.GraphBuilder, dp.Tensor]:
    g = dp.GraphBuilder("g")
    return g, g.input("x", shape, dtype)


def base_doc() -> dict[str, Any]:
    """JSON document of ``y = sum(exp(x))``: nodes exp_0 then sum_1."""
    g, x = builder()
    g.output("y", dp.sum(dp.exp(x)))
    return json.loads(g.build().model_dump_json())


def load(doc: dict[str, Any]) -> dp.Graph:
    return dp.Graph.model_validate_json(json.dumps(doc))


@pytest.fixture
def grad_graph() -> dp.Graph:
    g = dp.GraphBuilder("fit")
    x = g.input("x", (3, 4))
    obs = g.input("obs", (3, 4), requires_grad=False)
    k = g.input("k", (3, 4), "int32")
    g.output("loss", dp.sum(dp.square(x - obs) * k))
    g.output("pred", 2.0 * x)
    return g.build()


def grad_inputs() -> dict[str, np.ndarray]:
    ones = np.ones((3, 4), np.float32)
    return {"x": ones, "obs": ones, "k": np.ones((3, 4), np.int32)}


# -- unknown op, arity, attributes ---------------------------------------------------
def test_unknown_op_in_json() -> None:
    doc = base_doc()
    doc["nodes"][0]["op"] = "frobnicate"
    expect_contract_error(lambda: load(doc), "node 'exp_0'", "unknown op 'frobnicate'")


def test_unknown_op_via_emit() -> None:
    g, x = builder()
    expect_contract_error(lambda: g.emit("frobnicate", [x]), "unknown op 'frobnicate'")


def test_wrong_arity_via_emit() -> None:
    g, x = builder()
    expect_contract_error(lambda: g.emit("add", [x]), "op 'add' on %x", "takes 2 input(s), found 1")


def test_wrong_arity_in_json() -> None:
    doc = base_doc()
    doc["nodes"][0]["inputs"] = ["x", "x"]
    expect_contract_error(lambda: load(doc), "node 'exp_0'", "takes 1 input(s), found 2")


def test_attribute_of_wrong_type() -> None:
    g, x = builder()
    expect_contract_error(
        lambda: g.emit("sum", [x], {"axes": [0], "keepdims": "maybe"}),
        "op 'sum' on %x",
        "attribute keepdims",
        "found 'maybe'",
    )


def test_unknown_attribute_key() -> None:
    g, x = builder()
    expect_contract_error(lambda: g.emit("sum", [x], {"axes": [0], "bogus": 1}), "op 'sum' on %x", "attribute bogus")


def test_missing_attribute_key() -> None:
    g, x = builder()
    expect_contract_error(lambda: g.emit("sum", [x], {}), "op 'sum' on %x", "attribute axes", "Field required")


def test_attributes_not_a_mapping() -> None:
    g, x = builder()
    expect_contract_error(lambda: g.emit("sum", [x], [0, 1]), "op 'sum' on %x", "must be a mapping", "found list")


def test_bad_attribute_in_json() -> None:
    doc = base_doc()
    doc["nodes"][1]["attrs"] = {"axes": [0, 1], "bogus": 2}
    expect_contract_error(lambda: load(doc), "node 'sum_1'", "attribute bogus", "found 2")


# -- shapes and axes -------------------------------------------------------------------
def test_broadcast_mismatch() -> None:
    g, x = builder()
    y = g.input("y", (5,))
    expect_contract_error(
        lambda: x + y, "op 'add' on %x, %y", "[3, 4] and [5] do not broadcast", "expected equal sizes or 1"
    )


@pytest.mark.parametrize("fn", [dp.sum, dp.mean, dp.max, dp.min, dp.logsumexp, dp.argmax])
def test_reduction_axis_out_of_range(fn: Callable[..., dp.Tensor]) -> None:
    _, x = builder()
    expect_contract_error(lambda: fn(x, axis=2), "on %x", "axis 2 is out of range", "-2 <= axis < 2")


def test_reduction_axis_not_an_int() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.sum(x, axis=1.0), "op 'sum' on %x", "axis must be", "found 1.0")


def test_reduction_repeated_axis() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.sum(x, axis=(0, -2)), "op 'sum' on %x", "repeated axis")


def test_expand_dims_axis_out_of_range() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.expand_dims(x, 3), "op 'expand_dims' on %x", "axis 3 is out of range", "rank 3")


def test_squeeze_axis_out_of_range() -> None:
    _, x = builder((3, 1))
    expect_contract_error(lambda: dp.squeeze(x, 2), "op 'squeeze' on %x", "axis 2 is out of range")


def test_squeeze_of_non_unit_axis() -> None:
    _, x = builder((3, 1))
    expect_contract_error(lambda: dp.squeeze(x, 0), "op 'squeeze' on %x", "axis 0 of size 3", "expected 1")


def test_concatenate_axis_out_of_range() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.concatenate([x, x], axis=2), "op 'concat' on %x, %x", "axis 2 is out of range")


def test_concatenate_mismatched_sizes() -> None:
    g, x = builder()
    y = g.input("y", (3, 5))
    expect_contract_error(lambda: dp.concatenate([x, y], axis=0), "op 'concat' on %x, %y", "input 1 has type f32[3,5]")


def test_concatenate_of_rank_zero() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.concatenate([dp.sum(x), dp.sum(x)]), "op 'concat'", "rank-0")


def test_transpose_axis_out_of_range() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.transpose(x, (0, 2)), "op 'transpose' on %x", "axis 2 is out of range")


def test_transpose_not_a_permutation() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.transpose(x, (0, 0)), "op 'transpose' on %x", "not a permutation")


def test_impossible_reshape() -> None:
    _, x = builder()
    expect_contract_error(
        lambda: dp.reshape(x, (5, 3)), "op 'reshape' on %x", "[3, 4] (12 elements)", "[5, 3] (15 elements)"
    )


def test_reshape_with_two_unknown_dims() -> None:
    _, x = builder()
    expect_contract_error(lambda: x.reshape(-1, -1), "op 'reshape' on %x", "at most one -1", "[-1, -1]")


def test_reshape_with_non_int_dims() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.reshape(x, (3.5, 4)), "op 'reshape' on %x", "ints", "found 3.5")


def test_broadcast_to_incompatible_shape() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.broadcast_to(x, (2, 4)), "op 'broadcast_to' on %x", "do not broadcast")


# -- graph structure in JSON documents -----------------------------------------------
def test_cycle_in_json() -> None:
    doc = base_doc()
    doc["nodes"][0]["inputs"] = ["sum_1"]
    expect_contract_error(lambda: load(doc), "node 'exp_0'", "cycle", "exp_0 -> sum_1 -> exp_0", "DAG")


def test_dangling_reference_in_json() -> None:
    doc = base_doc()
    doc["nodes"][1]["inputs"] = ["nope"]
    expect_contract_error(lambda: load(doc), "node 'sum_1'", "'nope' is not defined", "expected the name")


def test_dangling_output_in_json() -> None:
    doc = base_doc()
    doc["outputs"][0]["value"] = "nope"
    expect_contract_error(lambda: load(doc), "output 'y'", "'nope' is not defined")


def test_nodes_out_of_topological_order_in_json() -> None:
    doc = base_doc()
    doc["nodes"].reverse()
    expect_contract_error(lambda: load(doc), "node 'sum_1'", "reads 'exp_0'", "topological order")


def test_declared_type_disagrees_with_type_rule() -> None:
    doc = base_doc()
    doc["nodes"][0]["type"]["shape"] = [4, 3]
    expect_contract_error(lambda: load(doc), "node 'exp_0'", "declared type f32[4,3]", "gives f32[3,4]")


def test_unsupported_dtype_in_json() -> None:
    doc = base_doc()
    doc["inputs"][0]["type"]["dtype"] = "int64"
    expect_contract_error(lambda: load(doc), "inputs[0].type.dtype", "'float32'", "found 'int64'")


def test_not_json() -> None:
    expect_contract_error(lambda: dp.Graph.model_validate_json("{not json"), "graph JSON", "Invalid JSON")


def test_json_missing_required_field() -> None:
    doc = base_doc()
    del doc["nodes"][0]["op"]
    expect_contract_error(lambda: load(doc), "nodes[0].op", "Field required")


def test_json_field_of_wrong_type() -> None:
    doc = base_doc()
    doc["nodes"][0]["inputs"] = 5
    expect_contract_error(lambda: load(doc), "nodes[0].inputs", "valid array", "found 5")


def test_json_attrs_not_an_object() -> None:
    doc = base_doc()
    doc["nodes"][1]["attrs"] = [0, 1]
    expect_contract_error(lambda: load(doc), "node 'sum_1'", "must be a mapping", "found list")


# -- names ------------------------------------------------------------------------------
def test_duplicate_input_name() -> None:
    g, _ = builder()
    expect_contract_error(lambda: g.input("x", (2,)), "input 'x'", "duplicate name")


def test_duplicate_node_name() -> None:
    g, x = builder()
    g.emit("exp", [x], name="e")
    expect_contract_error(lambda: g.emit("exp", [x], name="e"), "node 'e'", "duplicate name")


def test_duplicate_output_name() -> None:
    g, x = builder()
    g.output("y", x)
    expect_contract_error(lambda: g.output("y", x), "output 'y'", "duplicate output name")


def test_duplicate_node_name_in_json() -> None:
    doc = base_doc()
    doc["nodes"][1]["name"] = "x"
    expect_contract_error(lambda: load(doc), "node 'x'", "duplicate name", "already an input")


def test_invalid_input_name() -> None:
    expect_contract_error(lambda: dp.GraphBuilder("g").input("2x", (2,)), "input", "invalid name '2x'")


def test_invalid_node_name_via_emit() -> None:
    g, x = builder()
    expect_contract_error(lambda: g.emit("exp", [x], name="a b"), "node", "invalid name 'a b'")


# -- dtypes and shapes of declarations ----------------------------------------------------
@pytest.mark.parametrize("dtype", ["int64", "complex64", np.float16])
def test_unsupported_dtype(dtype: object) -> None:
    found = np.dtype(dtype).name
    expect_contract_error(
        lambda: dp.GraphBuilder("g").input("x", (2,), dtype),
        "input 'x'",
        f"unsupported dtype '{found}'",
        "expected one of",
    )


def test_negative_dimension() -> None:
    expect_contract_error(lambda: dp.GraphBuilder("g").input("x", (2, -1)), "input 'x'", "non-negative", "found -1")


@pytest.mark.parametrize("shape", [(2, 2.5), (2, 2.0), (True, 2), "ab", None])
def test_non_int_shape(shape: Any) -> None:
    expect_contract_error(lambda: dp.GraphBuilder("g").input("x", shape), "input 'x'", "shape must")


# -- builder misuse -------------------------------------------------------------------------
def test_tensor_from_another_builder() -> None:
    _, x = builder()
    other = dp.GraphBuilder("h")
    y = other.input("y", (3, 4))
    expect_contract_error(lambda: x + y, "op 'add'", "different graph builders ['g', 'h']")


def test_output_from_another_builder() -> None:
    _, x = builder()
    other = dp.GraphBuilder("h")
    expect_contract_error(lambda: other.output("o", x), "output 'o'", "%x belongs to graph builder 'g'")


def test_graph_with_no_output() -> None:
    g, _ = builder()
    expect_contract_error(g.build, "graph 'g'", "has no output")


def test_json_graph_with_no_output() -> None:
    doc = base_doc()
    doc["outputs"] = []
    expect_contract_error(lambda: load(doc), "graph 'g'", "has no output", "expected at least one")


def test_where_with_non_bool_condition() -> None:
    g, x = builder()
    expect_contract_error(lambda: dp.where(x, x, 0.0), "op 'where'", "condition %x must be bool", "found float32")


def test_bool_of_a_tensor() -> None:
    _, x = builder()
    expect_contract_error(lambda: bool(x > 0), "tensor %gt_", "no truth value")


def test_numpy_function_on_a_tensor() -> None:
    _, x = builder()
    expect_contract_error(lambda: np.exp(x), "tensor %x", "no NumPy value", "dp.*")


def test_len_of_rank_zero_tensor() -> None:
    _, x = builder()
    expect_contract_error(lambda: len(dp.sum(x)), "tensor %sum_", "rank-0")


def test_index_out_of_bounds() -> None:
    _, x = builder()
    expect_contract_error(lambda: x[0, 4], "indexing %x", "index 4 is out of bounds for axis 1 with size 4")


def test_slice_with_zero_step() -> None:
    _, x = builder()
    expect_contract_error(lambda: x[::0], "indexing %x", "step cannot be zero")


def test_float_index() -> None:
    _, x = builder()
    expect_contract_error(lambda: x[1.0], "indexing %x", "only ints, slices, None and ...", "found 1.0")


def test_float_slice_bound() -> None:
    _, x = builder()
    expect_contract_error(lambda: x[0.5:2], "indexing %x", "must be ints or None", "slice(0.5, 2, None)")


def test_too_many_indices() -> None:
    _, x = builder()
    expect_contract_error(lambda: x[0, 0, 0], "indexing %x", "too many indices (3)", "rank 2")


def test_exp_of_int_tensor() -> None:
    _, x = builder(dtype="int32")
    expect_contract_error(lambda: dp.exp(x), "op 'exp' on %x", "expected float32 or float64", "found int32")


def test_numpy_array_in_expression() -> None:
    _, x = builder()
    expect_contract_error(lambda: x + np.ones((3, 4), np.float32), "op 'add'", "expected a dp tensor", "found ndarray")


def test_numpy_array_on_the_left() -> None:
    _, x = builder()
    expect_contract_error(lambda: np.ones((3, 4), np.float32) * x, "op 'mul'", "expected a dp tensor", "found ndarray")


def test_constant_that_does_not_fit() -> None:
    _, x = builder(dtype="uint8")
    expect_contract_error(lambda: x + (-1), "op 'constant'", "-1 does not fit dtype uint8")


def test_clamp_with_lo_above_hi() -> None:
    _, x = builder()
    expect_contract_error(lambda: dp.clamp(x, 2.0, 1.0), "op 'clamp' on %x", "lo <= hi", "lo=2.0 > hi=1.0")


def test_emit_with_a_tensor_instead_of_a_list() -> None:
    g, x = builder()
    expect_contract_error(lambda: g.emit("exp", x), "op 'exp'", "list of dp tensors", "found Tensor")


def test_assigning_to_a_built_graph() -> None:
    g, x = builder()
    g.output("y", x * 2.0)
    graph = g.build()
    expect_contract_error(lambda: setattr(graph, "name", "h"), "Graph 'g'", "frozen", "'name'")


def test_hand_built_node_with_wrong_field_type() -> None:
    t = dp.TensorType(shape=(3,), dtype="float32")
    expect_contract_error(lambda: dp.Node(name="n", op="exp", inputs=3, type=t), "Node", "inputs", "found 3")


def test_register_op_with_incomplete_derivative() -> None:
    op = dp.OpDef(
        name="test_contracts_half_grad",
        kind="elementwise",
        arity=2,
        infer=lambda inputs, attrs, where: inputs[0],
        reference=lambda attrs, a, b: a * b,
        derivative=dp.Derivative({0: lambda c: c.gy}),
    )
    expect_contract_error(
        lambda: dp.register_op(op), "op 'test_contracts_half_grad'", "input 1 has no derivative formula"
    )


# -- interpreter inputs ----------------------------------------------------------------------
def test_missing_input(grad_graph: dp.Graph) -> None:
    inputs = grad_inputs()
    del inputs["k"]
    expect_contract_error(lambda: dp.interpret(grad_graph, **inputs), "graph 'fit'", "missing input(s) ['k']")


def test_extra_input(grad_graph: dp.Graph) -> None:
    inputs = {**grad_inputs(), "z": np.ones(3)}
    expect_contract_error(lambda: dp.interpret(grad_graph, **inputs), "unexpected input(s) ['z']")


def test_input_of_wrong_shape(grad_graph: dp.Graph) -> None:
    inputs = {**grad_inputs(), "x": np.ones((2, 4), np.float32)}
    expect_contract_error(
        lambda: dp.interpret(grad_graph, **inputs), "input 'x'", "expected shape [3, 4]", "found [2, 4]"
    )


def test_input_of_wrong_dtype(grad_graph: dp.Graph) -> None:
    inputs = {**grad_inputs(), "x": np.ones((3, 4), np.float64)}
    expect_contract_error(
        lambda: dp.interpret(grad_graph, **inputs), "input 'x'", "expected dtype float32", "found float64"
    )


def test_ragged_input(grad_graph: dp.Graph) -> None:
    inputs = {**grad_inputs(), "obs": [[1.0, 2.0], [3.0]]}
    expect_contract_error(lambda: dp.interpret(grad_graph, **inputs), "input 'obs'", "rectangular", "ragged")


def test_non_numeric_input(grad_graph: dp.Graph) -> None:
    inputs = {**grad_inputs(), "obs": "abc"}
    expect_contract_error(lambda: dp.interpret(grad_graph, **inputs), "input 'obs'", "real numbers", "str")


# -- gradients: wrt and seeds ---------------------------------------------------------------
def test_wrt_unknown_input(grad_graph: dp.Graph) -> None:
    expect_contract_error(
        lambda: dp.interpret_grad(grad_graph, ["z"], **grad_inputs()),
        "wrt",
        "'z' is not an input of graph 'fit'",
        "['x', 'obs', 'k']",
    )


def test_wrt_requires_grad_false_input(grad_graph: dp.Graph) -> None:
    expect_contract_error(
        lambda: dp.interpret_grad(grad_graph, ["obs"], **grad_inputs()),
        "input 'obs'",
        "requires_grad=False",
        "expected a differentiable input",
    )


def test_wrt_int_input(grad_graph: dp.Graph) -> None:
    expect_contract_error(
        lambda: dp.interpret_grad(grad_graph, ["k"], **grad_inputs()),
        "input 'k'",
        "dtype int32",
        "expected a float dtype",
    )


def test_wrt_not_a_name(grad_graph: dp.Graph) -> None:
    expect_contract_error(
        lambda: dp.interpret_grad(grad_graph, None, **grad_inputs()), "wrt", "input name", "found None"
    )


def test_seed_of_wrong_shape(grad_graph: dp.Graph) -> None:
    expect_contract_error(
        lambda: dp.interpret_grad(grad_graph, ["x"], seed={"pred": np.ones(3)}, **grad_inputs()),
        "output 'pred'",
        "shape [3, 4]",
        "found shape [3]",
    )


def test_seed_for_missing_output(grad_graph: dp.Graph) -> None:
    expect_contract_error(
        lambda: dp.interpret_grad(grad_graph, ["x"], seed={"nope": 1.0}, **grad_inputs()),
        "no output 'nope'",
        "['loss', 'pred']",
    )


def test_seed_that_is_not_a_number(grad_graph: dp.Graph) -> None:
    expect_contract_error(
        lambda: dp.interpret_grad(grad_graph, ["x"], seed={"loss": None}, **grad_inputs()),
        "output 'loss'",
        "real scalar or array",
        "NoneType",
    )


def test_no_scalar_output_to_seed_by_default() -> None:
    g, x = builder()
    g.output("pred", x * 2.0)
    graph = g.build()
    expect_contract_error(
        lambda: dp.interpret_grad(graph, ["x"], x=np.ones((3, 4), np.float32)),
        "graph 'g'",
        "exactly one scalar float output",
        "found none",
    )


# -- compiling what the backend cannot lower --------------------------------------------------
def test_user_op_without_cxx_lowering_is_a_contract_error_at_compile_time(monkeypatch: pytest.MonkeyPatch) -> None:
    from dpt_ir.ir import registry

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the op is gone after the test
    dp.register_op(
        dp.OpDef(
            name="test_contracts_cube",
            kind="elementwise",
            arity=1,
            infer=lambda inputs, attrs, where: inputs[0],
            reference=lambda attrs, a: a * a * a,
            derivative=dp.Derivative({0: lambda c: c.gy * 3.0 * dp.square(c.input(0))}, saved_inputs=(0,)),
        )
    )
    g, x = builder((4,))
    g.output("loss", dp.sum(g.emit("test_contracts_cube", [x]) + 1.0))
    graph = g.build()
    assert dp.interpret(graph, x=np.ones(4, np.float32))["loss"] == 8.0  # the interpreter runs it
    expect_contract_error(
        lambda: dp.compile(graph, wrt=["x"], device="cpu"),
        "kernel group",
        "ops ['add', 'constant', 'sum', 'test_contracts_cube']",
        "expected a group the C++ backend lowers",
        "op 'test_contracts_cube' (node 'test_contracts_cube_0') with no C++ lowering",
        "`cxx=`",
    )

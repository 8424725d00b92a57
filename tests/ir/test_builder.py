"""The Python front end: operators and dp.* functions map to the right ops with NumPy
semantics, names are unique and readable, built graphs are frozen values, and users can
register their own ops."""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.ir import registry

RNG = np.random.default_rng(7)
X = RNG.standard_normal((3, 4)).astype(np.float32)
Y = (RNG.uniform(0.5, 2.0, (3, 4))).astype(np.float32)


def two_inputs() -> tuple[dp.GraphBuilder, dp.Tensor, dp.Tensor]:
    g = dp.GraphBuilder("ops")
    return g, g.input("x", (3, 4)), g.input("y", (3, 4))


def op_of(g: dp.GraphBuilder, t: dp.Tensor) -> str:
    """The op of the node that produced ``t``."""
    return next(n.op for n in g.nodes if n.name == t.name)


def node_of(g: dp.GraphBuilder, t: dp.Tensor) -> dp.Node:
    return next(n for n in g.nodes if n.name == t.name)


def evaluate(g: dp.GraphBuilder, t: dp.Tensor) -> np.ndarray:
    g.output("out", t)
    graph = g.build()
    inputs = {"x": X, "y": Y}
    return dp.interpret(graph, **{i.name: inputs[i.name] for i in graph.inputs})["out"]


# Each case: the expression, its NumPy meaning, and the op of the node it ends with.
Case = tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any], str]
OPERATOR_CASES: dict[str, Case] = {
    "add": (lambda x, y: x + y, lambda x, y: x + y, "add"),
    "sub": (lambda x, y: x - y, lambda x, y: x - y, "sub"),
    "mul": (lambda x, y: x * y, lambda x, y: x * y, "mul"),
    "truediv": (lambda x, y: x / y, lambda x, y: x / y, "div"),
    "pow": (lambda x, y: y**x, lambda x, y: y**x, "pow"),
    "neg": (lambda x, y: -x, lambda x, y: -x, "neg"),
    "abs": (lambda x, y: abs(x), lambda x, y: abs(x), "abs"),
    "lt": (lambda x, y: x < y, lambda x, y: x < y, "lt"),
    "le": (lambda x, y: x <= y, lambda x, y: x <= y, "le"),
    "gt": (lambda x, y: x > y, lambda x, y: x > y, "gt"),
    "ge": (lambda x, y: x >= y, lambda x, y: x >= y, "ge"),
    "eq": (lambda x, y: x == y, lambda x, y: x == y, "eq"),
    "ne": (lambda x, y: x != y, lambda x, y: x != y, "ne"),
    "and": (lambda x, y: (x > 0) & (y > 1), lambda x, y: (x > 0) & (y > 1), "logical_and"),
    "or": (lambda x, y: (x > 0) | (y > 1), lambda x, y: (x > 0) | (y > 1), "logical_or"),
    "invert": (lambda x, y: ~(x > 0), lambda x, y: ~(x > 0), "logical_not"),
    "radd": (lambda x, y: 2.0 + x, lambda x, y: 2.0 + x, "add"),
    "rsub": (lambda x, y: 2.0 - x, lambda x, y: 2.0 - x, "sub"),
    "rmul": (lambda x, y: 3 * x, lambda x, y: 3 * x, "mul"),
    "rtruediv": (lambda x, y: 1.0 / y, lambda x, y: 1.0 / y, "div"),
    "rpow": (lambda x, y: 2**x, lambda x, y: 2**x, "pow"),
    "rmul_np_scalar": (lambda x, y: np.float32(2) * x, lambda x, y: np.float32(2) * x, "mul"),
    "radd_np_scalar": (lambda x, y: np.float32(0.5) + x, lambda x, y: np.float32(0.5) + x, "add"),
    "rand_scalar": (lambda x, y: True & (x > 0), lambda x, y: True & (x > 0), "logical_and"),
    "slice_cols": (lambda x, y: x[:, 1:3], lambda x, y: x[:, 1:3], "slice"),
    "new_axis": (lambda x, y: x[..., None], lambda x, y: x[..., None], "expand_dims"),
    "reverse": (lambda x, y: x[::-1], lambda x, y: x[::-1], "slice"),
    "row": (lambda x, y: x[0], lambda x, y: x[0], "squeeze"),
    "element": (lambda x, y: x[1, -1], lambda x, y: x[1, -1], "squeeze"),
    "strided": (lambda x, y: x[1:, ::-2], lambda x, y: x[1:, ::-2], "slice"),
    "T": (lambda x, y: x.T, lambda x, y: x.T, "transpose"),
    "method_sum": (lambda x, y: x.sum(axis=1), lambda x, y: x.sum(axis=1), "sum"),
    "method_sum_keepdims": (
        lambda x, y: x.sum(axis=-1, keepdims=True),
        lambda x, y: x.sum(axis=-1, keepdims=True),
        "sum",
    ),
    "method_mean": (lambda x, y: x.mean(axis=0), lambda x, y: x.mean(axis=0), "mean"),
    "method_reshape_args": (lambda x, y: x.reshape(4, 3), lambda x, y: x.reshape(4, 3), "reshape"),
    "method_reshape_tuple": (lambda x, y: x.reshape((2, -1)), lambda x, y: x.reshape((2, -1)), "reshape"),
    "method_reshape_flat": (lambda x, y: x.reshape(-1), lambda x, y: x.reshape(-1), "reshape"),
}


@pytest.mark.parametrize("case", list(OPERATOR_CASES), ids=list(OPERATOR_CASES))
def test_operator_maps_to_op_with_numpy_semantics(case: str) -> None:
    build, numpy_fn, op = OPERATOR_CASES[case]
    g, x, y = two_inputs()
    out = build(x, y)
    assert isinstance(out, dp.Tensor)
    assert op_of(g, out) == op
    expected = np.asarray(numpy_fn(X, Y))
    assert out.shape == expected.shape
    assert out.dtype == expected.dtype.name
    np.testing.assert_allclose(evaluate(g, out), expected, rtol=1e-6)


def test_scalar_on_the_left_is_the_first_operand() -> None:
    g, x, _ = two_inputs()
    out = 2.0 - x
    first, second = node_of(g, out).inputs
    assert op_of(g, dp.Tensor(g, first, x.type)) == "constant"
    assert second == "x"


def test_comparisons_return_tensors_not_bools() -> None:
    _, x, y = two_inputs()
    for out in (x == y, x != y, x == 1.0, 1.0 != x):
        assert isinstance(out, dp.Tensor)
        assert out.dtype == "bool"


def test_int_division_promotes_to_float64_like_numpy() -> None:
    g = dp.GraphBuilder("ints")
    k = g.input("k", (3,), "int32")
    out = k / 2
    assert out.dtype == "float64"
    g.output("out", out)
    np.testing.assert_array_equal(
        dp.interpret(g.build(), k=np.array([1, 2, 3], np.int32))["out"], np.array([1, 2, 3]) / 2
    )


def test_iteration_yields_rows() -> None:
    _, x, _ = two_inputs()
    rows = list(x)
    assert len(x) == 3
    assert [r.shape for r in rows] == [(4,)] * 3


def test_node_names_are_unique_and_readable() -> None:
    g, x, y = two_inputs()
    loss = dp.sum(dp.square(dp.exp(-0.7 * x) - y)) + dp.mean(x * y)
    g.output("loss", loss)
    graph = g.build()
    names = [n.name for n in graph.nodes]
    assert len(set(names)) == len(names)
    for node in graph.nodes:
        assert re.fullmatch(rf"{node.op}_\d+", node.name), node.name


def test_explicit_node_name_is_kept_and_fresh_names_avoid_it() -> None:
    g, x, _ = two_inputs()
    named = g.emit("exp", [x], name="exp_0")
    other = dp.exp(x)
    assert named.name == "exp_0"
    assert other.name != "exp_0"


def test_clamp_with_scalar_bounds_is_one_op() -> None:
    g, x, _ = two_inputs()
    out = dp.clamp(x, -0.5, 0.5)
    assert op_of(g, out) == "clamp"
    np.testing.assert_allclose(evaluate(g, out), np.clip(X, -0.5, 0.5))


def test_clamp_with_tensor_bounds_composes_maximum_and_minimum() -> None:
    g, x, y = two_inputs()
    lo = y - 1.5
    out = dp.clamp(x, lo, y)
    node = node_of(g, out)
    assert node.op == "minimum"
    assert op_of(g, dp.Tensor(g, node.inputs[0], x.type)) == "maximum"
    np.testing.assert_allclose(evaluate(g, out), np.minimum(np.maximum(X, Y - 1.5), Y), rtol=1e-6)


def test_clamp_gradient_with_tensor_bounds() -> None:
    g, x, y = two_inputs()
    g.output("loss", dp.sum(dp.clip(x, y - 1.5, y)))
    grads = dp.interpret_grad(g.build(), ["x"], x=X, y=Y)
    inside = (X >= Y - 1.5) & (X <= Y)
    np.testing.assert_array_equal(grads["x"], inside.astype(np.float32))


def test_where_with_scalar_branches() -> None:
    g, x, _ = two_inputs()
    out = dp.where(x > 0, 1.0, -1.0)
    assert op_of(g, out) == "where"
    expected = np.where(X > 0, 1.0, -1.0)
    assert out.dtype == expected.dtype.name
    np.testing.assert_array_equal(evaluate(g, out), expected)


def test_where_with_one_scalar_branch_keeps_tensor_dtype() -> None:
    g, x, _ = two_inputs()
    out = dp.where(x > 0, x, 0.0)
    assert out.dtype == "float32"
    np.testing.assert_array_equal(evaluate(g, out), np.where(X > 0, X, np.float32(0)))


ALIASES: dict[str, tuple[Callable[[Any, Any], Any], Callable[[Any, Any], Any], str]] = {
    "subtract": (dp.subtract, np.subtract, "sub"),
    "multiply": (dp.multiply, np.multiply, "mul"),
    "divide": (dp.divide, np.divide, "div"),
    "true_divide": (dp.true_divide, np.true_divide, "div"),
    "power": (lambda x, y: dp.power(y, x), lambda x, y: np.power(y, x), "pow"),
    "arctan2": (dp.arctan2, np.arctan2, "atan2"),
    "negative": (lambda x, y: dp.negative(x), lambda x, y: np.negative(x), "neg"),
    "absolute": (lambda x, y: dp.absolute(x), lambda x, y: np.absolute(x), "abs"),
    "amax": (lambda x, y: dp.amax(x, axis=0), lambda x, y: np.amax(x, axis=0), "max"),
    "amin": (lambda x, y: dp.amin(x, axis=1), lambda x, y: np.amin(x, axis=1), "min"),
    "clip": (lambda x, y: dp.clip(x, -1.0, 1.0), lambda x, y: np.clip(x, -1.0, 1.0), "clamp"),
    "concatenate": (
        lambda x, y: dp.concatenate([x, y], axis=1),
        lambda x, y: np.concatenate([x, y], axis=1),
        "concat",
    ),
    "greater": (dp.greater, np.greater, "gt"),
    "less_equal": (dp.less_equal, np.less_equal, "le"),
    "equal": (dp.equal, np.equal, "eq"),
    "not_equal": (dp.not_equal, np.not_equal, "ne"),
    "astype": (lambda x, y: dp.astype(x, "float64"), lambda x, y: x.astype(np.float64), "cast"),
    "transpose": (lambda x, y: dp.transpose(x, (1, 0)), lambda x, y: np.transpose(x, (1, 0)), "transpose"),
    "expand_dims": (lambda x, y: dp.expand_dims(x, 1), lambda x, y: np.expand_dims(x, 1), "expand_dims"),
    "broadcast_to": (
        lambda x, y: dp.broadcast_to(x[0], (2, 4)),
        lambda x, y: np.broadcast_to(x[0], (2, 4)),
        "broadcast_to",
    ),
}


@pytest.mark.parametrize("name", list(ALIASES), ids=list(ALIASES))
def test_numpy_named_functions(name: str) -> None:
    build, numpy_fn, op = ALIASES[name]
    g, x, y = two_inputs()
    out = build(x, y)
    assert op_of(g, out) == op
    expected = np.asarray(numpy_fn(X, Y))
    assert (out.shape, out.dtype) == (expected.shape, expected.dtype.name)
    np.testing.assert_allclose(evaluate(g, out), expected, rtol=1e-6)


def test_aliases_are_the_same_functions() -> None:
    assert dp.subtract is dp.sub
    assert dp.multiply is dp.mul
    assert dp.divide is dp.div
    assert dp.power is dp.pow
    assert dp.arctan2 is dp.atan2
    assert dp.amax is dp.max
    assert dp.amin is dp.min
    assert dp.clip is dp.clamp
    assert dp.concatenate is dp.concat


# -- graphs are frozen values -----------------------------------------------------------
def beer_graph() -> dp.Graph:
    g = dp.GraphBuilder("beer")
    x = g.input("x", (4, 4))
    obs = g.input("obs", (4, 4), requires_grad=False)
    g.output("loss", dp.sum(dp.square(1.3 * dp.exp(-0.7 * x) - obs)))
    return g.build()


def test_built_graph_is_frozen() -> None:
    graph = beer_graph()
    with pytest.raises(dp.ContractError, match="frozen"):
        graph.name = "other"  # type: ignore[misc]
    with pytest.raises(dp.ContractError, match="frozen"):
        graph.nodes[0].op = "log"  # type: ignore[misc]
    with pytest.raises(dp.ContractError, match="frozen"):
        graph.inputs[0].type.shape = (2, 2)  # type: ignore[misc]
    assert graph.name == "beer"


def test_builder_keeps_working_after_build() -> None:
    g = dp.GraphBuilder("g")
    x = g.input("x", (2,))
    g.output("a", dp.exp(x))
    first = g.build()
    g.output("b", dp.log(x))
    second = g.build()
    assert [o.name for o in first.outputs] == ["a"]
    assert [o.name for o in second.outputs] == ["a", "b"]


def hand_written() -> dp.Graph:
    f32 = dp.TensorType(shape=(3,), dtype="float32")
    scalar = dp.TensorType(shape=(), dtype="float32")
    return dp.Graph(
        name="hand",
        inputs=(dp.Input(name="x", type=f32),),
        nodes=(
            dp.Node(name="exp_0", op="exp", inputs=("x",), type=f32),
            dp.Node(name="sum_1", op="sum", inputs=("exp_0",), attrs={"axes": [0]}, type=scalar),
        ),
        outputs=(dp.Output(name="y", value="sum_1"),),
    )


def test_hand_written_graph_equals_built_graph() -> None:
    g = dp.GraphBuilder("hand")
    x = g.input("x", (3,))
    g.output("y", dp.sum(dp.exp(x)))
    assert hand_written() == g.build()


def test_hand_written_graph_json_round_trip() -> None:
    graph = hand_written()
    doc = graph.model_dump_json()
    again = dp.Graph.model_validate_json(doc)
    assert again == graph
    assert again.model_dump_json() == doc
    assert again.nodes[1].attrs == {"axes": [0], "keepdims": False}


def test_graphs_that_differ_are_not_equal() -> None:
    graph = hand_written()
    renamed = graph.replace(outputs=(dp.Output(name="z", value="sum_1"),))
    assert renamed != graph
    assert renamed == graph.replace(outputs=(dp.Output(name="z", value="sum_1"),))


def test_json_round_trip_of_a_built_graph_evaluates_the_same() -> None:
    graph = beer_graph()
    again = dp.Graph.model_validate_json(graph.model_dump_json())
    assert again == graph
    x = RNG.standard_normal((4, 4)).astype(np.float32)
    obs = RNG.standard_normal((4, 4)).astype(np.float32)
    np.testing.assert_array_equal(dp.interpret(again, x=x, obs=obs)["loss"], dp.interpret(graph, x=x, obs=obs)["loss"])


# -- user ops -------------------------------------------------------------------------------
@pytest.fixture
def private_registry(monkeypatch: pytest.MonkeyPatch) -> None:
    """Register test ops into a copy of the op table, so they never leak into other tests."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))


def _same_type(inputs: tuple[dp.TensorType, ...], attrs: Any, where: str) -> dp.TensorType:
    (x,) = inputs
    if x.dtype not in ("float32", "float64"):
        raise dp.ContractError(f"{where}: expected a float input, found {x.dtype}")
    return x


def cube_op(derivative: dp.Derivative | None) -> dp.OpDef:
    return dp.OpDef(
        name="test_cube",
        kind="elementwise",
        arity=1,
        infer=_same_type,
        reference=lambda attrs, x: x * x * x,
        derivative=derivative,
        cxx="({0} * {0} * {0})",
        doc="x**3 (test op)",
    )


def test_register_user_op_and_differentiate_it(private_registry: None) -> None:
    dp.register_op(cube_op(dp.Derivative({0: lambda c: c.gy * 3.0 * dp.square(c.input(0))}, saved_inputs=(0,))))
    assert dp.get_op("test_cube").differentiable
    g = dp.GraphBuilder("cube")
    x = g.input("x", (5,), "float64")
    cubed = g.emit("test_cube", [x])
    assert cubed.type == x.type
    g.output("loss", dp.sum(cubed))
    graph = g.build()
    xs = np.linspace(-2.0, 2.0, 5)
    np.testing.assert_allclose(dp.interpret(graph, x=xs)["loss"], np.sum(xs**3))
    np.testing.assert_allclose(dp.interpret_grad(graph, ["x"], x=xs)["x"], 3 * xs**2)
    again = dp.Graph.model_validate_json(graph.model_dump_json())
    assert again == graph


def test_user_op_type_rule_errors_are_contract_errors(private_registry: None) -> None:
    dp.register_op(cube_op(None))
    g = dp.GraphBuilder("cube")
    k = g.input("k", (5,), "int32")
    with pytest.raises(dp.ContractError, match=r"op 'test_cube' on %k: expected a float input, found int32"):
        g.emit("test_cube", [k])


def test_registering_an_op_twice_needs_replace(private_registry: None) -> None:
    dp.register_op(cube_op(None))
    with pytest.raises(dp.ContractError, match="'test_cube' is already registered"):
        dp.register_op(cube_op(None))
    dp.register_op(cube_op(None), replace=True)


@pytest.mark.parametrize(
    ("derivative", "message"),
    [
        (dp.Derivative({}), "input 0 has no derivative formula"),
        (dp.Derivative({0: lambda c: c.gy}, saved_inputs=(1,)), "saved input 1 does not exist"),
        (dp.Derivative({0: lambda c: c.gy, 2: lambda c: c.gy}), "formula for input 2 that does not exist"),
    ],
    ids=["missing_formula", "saved_input_out_of_range", "formula_out_of_range"],
)
def test_incomplete_derivative_entry_is_refused_at_registration(
    private_registry: None, derivative: dp.Derivative, message: str
) -> None:
    with pytest.raises(dp.ContractError, match=message):
        dp.register_op(cube_op(derivative))
    with pytest.raises(dp.ContractError, match="unknown op 'test_cube'"):
        dp.get_op("test_cube")


# -- requires_grad needs a float dtype (issue 27) ----------------------------------------


@pytest.mark.parametrize("dtype", ["uint8", "int32", "bool"])
def test_requires_grad_on_a_non_float_input_is_refused(dtype: str) -> None:
    g = dp.GraphBuilder("mask_grad")
    with pytest.raises(dp.ContractError) as exc:
        g.input("m", (4,), dtype, requires_grad=True)
    message = str(exc.value)
    assert message.startswith("input 'm': requires_grad=True needs a float dtype") and f"found {dtype}" in message


@pytest.mark.parametrize("dtype", ["uint8", "int32", "bool"])
def test_a_non_float_input_is_data_by_default(dtype: str) -> None:
    g = dp.GraphBuilder("mask_default")
    x = g.input("x", (4,))
    m = g.input("m", (4,), dtype)
    g.output("y", x * m)
    graph = g.build()
    assert [i.requires_grad for i in graph.inputs] == [True, False]
    assert "input %m : " in graph.to_text() and graph.to_text().count("nograd") == 1
    assert dp.Graph.from_text(graph.to_text()) == graph


def test_a_document_with_a_differentiable_integer_input_is_refused() -> None:
    g = dp.GraphBuilder("doc")
    x = g.input("x", (4,))
    g.input("k", (4,), "int32")
    g.output("y", 2.0 * x)
    doc = json.loads(g.build().model_dump_json())
    doc["inputs"][1]["requires_grad"] = True
    with pytest.raises(dp.ContractError, match=r"input 'k': requires_grad=True needs a float dtype .* found int32"):
        dp.Graph.model_validate_json(json.dumps(doc))
    del doc["inputs"][1]["requires_grad"]  # omitted: an integer input is data
    assert not dp.Graph.model_validate_json(json.dumps(doc)).input_map["k"].requires_grad
    # Text without 'nograd' on an integer input (as printed before the rule) reads as data too.
    text = g.build().to_text().replace("i32[4] nograd", "i32[4]")
    assert not dp.Graph.from_text(text).input_map["k"].requires_grad

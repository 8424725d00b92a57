"""The textual IR: golden printout, hand-written texts, exact round trips, and the errors
of malformed texts (line and column, expected and found) and of invalid graphs (line)."""

from __future__ import annotations

import math
import re

import pytest

import dpt_ir as dp
from dpt_ir.api.autodiff import joint_graph

GOLDEN = """\
graph "demo.beer" {
  meta {"note": "# not a comment }", "version": 1}
  input %x : f32[2,3]
  input %w.b : f64[3] nograd
  %constant_0 : f32[] = constant() {"dtype": "float32", "shape": [], "value": -0.5}
  %mul_1 : f32[2,3] = mul(%constant_0, %x)
  %exp_2 : f32[2,3] = exp(%mul_1)
  %cast_3 : f64[2,3] = cast(%exp_2) {"dtype": "float64"}
  %mul_4 : f64[2,3] = mul(%cast_3, %w.b)
  %slice_5 : f64[2,3] = slice(%mul_4) {"starts": [0, 2], "steps": [1, -1], "stops": [2, -1]}
  %square_6 : f64[2,3] = square(%slice_5)
  %sum_7 : f64[] = sum(%square_6) {"axes": [0, 1], "keepdims": false}
  %constant_8 : f64[] = constant() {"dtype": "float64", "shape": [], "value": 1.0} \
meta {"k": [1, 2.0, true, null], "phase": "forward"}
  %gt_9 : bool[2,3] = gt(%mul_4, %constant_8)
  output loss = %sum_7
  output aux.mask = %gt_9
}
"""

# A valid text to break in the error tests; line 3 holds the node %e.
VALID = """\
graph "g" {
  input %x : f32[2,3]
  %e : f32[2,3] = exp(%x)
  %s : f32[] = sum(%e) {"axes": [0, 1], "keepdims": false}
  output loss = %s
}
"""


def demo_graph() -> dp.Graph:
    g = dp.GraphBuilder("demo.beer")
    x = g.input("x", (2, 3))
    w = g.input("w.b", (3,), dtype="float64", requires_grad=False)
    y = dp.exp(-0.5 * x) * w
    g.output("loss", dp.sum(dp.square(y[:, ::-1]), axis=(0, 1)))
    g.output("aux.mask", y > 1.0)
    graph = g.build()
    nodes = list(graph.nodes)
    nodes[-2] = nodes[-2].model_copy(update={"meta": {"phase": "forward", "k": [1, 2.0, True, None]}})
    return graph.replace(nodes=tuple(nodes), meta={"note": "# not a comment }", "version": 1})


def test_golden_print() -> None:
    assert demo_graph().to_text() == GOLDEN
    assert str(demo_graph()) == GOLDEN


def test_golden_parses_back() -> None:
    assert dp.Graph.from_text(GOLDEN) == demo_graph()


def test_hand_written_text_with_comments_spacing_and_multiline_json() -> None:
    text = """
    # a hand-written graph: comments, blank lines, free spacing
    graph "g" {   # header comment

      input   %x:f32[ 2 , 3 ]
      %e : f32[2,3] = exp( %x )        # trailing comment
      %s : f32[] = sum(%e) {
          "keepdims": false,
          "axes": [0, 1]
      } meta {"why": "a # in a string is not a comment"}
      output loss=%s
    }
    # trailing comment
    """
    b = dp.GraphBuilder("g")
    e = b.emit("exp", [b.input("x", (2, 3))], name="e")
    meta = {"why": "a # in a string is not a comment"}
    b.output("loss", b.emit("sum", [e], {"axes": [0, 1]}, name="s", meta=meta))
    assert dp.Graph.from_text(text) == b.build()


def test_attributes_are_canonicalised_on_parse() -> None:
    # defaults filled, keys sorted, `1` for a float attribute stored as 1.0
    text = VALID.replace('{"axes": [0, 1], "keepdims": false}', '{"axes": [0, 1]}').replace(
        "%e : f32[2,3] = exp(%x)", '%e : f32[2,3] = clamp(%x) {"hi": 1}'
    )
    graph = dp.Graph.from_text(text)
    assert graph.node("e").attrs == {"lo": None, "hi": 1.0}
    assert isinstance(graph.node("e").attrs["hi"], float)
    assert graph.node("s").attrs == {"axes": [0, 1], "keepdims": False}
    assert dp.Graph.from_text(graph.to_text()) == graph


def special_constants_graph() -> dp.Graph:
    g = dp.GraphBuilder("special")
    x = g.input("x", (2,))
    g.output("loss", dp.sum(x))
    for k, (value, dtype) in enumerate(
        [(math.nan, "float32"), (math.inf, "float64"), (-math.inf, "float32"), (-0.0, "float64"),
         (5e-324, "float64"), (0.1, "float32"), (2, "int32"), (255, "uint8"), (True, "bool")]
    ):  # fmt: skip
        g.output(f"c.{k}", g.constant(value, dtype, (1, 2)))
    return g.build()


def test_round_trip_of_special_constants() -> None:
    graph = special_constants_graph()
    text = graph.to_text()
    assert '"value": NaN' in text and '"value": Infinity' in text and '"value": -Infinity' in text
    back = dp.Graph.from_text(text)
    assert back == graph
    values = [back.node(o.value).attrs["value"] for o in back.outputs[1:]]
    assert math.isnan(values[0]) and values[1] == math.inf and values[2] == -math.inf
    assert values[3] == 0.0 and math.copysign(1.0, values[3]) == -1.0
    assert [type(v) for v in values[4:]] == [float, float, int, int, bool]
    assert back.to_text() == text


def test_meta_values_keep_their_json_types() -> None:
    meta = {"i": 2, "f": 2.0, "b": True, "z": -0.0, "n": math.nan, "inf": -math.inf, "s": 'q"#}\n', "l": [1]}
    graph = special_constants_graph().replace(meta=meta)
    back = dp.Graph.from_text(graph.to_text())
    assert back == graph
    assert [type(back.meta[k]) for k in ("i", "f", "b", "z")] == [int, float, bool, float]
    assert math.copysign(1.0, back.meta["z"]) == -1.0
    # equality of graphs is exact: 2, 2.0 and true differ; -0.0 differs from 0.0; NaN equals NaN
    for k, other in [("i", 2.0), ("f", 2), ("b", 1), ("z", 0.0)]:
        assert graph.replace(meta={**meta, k: other}) != graph
    assert graph.replace(meta={**meta, "n": float("nan")}) == graph


def test_round_trip_of_joint_graph_with_dotted_names() -> None:
    joint = joint_graph(demo_graph(), ["x"], ["loss"])
    text = joint.to_text()
    assert "input %ct.loss : f64[] nograd" in text and "output grad.x = %" in text
    assert dp.Graph.from_text(text) == joint


def test_output_may_name_an_input_and_scalars_print_as_empty_shape() -> None:
    text = 'graph "id" {\n  input %x : f64[]\n  output y = %x\n}\n'
    graph = dp.Graph.from_text(text)
    assert graph.outputs[0].value == "x" and graph.inputs[0].type.shape == ()
    assert graph.to_text() == text


def test_print_rejects_meta_json_cannot_represent() -> None:
    graph = demo_graph()
    nodes = list(graph.nodes)
    nodes[0] = nodes[0].model_copy(update={"meta": {"tags": {1, 2}}})
    with pytest.raises(dp.ContractError, match=r"meta of node 'constant_0'.*found set \{1, 2\} at \.tags"):
        graph.replace(nodes=tuple(nodes)).to_text()
    with pytest.raises(dp.ContractError, match=r"meta of graph 'demo.beer': expected str keys, found key 1"):
        graph.replace(meta={"m": {1: "x"}}).to_text()


SYNTAX_ERRORS = [
    (
        VALID.replace("input %x : f32", "input %x : f16"),
        "line 2, column 14: expected the dtype of input %x (one of f32, f64, i32, u8, bool), found 'f16'",
    ),
    (
        VALID.replace("%e : f32[2,3] = exp", "%e : f32[2,3] exp"),
        "line 3, column 17: expected '=' after the type of node %e, found 'exp'",
    ),
    (
        VALID.replace('"keepdims": false', '"keepdims" false'),
        "line 4, column 52: bad JSON in the attributes of node 's' (expecting ':' delimiter), found 'false'",
    ),
    (
        VALID[: VALID.rindex("}")],
        "line 6, column 1: expected '}' closing the block of graph 'g' opened at line 1, found end of text",
    ),
    (
        VALID.replace("  output", "  outptu"),
        "line 5, column 3: expected a statement: 'input', 'output', 'meta', '%name : type = op(...)', a kernel "
        "plan statement ('kernel', 'boundary', 'halo', 'schedule', 'buffer', 'rowset') or '}', found 'outptu'",
    ),
    (
        VALID.replace("exp(%x)", "exp(%x"),
        "line 3, column 25: expected ',' or ')' in the operands of node %e, found end of line",
    ),
    (
        VALID.replace("exp(%x)", "exp(%x) extra"),
        "line 3, column 27: expected '{' (attributes), 'meta', 'body' or end of line after the operands of node %e, "
        "found 'extra'",
    ),
    (
        VALID.replace("f32[2,3]\n", "f32[2,-3]\n", 1),
        "line 2, column 20: expected a dimension of input %x (a non-negative integer), found '-3'",
    ),
    (
        VALID.replace('graph "g"', "graph g"),
        "line 1, column 7: expected the graph name as a JSON string, found 'g'",
    ),
    (VALID + "junk\n", "line 7, column 1: expected end of text after the graph block, found 'junk'"),
    ("", "line 1, column 1: expected 'graph' starting the text, found end of text"),
    (
        VALID.replace("  input", '  meta {}\n  meta {"a": 1}\n  input'),
        "line 3, column 3: expected one graph 'meta' statement (the first is at line 2), found 'meta'",
    ),
    (
        VALID.replace("output loss = %s", "output loss = s"),
        "line 5, column 17: expected the value of output loss, '%name', found 's'",
    ),
    (
        VALID.replace('{"axes"', '["axes"'),
        "line 4, column 24: expected '{' (attributes), 'meta', 'body' or end of line after the operands of node %s, "
        "found '['",
    ),
    (
        VALID.replace("exp(%x)", 'exp(%x) meta {"a": [1, }'),
        "line 3, column 42: bad JSON in the meta of node 'e' (expecting value), found '}'",
    ),
]


@pytest.mark.parametrize(("text", "message"), SYNTAX_ERRORS)
def test_syntax_errors_give_line_column_expected_and_found(text: str, message: str) -> None:
    with pytest.raises(dp.ContractError) as info:
        dp.Graph.from_text(text)
    assert str(info.value) == message


SEMANTIC_ERRORS = [
    (VALID.replace("exp(%x)", "expo(%x)"), r"^line 3: node 'e': unknown op 'expo'"),
    (VALID.replace("exp(%x)", "exp(%y)"), r"^line 3: node 'e': input 'y' is not defined"),
    (
        VALID.replace("%e : f32[2,3]", "%e : f64[2,3]"),
        r"^line 3: node 'e': declared type f64\[2,3\] but op 'exp'",
    ),
    (VALID.replace('"keepdims": false', '"keepdims": false, "k": 1'), r"^line 4: node 's': bad attributes"),
    (
        VALID.replace("%s : f32[] = sum", "%e : f32[] = sum").replace("= %s", "= %e"),
        r"^line 4: node 'e': duplicate",
    ),
    (VALID.replace("exp(%x)", "exp(%s)"), r"^line 3: node 'e': cycle in the graph"),
    (VALID.replace("= %s", "= %nothing"), r"^line 5: output 'loss': value 'nothing' is not defined"),
    (VALID.replace("  output loss = %s\n", ""), r"^line 1: graph 'g': has no output"),
    (VALID.replace('"g"', '"9g"'), r"^line 1: graph: invalid name '9g'"),
]


@pytest.mark.parametrize(("text", "message"), SEMANTIC_ERRORS)
def test_semantic_errors_name_the_line_of_the_statement(text: str, message: str) -> None:
    with pytest.raises(dp.ContractError) as info:
        dp.Graph.from_text(text)
    assert re.search(message, str(info.value)), str(info.value)

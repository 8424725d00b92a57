"""The textual IR: `print_graph` and `parse_graph`, exact inverses of each other.

``parse_graph(print_graph(g)) == g`` for every valid graph (equality of IR documents, see
`dpt_ir.ir.graph.exact`): attributes and meta are printed as JSON with sorted keys, floats
with Python's shortest round-tripping repr, ``NaN``/``Infinity``/``-Infinity`` as JSON
constants, so ints, floats, bools, negative zero and non-finite values all survive. The
grammar is documented in ``docs/ir-format.md``. One statement per line::

    graph "beer" {
      meta {"wrt": ["x"]}
      input %x : f32[4,4]
      input %obs : f32[4,4] nograd
      %constant_0 : f32[] = constant() {"dtype": "float32", "shape": [], "value": -0.7}
      %mul_1 : f32[4,4] = mul(%constant_0, %x) meta {"phase": "backward"}
      output loss = %mul_1
    }

A fused graph's kernel plan (its ``meta`` records ``groups``, ``boundaries``, ``halo`` and
``schedule``) prints as readable ``kernel``/``boundary``/``halo``/``schedule``/``buffer``
statements after the nodes, not as JSON, and parses back to the same records
(`dpt_ir.ir.kernel_ir_text`).

A malformed text raises `ContractError` with ``line L, column C``, what was expected and
what was found; a well-formed text describing an invalid graph raises the graph's own
`ContractError`, prefixed with the line of the statement it names.
"""

from __future__ import annotations

import json
import re
from typing import Any

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, Input, Node, Output
from dpt_ir.ir.kernel_ir_text import KEYWORDS as PLAN_KEYWORDS
from dpt_ir.ir.kernel_ir_text import PlanReader, plan_lines
from dpt_ir.ir.types import FROM_SHORT, SHORT_NAMES, TensorType

_NAME_RE = re.compile(r"[A-Za-z_][A-Za-z0-9_.]*")
_INT_RE = re.compile(r"[0-9]+")
_DTYPE_RE = re.compile(r"[A-Za-z0-9_]+")
_TOKEN_RE = re.compile(r"[A-Za-z0-9_.%+-]+|.")
_SPACES = " \t\r"
_DECODER = json.JSONDecoder()
_SEMANTIC_RE = re.compile(r"^(node|input|output|graph)\b(?: '([^']*)')?")
BODY = "body"  # the attribute of a loop node holding its body graph, printed as a nested block


# -- printer ---------------------------------------------------------------------------
def print_graph(graph: Graph) -> str:
    """The textual IR of ``graph``: one statement per line, ending with a newline.

    Raises ContractError when a meta dict holds a value JSON cannot represent exactly."""
    return "\n".join(_graph_lines(graph, "")) + "\n"


def _graph_lines(graph: Graph, indent: str) -> list[str]:
    """The block of ``graph``, each line prefixed with ``indent`` (a loop body is printed
    as a nested block, one level deeper than its node)."""
    lines = [f"graph {json.dumps(graph.name)} {{"]
    plan, meta = plan_lines(graph.meta)  # the kernel plan as statements, not JSON in the meta line
    if meta:
        lines.append(f"  meta {_dump(meta, f'meta of graph {graph.name!r}')}")
    lines += [_print_input(i) for i in graph.inputs]
    for n in graph.nodes:
        lines += _print_node(n)
    lines += plan
    lines += [f"  output {o.name} = %{o.value}" for o in graph.outputs]
    lines.append("}")
    return [indent + line for line in lines]


def _print_type(t: TensorType) -> str:
    return f"{SHORT_NAMES[t.dtype]}[{','.join(str(d) for d in t.shape)}]"


def _print_input(inp: Input) -> str:
    flag = "" if inp.requires_grad else " nograd"
    return f"  input %{inp.name} : {_print_type(inp.type)}{flag}"


def _print_node(node: Node) -> list[str]:
    """One line, or the node's line and its nested body block (attribute ``body``)."""
    args = ", ".join(f"%{i}" for i in node.inputs)
    line = f"  %{node.name} : {_print_type(node.type)} = {node.op}({args})"
    attrs = {k: v for k, v in node.attrs.items() if k != BODY}
    if attrs:
        line += " " + _dump(attrs, f"attributes of node {node.name!r}")
    if node.meta:
        line += " meta " + _dump(node.meta, f"meta of node {node.name!r}")
    if BODY not in node.attrs:
        return [line]
    body = _graph_lines(Graph.model_validate(node.attrs[BODY]), "  ")
    return [f"{line} {BODY} {body[0].lstrip()}", *body[1:]]


def _dump(value: dict[str, Any], where: str) -> str:
    _check_json(value, where, "")
    return json.dumps(value, sort_keys=True, allow_nan=True)


def _check_json(value: Any, where: str, path: str) -> None:
    """Only values JSON represents exactly: null, bool, int, float, str, lists, tuples
    and dicts with str keys."""
    if value is None or isinstance(value, bool | int | float | str):
        return
    if isinstance(value, list | tuple):
        for k, v in enumerate(value):
            _check_json(v, where, f"{path}[{k}]")
        return
    if isinstance(value, dict):
        for k, v in value.items():
            if not isinstance(k, str):
                raise ContractError(f"{where}: expected str keys, found key {k!r} at {path or 'top level'}")
            _check_json(v, where, f"{path}.{k}")
        return
    raise ContractError(
        f"{where}: expected JSON values (null, bool, int, float, str, list, dict), "
        f"found {type(value).__name__} {value!r} at {path or 'top level'}"
    )


# -- parser ----------------------------------------------------------------------------
def parse_graph(text: str) -> Graph:
    """Parse the textual IR into a validated `Graph`; ContractError on any problem."""
    return _Parser(text).graph()


def _from_text(cls: type[Graph], text: str) -> Graph:
    """``Graph.from_text(text)``: `parse_graph`."""
    return parse_graph(text)


Graph.to_text = print_graph  # type: ignore[method-assign]
Graph.from_text = classmethod(_from_text)  # type: ignore[assignment]


class _Parser:
    """A cursor over the text. Spaces separate tokens within a line; newlines end
    statements; ``#`` starts a comment running to the end of the line."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.pos = 0
        self.inputs: list[Input] = []
        self.nodes: list[Node] = []
        self.outputs: list[Output] = []
        self.meta: dict[str, Any] | None = None
        self.meta_line = 0
        self.lines: dict[tuple[str, str], int] = {}
        self.plan = PlanReader()

    # -- positions and errors --
    def location(self, pos: int) -> tuple[int, int]:
        line = self.text.count("\n", 0, pos) + 1
        return line, pos - (self.text.rfind("\n", 0, pos) + 1) + 1

    def found(self, pos: int) -> str:
        if pos >= len(self.text):
            return "end of text"
        if self.text[pos] == "\n":
            return "end of line"
        match = _TOKEN_RE.match(self.text, pos)
        assert match is not None  # '.' matches any character but a newline
        return repr(match.group())

    def error(self, expected: str, pos: int | None = None) -> ContractError:
        pos = self.pos if pos is None else pos
        line, col = self.location(pos)
        return ContractError(f"line {line}, column {col}: expected {expected}, found {self.found(pos)}")

    # -- lexical helpers --
    def spaces(self) -> None:
        while self.pos < len(self.text) and self.text[self.pos] in _SPACES:
            self.pos += 1

    def blank(self) -> None:
        """Skip whitespace, newlines and comments."""
        while self.pos < len(self.text):
            c = self.text[self.pos]
            if c in _SPACES or c == "\n":
                self.pos += 1
            elif c == "#":
                self.skip_comment()
            else:
                return

    def skip_comment(self) -> None:
        end = self.text.find("\n", self.pos)
        self.pos = len(self.text) if end < 0 else end

    def peek(self, literal: str) -> bool:
        return self.text.startswith(literal, self.pos)

    def expect(self, literal: str, expected: str) -> None:
        self.spaces()
        if not self.peek(literal):
            raise self.error(expected)
        self.pos += len(literal)

    def end_of_line(self, expected: str) -> None:
        """The statement is over: only spaces and a comment may follow on its line."""
        self.spaces()
        if self.peek("#"):
            self.skip_comment()
        if self.pos < len(self.text):
            if not self.peek("\n"):
                raise self.error(expected)
            self.pos += 1

    def word(self) -> str | None:
        """The name at the cursor (consumed), or None when there is none."""
        match = _NAME_RE.match(self.text, self.pos)
        if match is None:
            return None
        self.pos = match.end()
        return match.group()

    def name(self, expected: str) -> str:
        self.spaces()
        start = self.pos
        word = self.word()
        if word is None:
            raise self.error(expected, start)
        return word

    def value_ref(self, expected: str) -> str:
        """A ``%name`` value reference."""
        self.expect("%", expected)
        return self.name(f"a value name after '%' ({expected})")

    def keyword_ahead(self, keyword: str) -> bool:
        """Whether ``keyword`` follows (after spaces) as a whole word; consume it if so."""
        self.spaces()
        match = _NAME_RE.match(self.text, self.pos)
        if match is None or match.group() != keyword:
            return False
        self.pos = match.end()
        return True

    def json_at(self, what: str) -> Any:
        try:
            value, end = _DECODER.raw_decode(self.text, self.pos)
        except json.JSONDecodeError as exc:
            line, col = self.location(exc.pos)
            problem = exc.msg.lower().removesuffix(" at")
            raise ContractError(
                f"line {line}, column {col}: bad JSON in {what} ({problem}), found {self.found(exc.pos)}"
            ) from None
        self.pos = end
        return value

    def json_object(self, what: str) -> dict[str, Any]:
        self.spaces()
        if not self.peek("{"):
            raise self.error(f"a JSON object ({what})")
        return self.json_at(what)

    def json_string(self, what: str) -> str:
        self.spaces()
        if not self.peek('"'):
            raise self.error(f"{what} as a JSON string")
        return self.json_at(what)

    def tensor_type(self, what: str) -> TensorType:
        """``f32[4,4]``: a short dtype name and a shape."""
        self.spaces()
        match = _DTYPE_RE.match(self.text, self.pos)
        if match is None or match.group() not in FROM_SHORT:
            raise self.error(f"the dtype of {what} (one of {', '.join(FROM_SHORT)})")
        self.pos = match.end()
        dtype = FROM_SHORT[match.group()]
        return TensorType(shape=self.shape(what), dtype=dtype)  # type: ignore[arg-type]

    def shape(self, what: str) -> tuple[int, ...]:
        """``[4,4]`` or ``[]``."""
        self.expect("[", f"'[' opening the shape of {what}")
        dims: list[int] = []
        self.spaces()
        while not self.peek("]"):
            if dims:
                self.expect(",", f"',' or ']' in the shape of {what}")
                self.spaces()
            digits = _INT_RE.match(self.text, self.pos)
            if digits is None:
                raise self.error(f"a dimension of {what} (a non-negative integer)")
            dims.append(int(digits.group()))
            self.pos = digits.end()
            self.spaces()
        self.pos += 1
        return tuple(dims)

    # -- statements --
    def graph(self) -> Graph:
        graph = self.block("'graph' starting the text")
        self.blank()
        if self.pos < len(self.text):
            raise self.error("end of text after the graph block")
        return graph

    def block(self, expected: str) -> Graph:
        """A ``graph "name" { ... }`` block at the cursor (the whole text, or a loop body)."""
        self.blank()
        if not self.keyword_ahead("graph"):
            raise self.error(expected)
        header_line = self.location(self.pos)[0]
        name = self.json_string("the graph name")
        self.expect("{", f"'{{' opening the block of graph {name!r}")
        self.end_of_line("end of line after '{'")
        while True:
            self.blank()
            if self.pos >= len(self.text):
                raise self.error(f"'}}' closing the block of graph {name!r} opened at line {header_line}")
            if self.peek("}"):
                self.pos += 1
                break
            self.statement()
        return self.build(name, header_line)

    def statement(self) -> None:
        line = self.location(self.pos)[0]
        if self.peek("%"):
            self.node(line)
            return
        start = self.pos
        keyword = self.word()
        if keyword == "input":
            self.input_statement(line)
        elif keyword == "output":
            self.output_statement(line)
        elif keyword == "meta":
            self.meta_statement(line, start)
        elif keyword in PLAN_KEYWORDS:
            self.plan.statement(self, keyword, line)
        else:
            raise self.error(
                "a statement: 'input', 'output', 'meta', '%name : type = op(...)', a kernel plan statement "
                f"({', '.join(repr(k) for k in PLAN_KEYWORDS)}) or '}}'",
                start,
            )

    def input_statement(self, line: int) -> None:
        name = self.value_ref("the input's name, '%name'")
        self.expect(":", f"':' after input %{name}")
        ttype = self.tensor_type(f"input %{name}")
        # Without 'nograd', Input's default: differentiable if float (an integer or bool input is data).
        flags = {"requires_grad": False} if self.keyword_ahead("nograd") else {}
        self.end_of_line(f"'nograd' or end of line after the type of input %{name}")
        self.inputs.append(Input(name=name, type=ttype, **flags))
        self.lines[("input", name)] = line

    def output_statement(self, line: int) -> None:
        name = self.name("the output's name")
        self.expect("=", f"'=' after output {name}")
        value = self.value_ref(f"the value of output {name}, '%name'")
        self.end_of_line(f"end of line after output {name}")
        self.outputs.append(Output(name=name, value=value))
        self.lines[("output", name)] = line

    def meta_statement(self, line: int, start: int) -> None:
        if self.meta is not None:
            raise self.error(f"one graph 'meta' statement (the first is at line {self.meta_line})", start)
        self.meta = self.json_object("the graph's meta")
        self.meta_line = line
        self.end_of_line("end of line after the graph's meta")

    def node(self, line: int) -> None:
        name = self.value_ref("a node name")
        self.expect(":", f"':' after %{name}")
        ttype = self.tensor_type(f"node %{name}")
        self.expect("=", f"'=' after the type of node %{name}")
        op = self.name(f"the op name of node %{name}")
        inputs = self.operands(name)
        self.spaces()
        attrs = self.json_object(f"the attributes of node {name!r}") if self.peek("{") else {}
        meta = self.json_object(f"the meta of node {name!r}") if self.keyword_ahead("meta") else {}
        if self.keyword_ahead(BODY):
            attrs = {**attrs, BODY: self.body(name)}
        self.end_of_line(f"'{{' (attributes), 'meta', '{BODY}' or end of line after the operands of node %{name}")
        try:
            node = Node(name=name, op=op, inputs=inputs, attrs=attrs, type=ttype, meta=meta)
        except ContractError as exc:
            raise ContractError(f"line {line}: {exc}") from None
        self.nodes.append(node)
        self.lines[("node", name)] = line

    def body(self, node: str) -> dict[str, Any]:
        """The nested body block of node ``node``, as the graph document its attribute holds.
        Nesting is bounded by the loops the text nests, not by graph size."""
        inner = _Parser(self.text)
        inner.pos = self.pos
        graph = inner.block(f"'graph \"name\" {{' opening the body of node %{node}")
        self.pos = inner.pos
        return graph.model_dump(mode="json")

    def operands(self, node: str) -> tuple[str, ...]:
        self.expect("(", f"'(' opening the operands of node %{node}")
        self.spaces()
        if self.peek(")"):
            self.pos += 1
            return ()
        names = []
        while True:
            names.append(self.value_ref(f"an operand of node %{node}, '%name'"))
            self.spaces()
            if self.peek(")"):
                self.pos += 1
                return tuple(names)
            self.expect(",", f"',' or ')' in the operands of node %{node}")

    def build(self, name: str, header_line: int) -> Graph:
        """The Graph; its validation errors get the line of the statement they name."""
        meta = self.plan.merge(self.meta or {})
        try:
            return Graph(
                name=name,
                inputs=tuple(self.inputs),
                nodes=tuple(self.nodes),
                outputs=tuple(self.outputs),
                meta=meta,
            )
        except ContractError as exc:
            match = _SEMANTIC_RE.match(str(exc))
            line = header_line
            if match is not None and match.group(1) != "graph":
                line = self.lines.get((match.group(1), match.group(2) or ""), header_line)
            raise ContractError(f"line {line}: {exc}") from None

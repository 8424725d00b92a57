"""The IR: `Input`, `Node`, `Output` and `Graph`, frozen pydantic v2 models.

Every value is named; each node produces exactly one value, named after the node. A
`Graph` is valid by construction: building one (from Python, JSON or text) checks names,
references, cycles, ops, arity, attributes and that each node's declared type is the
one its op's type rule gives. Nodes are stored in topological order.
"""

from __future__ import annotations

import re
from functools import cached_property
from typing import TYPE_CHECKING, Any

from pydantic import ConfigDict, Field, ValidationError, model_validator

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import OpDef, Signature, get_op, has_op
from dpt_ir.ir.types import FrozenModel, TensorType, check_dtype, describe_validation_error, is_float

if TYPE_CHECKING:
    import networkx as nx

NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_.]*$")
_CONFIG = ConfigDict(frozen=True, extra="forbid", ser_json_inf_nan="constants")


def check_name(name: object, what: str) -> str:
    if not isinstance(name, str) or not NAME_RE.fullmatch(name):
        raise ContractError(
            f"{what}: invalid name {name!r}; expected letters, digits, '_' or '.', not starting with a digit"
        )
    return name


def exact(value: Any) -> Any:
    """``value`` (JSON-shaped) in a form whose ``==`` is exact, the equality of IR documents:
    a float equals only a float of the same repr (NaN equals NaN, -0.0 differs from 0.0 and
    2.0 from 2), a bool differs from an int, and lists equal tuples (both are JSON arrays)."""
    if isinstance(value, bool):
        return ("bool", value)
    if isinstance(value, float):
        return ("float", float.__repr__(value))
    if isinstance(value, dict):
        return {k: exact(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [exact(v) for v in value]
    return value


class Input(FrozenModel):
    """A program input: a name, a static type and whether it may be differentiated.

    Only a float input can be differentiated: ``requires_grad`` defaults to whether the
    dtype is a float one (an integer or bool input is data), and ``requires_grad=True``
    on another dtype is a ContractError naming the input, from the builder, JSON and the
    textual IR alike.
    """

    model_config = _CONFIG
    name: str
    type: TensorType
    requires_grad: bool = True

    @model_validator(mode="before")
    @classmethod
    def _data_by_default(cls, data: Any) -> Any:
        if isinstance(data, dict) and "requires_grad" not in data:
            dtype = _declared_dtype(data.get("type"))
            if dtype is not None and not is_float(dtype):
                data = {**data, "requires_grad": False}
        return data

    @model_validator(mode="after")
    def _differentiable_is_float(self) -> Input:
        if self.requires_grad and not is_float(self.type.dtype):
            raise ContractError(
                f"input {self.name!r}: requires_grad=True needs a float dtype (float32 or float64), found "
                f"{self.type.dtype}; declare it with requires_grad=False (integer and bool inputs are data)"
            )
        return self


def _declared_dtype(ttype: Any) -> str | None:
    """The canonical dtype of an input's ``type`` as given (a TensorType or its JSON
    object), or None when it is not one (the type's own validation then says why)."""
    dtype = ttype.dtype if isinstance(ttype, TensorType) else ttype.get("dtype") if isinstance(ttype, dict) else None
    try:
        return None if dtype is None else check_dtype(dtype, "input")
    except ContractError:
        return None


class Output(FrozenModel):
    """A program output: the user-facing ``name`` and the ``value`` it returns."""

    model_config = _CONFIG
    name: str
    value: str


class Node(FrozenModel):
    """One op application. ``name`` names the node and the value it produces."""

    model_config = _CONFIG
    name: str
    op: str
    inputs: tuple[str, ...] = ()
    attrs: dict[str, Any] = Field(default_factory=dict)
    type: TensorType
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _canonical_attrs(cls, data: Any) -> Any:
        # Store attributes in canonical form (defaults filled, JSON-shaped) so equal
        # graphs compare equal whichever way they were written.
        if isinstance(data, dict) and isinstance(data.get("op"), str) and has_op(data["op"]):
            where = f"node {data.get('name', '?')!r}"
            data = dict(data)
            data["attrs"] = get_op(data["op"]).canonical_attrs(data.get("attrs") or {}, where)
        return data

    @property
    def opdef(self) -> OpDef:
        return get_op(self.op, f"node {self.name!r}")

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Node):
            return NotImplemented
        return exact(self.model_dump()) == exact(other.model_dump())


class Graph(FrozenModel):
    """A validated, frozen operator DAG with named inputs and outputs."""

    model_config = _CONFIG
    name: str
    inputs: tuple[Input, ...] = ()
    nodes: tuple[Node, ...] = ()
    outputs: tuple[Output, ...] = ()
    meta: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="after")
    def _validate(self) -> Graph:
        verify_graph(self)
        return self

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, Graph):
            return NotImplemented
        return exact(self.model_dump()) == exact(other.model_dump())

    # -- construction from documents, with ContractError instead of pydantic errors --
    @classmethod
    def model_validate_json(cls, json_data: str | bytes, **kwargs: Any) -> Graph:  # type: ignore[override]
        try:
            return super().model_validate_json(json_data, **kwargs)
        except ValidationError as exc:
            raise ContractError(describe_validation_error(exc, "graph JSON document")) from None

    @classmethod
    def model_validate(cls, obj: Any, **kwargs: Any) -> Graph:  # type: ignore[override]
        try:
            return super().model_validate(obj, **kwargs)
        except ValidationError as exc:
            raise ContractError(describe_validation_error(exc, "graph document")) from None

    @classmethod
    def from_json(cls, doc: str | bytes) -> Graph:
        return cls.model_validate_json(doc)

    if TYPE_CHECKING:  # bound by `dpt_ir.ir.text` (the syntax sits above the model it prints)

        @classmethod
        def from_text(cls, text: str) -> Graph: ...

        def to_text(self) -> str: ...

    def __str__(self) -> str:
        return self.to_text()

    # -- queries --
    @cached_property
    def types(self) -> dict[str, TensorType]:
        """Type of every value (inputs and nodes) by name."""
        out = {i.name: i.type for i in self.inputs}
        out.update((n.name, n.type) for n in self.nodes)
        return out

    @cached_property
    def node_map(self) -> dict[str, Node]:
        return {n.name: n for n in self.nodes}

    @cached_property
    def input_map(self) -> dict[str, Input]:
        return {i.name: i for i in self.inputs}

    def node(self, name: str) -> Node:
        try:
            return self.node_map[name]
        except KeyError:
            raise ContractError(f"graph {self.name!r} has no node {name!r}") from None

    def output_value(self, name: str) -> str:
        for o in self.outputs:
            if o.name == name:
                return o.value
        raise ContractError(f"graph {self.name!r} has no output {name!r}; outputs are {[o.name for o in self.outputs]}")

    @cached_property
    def consumers(self) -> dict[str, tuple[str, ...]]:
        """For every value, the nodes that read it, in node order."""
        users: dict[str, list[str]] = {v: [] for v in self.types}
        for n in self.nodes:
            for i in dict.fromkeys(n.inputs):
                users[i].append(n.name)
        return {k: tuple(v) for k, v in users.items()}

    def signature(self, node: Node) -> Signature:
        attrs = node.opdef.parse_attrs(node.attrs, f"node {node.name!r}")
        return Signature(tuple(self.types[i] for i in node.inputs), node.type, attrs)

    def to_networkx(self) -> nx.DiGraph:
        """Values as vertices, an edge from each node input to the node."""
        import networkx as nx

        g = nx.DiGraph()
        g.add_nodes_from(self.types)
        for n in self.nodes:
            g.add_edges_from((i, n.name) for i in n.inputs)
        return g

    def replace(self, **changes: Any) -> Graph:
        """A validated copy with some fields replaced."""
        data = {k: getattr(self, k) for k in ("name", "inputs", "nodes", "outputs", "meta")}
        data.update(changes)
        return Graph(**data)


def unique_name(base: str, taken: set[str]) -> str:
    """``base``, or ``base_<k>`` with the smallest k making it new; the name is added to ``taken``."""
    candidate, k = base, 0
    while candidate in taken:
        k += 1
        candidate = f"{base}_{k}"
    taken.add(candidate)
    return candidate


ORIGIN = "origin"  # node meta key: the user-level dp.* function that emitted the node


def verify_graph(graph: Graph) -> None:
    """Check every structural and typing invariant of ``graph``; ContractError naming the
    first offending node, input or output."""
    check_name(graph.name, "graph")
    seen: dict[str, str] = {}
    for inp in graph.inputs:
        check_name(inp.name, "input")
        if inp.name in seen:
            raise ContractError(f"input {inp.name!r}: duplicate name (already {seen[inp.name]})")
        seen[inp.name] = "an input"
    for node in graph.nodes:
        check_name(node.name, "node")
        if node.name in seen:
            raise ContractError(f"node {node.name!r}: duplicate name (already {seen[node.name]})")
        seen[node.name] = "a node"
    for node in graph.nodes:
        for ref in node.inputs:
            if ref not in seen:
                raise ContractError(
                    f"node {node.name!r}: input {ref!r} is not defined (dangling reference; "
                    "expected the name of an input or of another node)"
                )
    _check_acyclic_and_ordered(graph)
    types = {i.name: i.type for i in graph.inputs}
    for node in graph.nodes:
        _check_node_type(node, tuple(types[i] for i in node.inputs))
        types[node.name] = node.type
    if not graph.outputs:
        raise ContractError(f"graph {graph.name!r}: has no output (expected at least one)")
    out_names: set[str] = set()
    for out in graph.outputs:
        check_name(out.name, "output")
        if out.name in out_names:
            raise ContractError(f"output {out.name!r}: duplicate output name")
        out_names.add(out.name)
        if out.value not in types:
            raise ContractError(f"output {out.name!r}: value {out.value!r} is not defined in graph {graph.name!r}")


# Signatures already checked: (op name, op definition, attributes as exact JSON, input
# types, declared type). Passes rebuild graphs of mostly unchanged nodes, and every build
# verifies them all: the cache makes that a lookup, not an attribute parse and a type
# inference per node and pass. It holds each op definition it names (so its id is not
# reused by a re-registered op). Bounded: cleared when full.
_CHECKED: dict[tuple[Any, ...], OpDef] = {}
_CHECKED_MAX = 200_000


def _check_node_type(node: Node, in_types: tuple[TensorType, ...]) -> None:
    """The node's op exists, takes its arity and attributes, and gives its declared type."""
    where = f"node {node.name!r}"
    op = get_op(node.op, where)
    # Stored attributes are JSON-shaped (canonical), for which repr is exact (2 vs 2.0,
    # True vs 1, -0.0, nan); anything else is checked every time.
    attrs_key = repr(node.attrs) if _json_shaped(node.attrs) else None
    key = (
        node.op,
        id(op),
        attrs_key,
        tuple((t.shape, t.dtype) for t in in_types),
        (node.type.shape, node.type.dtype),
    )
    if attrs_key is not None and _CHECKED.get(key) is op:
        return
    op.check_arity(len(node.inputs), where)
    attrs = op.parse_attrs(node.attrs, where)
    expected = op.infer(in_types, attrs, where)
    if expected != node.type:
        raise ContractError(f"{where}: declared type {node.type} but op {node.op!r} gives {expected}")
    if attrs_key is not None:
        if len(_CHECKED) >= _CHECKED_MAX:
            _CHECKED.clear()
        _CHECKED[key] = op


def _json_shaped(value: Any) -> bool:
    """Is ``value`` made of dicts with str keys, lists, str, int, float, bool and None only?"""
    stack = [value]
    while stack:
        v = stack.pop()
        if isinstance(v, dict):
            if not all(isinstance(k, str) for k in v):
                return False
            stack.extend(v.values())
        elif isinstance(v, list):
            stack.extend(v)
        elif v is not None and not isinstance(v, str | int | float):
            return False
    return True


def _check_acyclic_and_ordered(graph: Graph) -> None:
    position = {n.name: k for k, n in enumerate(graph.nodes)}
    if all(position.get(ref, -1) < k for k, node in enumerate(graph.nodes) for ref in node.inputs):
        return  # every reference points backwards: ordered, hence acyclic
    import networkx as nx  # only a malformed document gets here: name its cycle

    g = nx.DiGraph()
    g.add_nodes_from(n.name for n in graph.nodes)
    g.add_edges_from((i, n.name) for n in graph.nodes for i in n.inputs if i in g)
    try:
        cycle = nx.find_cycle(g)
    except nx.NetworkXNoCycle:
        cycle = None
    if cycle:
        path = " -> ".join([u for u, _ in cycle] + [cycle[0][0]])
        raise ContractError(f"node {cycle[0][0]!r}: cycle in the graph ({path}); expected a DAG")
    for k, node in enumerate(graph.nodes):
        for ref in node.inputs:
            if position.get(ref, -1) >= k:
                raise ContractError(
                    f"node {node.name!r}: reads {ref!r}, which is defined after it "
                    "(nodes must be listed in topological order)"
                )

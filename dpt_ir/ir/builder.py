"""`GraphBuilder` and `Tensor` handles: the Python front end that records nodes.

Every op application goes through `GraphBuilder.emit`, which validates arity, attributes
and types eagerly, so a mistake is reported at the line that made it. Python operators
on `Tensor` map to ops of the table (``+`` is ``add``, ``x[1:3]`` is ``slice``...).

Provenance: a ``dp.*`` function decorated with `records_origin` marks every node emitted
while it runs with ``meta["origin"] = "dp.<name>"`` (the outermost such function wins, so
the nodes of ``dp.poisson_deviance`` say ``dp.poisson_deviance``, not the ``dp.log`` it
calls). Node meta round-trips through JSON and the textual IR, survives the passes, and
lets a `NumericalError` name the user-level function (`dpt_ir.ir.records.origin_of`).
"""

from __future__ import annotations

import contextlib
import contextvars
import functools
import itertools
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any, NoReturn, ParamSpec, TypeVar

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import ORIGIN, Graph, Input, Node, Output, check_name
from dpt_ir.ir.registry import get_op
from dpt_ir.ir.types import Scalar, TensorType, is_float, make_type

P = ParamSpec("P")
R = TypeVar("R")
# The user-level function being run, if any (a context variable: safe across threads).
_ORIGIN: contextvars.ContextVar[str | None] = contextvars.ContextVar("dpt_ir_origin", default=None)


@contextlib.contextmanager
def fresh_origin() -> Iterator[None]:
    """No user-level function is running inside: the nodes emitted record the ``dp.*``
    functions called within (a loop body traced inside ``dp.scan`` records the step's own)."""
    token = _ORIGIN.set(None)
    try:
        yield
    finally:
        _ORIGIN.reset(token)


def records_origin(fn: Callable[P, R]) -> Callable[P, R]:
    """Decorate a ``dp.*`` function so the nodes it emits record ``dp.<name>`` as their
    origin (unless an outer decorated function is already running: the outermost wins)."""
    label = f"dp.{fn.__name__}"

    @functools.wraps(fn)
    def wrapper(*args: P.args, **kwargs: P.kwargs) -> R:
        if _ORIGIN.get() is not None:
            return fn(*args, **kwargs)
        token = _ORIGIN.set(label)
        try:
            return fn(*args, **kwargs)
        finally:
            _ORIGIN.reset(token)

    return wrapper


class Tensor:
    """A handle on a value of the graph being built (made by `GraphBuilder.input` or by a
    ``dp.*`` function); it holds a name and a static `TensorType`, never data.

    Attributes: ``shape`` (tuple of ints), ``dtype`` (str), ``ndim``, ``size``, ``name``
    and ``builder``.

    Operators build nodes with NumPy's meaning, broadcasting and type promotion (a Python
    or NumPy scalar operand is a weak constant: it keeps the tensor's dtype, ``x * 2.0``
    stays float32; only a float scalar with an integer tensor gives float64):
    ``+ - * / **`` (add, sub, mul, div, pow; ``/`` of integers gives float64), ``@``
    (`dp.matmul`), unary
    ``-`` and ``abs()``, comparisons ``< <= > >= == !=`` (bool tensors), and on bool
    tensors ``& | ~`` (logical and, or, not). ``x.T`` reverses the axes;
    ``x.transpose(*axes)``, ``x.reshape(*shape)``, ``x.astype(dtype)``, ``x.sum(axis)``,
    ``x.mean(axis)``, ``x.max(axis)``, ``x.min(axis)`` are the ``dp.*`` functions.

    Indexing is NumPy's basic indexing, and gives a new tensor (a ``slice`` node, then
    ``squeeze`` for integer indices and ``expand_dims`` for ``None``), differentiable like
    any other node: ``x[1]`` (an int drops the axis; negative ints count from the end),
    ``x[:, 1:3]`` and ``x[::-2]`` (slices, any non-zero step, bounds clipped as in NumPy),
    ``x[..., 0]`` (one Ellipsis), ``x[None]`` / ``x[:, None]`` (new axes of size 1). An
    index out of bounds, a zero step, a float, a bool or more indices than axes raise
    ContractError. Integer index arrays (int32 tensors, integer NumPy arrays or lists)
    mixed with slices and ints are gathers with NumPy's broadcasting and placement rules
    (``x[:, idx]`` is ``dp.take(x, idx, axis=1)``; ``x[i, :, j]`` broadcasts ``i`` with
    ``j``); None cannot be mixed with them. ``len(x)`` is the first axis's size and
    iterating yields ``x[0], x[1], ...``.

    A tensor has no truth value (``if x:`` raises ContractError: use `dp.where`) and no
    NumPy value while the graph is built (``np.exp(x)`` raises: use `dp.exp`). Tensors of
    different builders never mix.
    """

    __array_priority__ = 1000  # numpy scalars on the left defer to our operators

    def __init__(self, builder: GraphBuilder, name: str, type: TensorType) -> None:
        self.builder = builder
        self.name = name
        self.type = type

    @property
    def shape(self) -> tuple[int, ...]:
        return self.type.shape

    @property
    def dtype(self) -> str:
        return self.type.dtype

    @property
    def ndim(self) -> int:
        return self.type.ndim

    @property
    def size(self) -> int:
        return self.type.size

    def __repr__(self) -> str:
        return f"Tensor(%{self.name}: {self.type})"

    def __bool__(self) -> bool:
        raise ContractError(
            f"tensor %{self.name}: a graph tensor has no truth value "
            "(use dp.where, dp.logical_and/or or comparisons inside the graph)"
        )

    def __array__(self, *args: object, **kwargs: object) -> NoReturn:
        raise ContractError(
            f"tensor %{self.name}: a graph tensor has no NumPy value while the graph is built "
            "(use dp.* functions instead of NumPy functions on it; evaluate with dp.interpret)"
        )

    __hash__ = object.__hash__

    # Operators are bound in dpt_ir.api.core, which owns the dp.* function set.


def innermost(builders: Iterable[GraphBuilder]) -> GraphBuilder | None:
    """The builder among ``builders`` that every other one encloses (a loop body's builder
    is enclosed by the builder it was opened from, see `GraphBuilder.parent`), or None."""
    pool = list(builders)
    for b in pool:
        chain = set()
        at: GraphBuilder | None = b
        while at is not None:  # bounded by the nesting depth of loop bodies
            chain.add(id(at))
            at = at.parent
        if all(id(o) in chain for o in pool):
            return b
    return None


def op_site(op_name: str, operands: Sequence[Tensor]) -> str:
    """How errors name an op application being built: ``op 'add' on %x, %y``."""
    if not operands:
        return f"op {op_name!r}"
    return f"op {op_name!r} on " + ", ".join(f"%{t.name}" for t in operands)


class GraphBuilder:
    """Records a graph: declare inputs, build values with operators and ``dp.*``
    functions, declare outputs, then ``build()`` a validated `Graph`."""

    # The builder this one was opened from (a loop body's builder; None for a graph).
    parent: GraphBuilder | None = None

    def __init__(self, name: str) -> None:
        self.name = check_name(name, "graph")
        self._inputs: list[Input] = []
        self._nodes: list[Node] = []
        self._outputs: list[Output] = []
        self._names: set[str] = set()
        self._counter = itertools.count()

    # -- declarations --
    def input(
        self,
        name: str,
        shape: Sequence[int],
        dtype: object = "float32",
        requires_grad: bool | None = None,
    ) -> Tensor:
        """Declare an input ``name`` of static ``shape`` and ``dtype`` (float32, float64,
        int32, uint8 or bool; a NumPy dtype works too). ``requires_grad=False`` marks it as
        data that is never differentiated (observations, weights, masks); only inputs
        with ``requires_grad=True`` may be named in ``wrt``. The default (None) is True
        for a float dtype and False otherwise; ``requires_grad=True`` on an integer or
        bool dtype is a ContractError (only a float can be differentiated)."""
        check_name(name, "input")
        where = f"input {name!r}"
        self._claim(name, where)
        ttype = make_type(shape, dtype, where)
        grad = is_float(ttype.dtype) if requires_grad is None else bool(requires_grad)
        self._inputs.append(Input(name=name, type=ttype, requires_grad=grad))
        return Tensor(self, name, ttype)

    def output(self, name: str, value: Tensor) -> None:
        """Declare output ``name`` returning ``value`` (names are unique; an output may be
        an input or any other value)."""
        check_name(name, "output")
        if any(o.name == name for o in self._outputs):
            raise ContractError(f"output {name!r}: duplicate output name")
        self.own(value, f"output {name!r}")
        self._outputs.append(Output(name=name, value=value.name))

    def build(self) -> Graph:
        """The recorded graph as a validated, frozen `Graph` (at least one output)."""
        if not self._outputs:
            raise ContractError(f"graph {self.name!r}: has no output (call builder.output(name, tensor) first)")
        return Graph(
            name=self.name,
            inputs=tuple(self._inputs),
            nodes=tuple(self._nodes),
            outputs=tuple(self._outputs),
        )

    # -- node emission --
    def emit(
        self,
        op_name: str,
        inputs: Sequence[Tensor],
        attrs: Mapping[str, Any] | None = None,
        name: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Tensor:
        """Append one node applying ``op_name``; validates everything before appending.
        Errors name the op and its operands (``op 'add' on %x, %y: ...``)."""
        op = get_op(op_name, f"op {op_name!r}")
        if isinstance(inputs, Tensor) or not isinstance(inputs, Sequence):
            raise ContractError(f"op {op_name!r}: inputs must be a list of dp tensors, found {type(inputs).__name__}")
        for t in inputs:
            self.own(t, f"op {op_name!r}")
        where = op_site(op_name, inputs)
        op.check_arity(len(inputs), where)
        parsed = op.parse_attrs(attrs or {}, where)
        out_type = op.infer(tuple(t.type for t in inputs), parsed, where)
        node_name = check_name(name, "node") if name is not None else self.fresh(op_name)
        self._claim(node_name, f"node {node_name!r}")
        node = Node(
            name=node_name,
            op=op_name,
            inputs=tuple(t.name for t in inputs),
            attrs=parsed.model_dump(mode="json"),
            type=out_type,
            meta=_with_origin(meta),
        )
        self._nodes.append(node)
        return Tensor(self, node_name, out_type)

    def constant(self, value: Scalar, dtype: str, shape: Sequence[int] = ()) -> Tensor:
        """A constant tensor (a scalar unless ``shape`` is given)."""
        return self.emit("constant", [], {"value": value, "dtype": dtype, "shape": list(shape)})

    def fresh(self, prefix: str) -> str:
        """A name not used yet in this builder, ``<prefix>_<n>``."""
        while True:
            candidate = f"{prefix}_{next(self._counter)}"
            if candidate not in self._names:
                return candidate

    def own(self, t: object, where: str) -> Tensor:
        """Check ``t`` is a Tensor of this builder."""
        if not isinstance(t, Tensor):
            raise ContractError(f"{where}: expected a dp tensor, found {type(t).__name__}")
        if t.builder is not self:
            raise ContractError(
                f"{where}: tensor %{t.name} belongs to graph builder {t.builder.name!r}, "
                f"not to {self.name!r} (tensors cannot cross builders)"
            )
        return t

    def _claim(self, name: str, where: str) -> None:
        if name in self._names:
            raise ContractError(f"{where}: duplicate name {name!r}")
        self._names.add(name)

    @property
    def node_count(self) -> int:
        """The nodes recorded so far."""
        return len(self._nodes)

    def nodes_since(self, start: int) -> tuple[Node, ...]:
        """The nodes recorded after the first ``start`` (a pass that places them itself)."""
        return tuple(self._nodes[start:])

    # -- reopening a graph (autodiff and passes extend existing graphs) --
    @classmethod
    def from_graph(cls, graph: Graph) -> tuple[GraphBuilder, dict[str, Tensor]]:
        """A builder holding ``graph``'s inputs and nodes (not its outputs), and a handle
        for every value by name."""
        b = cls(graph.name)
        b._inputs = list(graph.inputs)
        b._nodes = list(graph.nodes)
        b._names = set(graph.types)
        handles = {name: Tensor(b, name, t) for name, t in graph.types.items()}
        return b, handles

    def tag_since(self, start: int, meta: Mapping[str, Any]) -> None:
        """Merge ``meta`` into the meta of every node appended since position ``start``."""
        for k in range(start, len(self._nodes)):
            node = self._nodes[k]
            self._nodes[k] = node.with_(meta={**node.meta, **meta})

    def add_input(self, name: str, type: TensorType, requires_grad: bool = False) -> Tensor:
        """Declare an input of an already-checked type (used by passes)."""
        self._claim(name, f"input {name!r}")
        self._inputs.append(Input(name=name, type=type, requires_grad=requires_grad))
        return Tensor(self, name, type)

    def set_outputs(self, outputs: Sequence[Output]) -> None:
        self._outputs = list(outputs)

    @property
    def nodes(self) -> tuple[Node, ...]:
        return tuple(self._nodes)


def _with_origin(meta: Mapping[str, Any] | None) -> dict[str, Any]:
    """``meta`` plus the running user-level function as ``origin`` (see `records_origin`)."""
    out = dict(meta or {})
    origin = _ORIGIN.get()
    if origin is not None and ORIGIN not in out:
        out[ORIGIN] = origin
    return out

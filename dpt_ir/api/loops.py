"""`dp.scan` and `dp.fori_loop`: loops whose step is built once, as a body graph.

``dp.scan(step, init, xs=None, length=None, checkpoint=None)`` has ``jax.lax.scan``'s
semantics: ``step(carry, x) -> (carry, y)`` with ``carry`` one tensor or a tuple/list of
tensors (the same structure and types every step), ``x`` the slices ``xs[i]`` (one
tensor, a tuple/list, or None without ``xs``), ``y`` one tensor, a tuple/list or None. It
returns ``(final_carry, ys)``, ys stacked on a new axis 0. ``step`` runs once, with a
`BodyBuilder`: its tensors are the body's. A tensor of an enclosing graph that ``step``
uses (closes over) becomes an explicit input of the loop node, so gradients reach it.
Work that reads only enclosing tensors stays in the enclosing graph (computed once).

The loop is one ``scan`` node (see `dpt_ir.ops.loop` for the packed IR form) and one
``slice`` + ``reshape`` per result. Every carry and y shares one float dtype.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dpt_ir.api import core as F
from dpt_ir.api.loop_context import step_error
from dpt_ir.ir.builder import GraphBuilder, Tensor, fresh_origin, records_origin
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import TensorType, is_float
from dpt_ir.ops import revolve
from dpt_ir.ops.loop import result_types


class BodyBuilder(GraphBuilder):
    """The builder of a loop body, opened from ``parent``: a tensor of an enclosing builder
    that reaches one of its ops becomes a body input (``closure.<k>``), recorded in
    ``captures``. Once the body is built it refuses further nodes."""

    def __init__(self, name: str, parent: GraphBuilder) -> None:
        super().__init__(name)
        self.parent = parent
        self.captures: list[Tensor] = []  # the enclosing tensors, in capture order
        self._captured: dict[int, Tensor] = {}  # id(enclosing tensor) -> body input
        self.closed = False

    def capture(self, t: object, where: str) -> Tensor:
        """``t`` as a tensor of this body: itself, or the body input standing for an
        enclosing graph's tensor."""
        if not isinstance(t, Tensor) or t.builder is self:
            return super().own(t, where)
        at = self.parent
        while at is not None and t.builder is not at:
            at = at.parent
        if at is None:
            return super().own(t, where)  # raises: not ours, not an enclosing graph's
        inner = self._captured.get(id(t))
        if inner is None:
            outer = self.parent.capture(t, where) if isinstance(self.parent, BodyBuilder) else t
            inner = self.add_input(f"closure.{len(self.captures)}", outer.type, requires_grad=is_float(outer.dtype))
            self.captures.append(outer)
            self._captured[id(t)] = inner
        return inner

    def own(self, t: object, where: str) -> Tensor:
        """``t`` as a tensor of this body (`capture`): a function that checks an operand
        before emitting (an index or coordinate tensor) may close over an enclosing one."""
        return self.capture(t, where)

    def emit(
        self,
        op_name: str,
        inputs: Sequence[Tensor],
        attrs: Mapping[str, Any] | None = None,
        name: str | None = None,
        meta: Mapping[str, Any] | None = None,
    ) -> Tensor:
        if self.closed:
            raise ContractError(
                f"op {op_name!r}: reads a tensor of the body {self.name!r} of a loop that is already built "
                "(a body's tensors leave the loop only as carries or ys returned by the step)"
            )
        if isinstance(inputs, Sequence) and not isinstance(inputs, Tensor):
            inputs = [self.capture(t, f"op {op_name!r}") for t in inputs]
        return super().emit(op_name, inputs, attrs, name, meta)


def _leaves(tree: object, what: str) -> tuple[list[Tensor], str]:
    """The tensors of ``tree`` (a tensor, a tuple/list of tensors, or None) and its kind."""
    if tree is None:
        return [], "none"
    if isinstance(tree, Tensor):
        return [tree], "one"
    if isinstance(tree, tuple | list) and all(isinstance(t, Tensor) for t in tree):
        return list(tree), type(tree).__name__
    raise ContractError(
        f"{what}: expected a dp tensor, a tuple or list of dp tensors, or None, found {type(tree).__name__} {tree!r}"
    )


def _rebuild(leaves: list[Tensor], kind: str) -> Any:
    if kind == "none":
        return None
    if kind == "one":
        return leaves[0]
    return tuple(leaves) if kind == "tuple" else list(leaves)


@records_origin
def scan(
    step: Callable[[Any, Any], tuple[Any, Any]],
    init: Any,
    xs: Any = None,
    length: int | None = None,
    checkpoint: int | str | None = None,
    *,
    memory_budget: int | None = None,
) -> tuple[Any, Any]:
    """``jax.lax.scan``: loop ``step(carry, x) -> (carry, y)`` over the leading axis of ``xs``.

    ``init``: the initial carry (a tensor or a tuple/list of tensors). ``xs``: tensors
    stacked on axis 0, or None (then ``length`` is required). ``length`` must agree with
    ``xs``. Returns ``(final_carry, ys)`` with ``init``'s and ``y``'s structures.
    ``checkpoint`` chooses how the reverse sweep gets each step's carry: None stores them
    all, ``K`` (an int >= 1) runs binomial checkpointing (revolve) with ``K`` stored
    carries, ``"auto"`` stores as many as ``memory_budget`` bytes hold (default 256 MiB).
    """
    where = "dp.scan"
    revolve.check_policy(checkpoint, where)
    if not callable(step):
        raise ContractError(f"{where}: step must be a function (carry, x) -> (carry, y), found {type(step).__name__}")
    carries, carry_kind = _leaves(init, f"{where}: init")
    if not carries:
        raise ContractError(f"{where}: init must hold at least one carry tensor, found None")
    seq, xs_kind = _leaves(xs, f"{where}: xs")
    steps = _length(seq, length, where)
    outer = F.builder_of([*carries, *seq], where)
    for k, t in enumerate(carries):
        if not is_float(t.dtype) or t.dtype != carries[0].dtype:
            raise ContractError(
                f"{where}: carry {k} (%{t.name}) has dtype {t.dtype}; expected every carry to share one float dtype"
            )
    body, captures, ys_kind = _trace(step, outer, carries, carry_kind, seq, xs_kind, index=False, where=where)
    if steps == 0:
        return _no_steps(outer, body, carries, carry_kind, ys_kind)
    return _emit(
        outer,
        body,
        [*carries, *seq, *captures],
        steps,
        len(carries),
        len(seq),
        False,
        checkpoint,
        memory_budget,
        carry_kind,
        ys_kind,
    )


@records_origin
def fori_loop(n: int, body: Callable[[Tensor, Any], Any], init: Any) -> Any:
    """``body(i, carry) -> carry`` for ``i`` in ``0..n-1`` (``i`` an int32 scalar tensor);
    the final carry. A thin form of `scan` (store-every-carry reverse)."""
    where = "dp.fori_loop"
    if isinstance(n, bool) or not isinstance(n, int) or n < 0:
        raise ContractError(f"{where}: n must be an int >= 0 (the number of steps), found {n!r}")
    carries, carry_kind = _leaves(init, f"{where}: init")
    if not carries:
        raise ContractError(f"{where}: init must hold at least one carry tensor, found None")
    outer = F.builder_of(carries, where)

    def step(carry: Any, i: Any) -> tuple[Any, None]:
        return body(i, carry), None

    graph, captures, _ = _trace(step, outer, carries, carry_kind, [], "none", index=True, where=where)
    if n == 0:
        return _no_steps(outer, graph, carries, carry_kind, "none")[0]
    final, _ = _emit(outer, graph, [*carries, *captures], n, len(carries), 0, True, None, None, carry_kind, "none")
    return final


def _length(seq: list[Tensor], length: int | None, where: str) -> int:
    if length is not None and (isinstance(length, bool) or not isinstance(length, int)):
        raise ContractError(f"{where}: length must be an int, found {type(length).__name__} {length!r}")
    for k, t in enumerate(seq):
        if t.ndim == 0:
            raise ContractError(f"{where}: xs {k} (%{t.name}) is a scalar; expected tensors stacked on axis 0")
        if length is None:
            length = t.shape[0]
        if t.shape[0] != length:
            raise ContractError(
                f"{where}: xs {k} (%{t.name}) has {t.shape[0]} rows on axis 0; expected {length}, "
                "the length given or that of the other xs"
            )
    if length is None:
        raise ContractError(f"{where}: without xs the number of steps must be given as length=")
    if length < 0:
        raise ContractError(f"{where}: length must be >= 0, found {length}")
    return length


def _no_steps(outer: GraphBuilder, body: Any, carries: list[Tensor], carry_kind: str, ys_kind: str) -> tuple[Any, Any]:
    """A loop of no steps, as ``jax.lax.scan`` runs it: the carry is ``init`` and each ``y`` an
    empty stack of the step's ``y`` (``(0, *y.shape)``). No loop op is emitted: nothing runs,
    and the step, traced once, only gave the types."""
    ys = []
    for o in body.outputs[len(carries) :]:
        t = body.types[o.value]
        ys.append(outer.constant(F.coerce_scalar(0, t.dtype), t.dtype, (0, *t.shape)))
    return _rebuild(carries, carry_kind), _rebuild(ys, ys_kind)


def _trace(
    step: Callable[[Any, Any], tuple[Any, Any]],
    outer: GraphBuilder,
    carries: list[Tensor],
    carry_kind: str,
    seq: list[Tensor],
    xs_kind: str,
    index: bool,
    where: str,
) -> tuple[Any, list[Tensor], str]:
    """Run ``step`` once on body inputs; the body graph, the captured enclosing tensors
    and the structure of ``y``."""
    b = BodyBuilder(f"{outer.name}.body", outer)
    carry_in = [b.input(f"carry.{k}", t.shape, t.dtype) for k, t in enumerate(carries)]
    x_in = [b.input(f"x.{k}", t.shape[1:], t.dtype, requires_grad=is_float(t.dtype)) for k, t in enumerate(seq)]
    x_arg = _rebuild(x_in, xs_kind)
    if index:
        x_arg = b.input("index", (), "int32", requires_grad=False)
    try:
        with fresh_origin():  # body nodes record the dp.* functions the step calls
            result = step(_rebuild(carry_in, carry_kind), x_arg)
    except ContractError as e:
        if type(e) is not ContractError:
            raise
        raise step_error(where, e, carries, seq, b.captures) from e
    if not isinstance(result, tuple | list) or len(result) != 2:
        raise ContractError(f"{where}: step must return a pair (carry, y), found {type(result).__name__}")
    new_carry, new_kind = _leaves(result[0], f"{where}: the carry returned by step")
    ys, ys_kind = _leaves(result[1], f"{where}: the y returned by step")
    if new_kind != carry_kind or len(new_carry) != len(carries):
        raise ContractError(
            f"{where}: step returned a carry of {len(new_carry)} tensor(s) ({new_kind}); expected "
            f"{len(carries)} ({carry_kind}), the structure of init"
        )
    outs = [b.capture(t, f"{where}: result of step") for t in [*new_carry, *ys]]
    for k, t in enumerate(outs):
        b.output(f"carry.{k}" if k < len(carries) else f"y.{k - len(carries)}", t)
    b.closed = True
    return b.build(), b.captures, ys_kind


def _emit(
    outer: GraphBuilder,
    body: Any,
    inputs: list[Tensor],
    length: int,
    n_carry: int,
    n_xs: int,
    index: bool,
    checkpoint: Any,
    memory_budget: int | None,
    carry_kind: str,
    ys_kind: str,
) -> tuple[Any, Any]:
    attrs = {
        "body": body,
        "length": length,
        "carries": n_carry,
        "xs": n_xs,
        "index": index,
        "checkpoint": checkpoint,
        "memory_budget": memory_budget,
    }
    packed = outer.emit("scan", inputs, attrs)
    from dpt_ir.ops.loop import ScanAttrs

    results = _unpack(packed, result_types(body, ScanAttrs(**attrs)))
    return _rebuild(results[:n_carry], carry_kind), _rebuild(results[n_carry:], ys_kind)


def _unpack(packed: Tensor, types: list[TensorType]) -> list[Tensor]:
    out, offset = [], 0
    for t in types:
        out.append(F.reshape(packed[offset : offset + t.size], t.shape))
        offset += t.size
    return out

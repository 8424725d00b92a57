"""The loop op ``scan`` (a ``jax.lax.scan`` over a body graph); its reverse ``scan_vjp`` is
defined in `dpt_ir.ops.loop_reverse`.

IR form (see ``docs/loops.md``). A ``scan`` node's inputs are the initial carries, then the
stacked ``xs`` (step ``i`` reads ``xs[i]``), then the tensors of the outer graph its body
closes over. Its attribute ``body`` is a nested `Graph` whose inputs are, in order, the
carries, one slice of each ``xs``, the step index (an int32 scalar, when ``index``) and the
closed-over tensors; its outputs are the new carries, then the per-step ``ys``. A node has
one output, so the node's value is every result *packed* into one flat vector of the
carries' dtype: the final carries, then each stacked ``ys``, each flattened row-major;
`dp.scan` reads them back with ``slice`` + ``reshape`` nodes (ordinary IR, so the passes
and autodiff need nothing special). Every carry and ``y`` therefore shares one float dtype.

``scan_vjp`` takes the scan's inputs plus the packed cotangent and gives the packed
gradients of the scan's float inputs (`grad_layout`), in the carries' dtype. It reruns
the forward from the initial carry with the node's checkpoint policy (`dpt_ir.ops.revolve`)
and runs the body's vjp (its joint graph from the derivative table) each step in reverse.
Gradients of closed-over tensors are summed over the steps in reverse step order
(deterministic). Both ops have kind ``loop``.
"""

from __future__ import annotations

import functools
import json
import weakref
from collections.abc import Callable
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field, field_serializer, field_validator

from dpt_ir.api import core as F
from dpt_ir.ir import records
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import ALL_INPUTS, Derivative, GradContext, OpDef, register_op
from dpt_ir.ir.types import TensorType, is_float
from dpt_ir.ops import revolve


class ScanAttrs(BaseModel):
    """Attributes of ``scan`` and ``scan_vjp``.

    ``body``: the step as a `Graph` (stored as its JSON document); ``length``: steps
    (>= 1); ``carries``: how many carry tensors (>= 1); ``xs``: how many scanned inputs;
    ``index``: the body reads the step index; ``checkpoint``: the reverse sweep's policy
    (None, K >= 1 or ``"auto"``); ``memory_budget``: bytes of stored carries ``"auto"``
    may use (None: `revolve.DEFAULT_MEMORY_BUDGET`)."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)
    body: Any
    length: int = Field(ge=1)
    carries: int = Field(ge=1)
    xs: int = Field(default=0, ge=0)
    index: bool = False
    checkpoint: int | Literal["auto"] | None = None
    memory_budget: int | None = Field(default=None, ge=1)

    @field_validator("body", mode="before")
    @classmethod
    def _graph(cls, value: Any) -> Any:
        from dpt_ir.ir.graph import Graph

        if isinstance(value, Graph):
            return value
        if not isinstance(value, dict):
            raise ValueError(f"expected a graph document (a mapping), found {type(value).__name__}")
        return _body_from_document(json.dumps(value, sort_keys=True, allow_nan=True))

    @field_validator("checkpoint", mode="before")
    @classmethod
    def _policy(cls, value: Any) -> Any:
        try:
            return revolve.check_policy(value, "checkpoint")
        except ContractError as exc:
            raise ValueError(str(exc)) from None

    @field_serializer("body")
    def _document(self, body: Any) -> dict[str, Any]:
        return body.model_dump(mode="json")


@functools.lru_cache(maxsize=256)
def _body_from_document(doc: str) -> Any:
    """The body `Graph` of a JSON document (validated once per distinct body)."""
    from dpt_ir.ir.graph import Graph

    return Graph.model_validate_json(doc)


# -- types ---------------------------------------------------------------------------------
def split_inputs(n: int, a: ScanAttrs, where: str) -> tuple[range, range, range]:
    if n < a.carries + a.xs:
        raise ContractError(f"{where}: expected {a.carries} carries and {a.xs} xs inputs, found {n} inputs in all")
    return range(a.carries), range(a.carries, a.carries + a.xs), range(a.carries + a.xs, n)


def _check_body(inputs: tuple[TensorType, ...], a: ScanAttrs, where: str) -> str:
    """Check the body against the node's inputs; the carries' dtype."""
    body = a.body
    carry, xs, closure = split_inputs(len(inputs), a, where)
    expected = [inputs[k] for k in carry]
    for k in xs:
        t = inputs[k]
        if t.ndim == 0 or t.shape[0] != a.length:
            raise ContractError(
                f"{where}: xs input {k - a.carries} has shape {list(t.shape)}; expected a leading axis of "
                f"length {a.length} (the scan length)"
            )
        expected.append(TensorType(shape=t.shape[1:], dtype=t.dtype))
    if a.index:
        expected.append(TensorType(shape=(), dtype="int32"))
    expected += [inputs[k] for k in closure]
    found = [i.type for i in body.inputs]
    if found != expected:
        raise ContractError(
            f"{where}: body {body.name!r} takes inputs {[str(t) for t in found]}; expected "
            f"{[str(t) for t in expected]} (carries, xs slices, {'step index, ' if a.index else ''}closed-over tensors)"
        )
    dtype = inputs[0].dtype
    if not is_float(dtype):
        raise ContractError(f"{where}: carry 0 has dtype {dtype}; expected a float dtype")
    outs = [body.types[o.value] for o in body.outputs]
    if len(outs) < a.carries:
        raise ContractError(
            f"{where}: body {body.name!r} has {len(outs)} outputs; expected at least {a.carries} carries"
        )
    for k in carry:
        if outs[k] != inputs[k]:
            raise ContractError(
                f"{where}: the body's carry {k} changes type: it enters as {inputs[k]} and leaves as {outs[k]}; "
                "expected the same shape and dtype every step"
            )
    for k, t in enumerate(outs):
        if t.dtype != dtype:
            role = f"carry {k}" if k < a.carries else f"y {k - a.carries}"
            raise ContractError(f"{where}: the body's {role} has dtype {t.dtype}; expected {dtype}, the carries' dtype")
    return dtype


def body_input(a: ScanAttrs, k: int) -> str:
    """The body input standing for loop input ``k`` (the step index sits before the closures)."""
    return a.body.inputs[k if k < a.carries + a.xs else k + (1 if a.index else 0)].name


def result_types(body: Any, a: ScanAttrs) -> list[TensorType]:
    """The types of a scan's results: the final carries, then the stacked ys."""
    outs = [body.types[o.value] for o in body.outputs]
    return outs[: a.carries] + [TensorType(shape=(a.length, *t.shape), dtype=t.dtype) for t in outs[a.carries :]]


def infer_scan(inputs: tuple[TensorType, ...], a: ScanAttrs, where: str) -> TensorType:
    dtype = _check_body(inputs, a, where)
    return TensorType(shape=(sum(t.size for t in result_types(a.body, a)),), dtype=dtype)


def grad_layout(inputs: tuple[TensorType, ...]) -> list[tuple[int, int, int]]:
    """(input index, offset, size) of each float input in a packed gradient."""
    layout, offset = [], 0
    for k, t in enumerate(inputs):
        if is_float(t.dtype):
            layout.append((k, offset, t.size))
            offset += t.size
    return layout


def packed_part(vjp: Any, inputs: tuple[TensorType, ...], k: int, shape: tuple[int, ...], op: str) -> Any:
    """Float input ``k``'s gradient, in ``shape``, out of the packed gradient ``vjp`` of a
    loop op (``op``) over ``inputs`` (`grad_layout`)."""
    for at, offset, size in grad_layout(inputs):
        if at == k:
            return F.reshape(vjp[offset : offset + size], shape)
    raise AssertionError(f"{op} input {k} is not a float input")  # autodiff only asks for float inputs


# -- NumPy references -------------------------------------------------------------------------
def pack(arrays: list[np.ndarray], dtype: str) -> np.ndarray:
    return np.concatenate([np.asarray(x, dtype=dtype).ravel() for x in arrays]) if arrays else np.zeros(0, dtype)


def unpack(flat: np.ndarray, types: list[TensorType]) -> list[np.ndarray]:
    out, offset = [], 0
    for t in types:
        out.append(flat[offset : offset + t.size].reshape(t.shape))
        offset += t.size
    return out


class Stepper:
    """Runs the body's forward and its vjp at step ``i`` (NumPy, via the interpreter)."""

    def __init__(self, a: ScanAttrs, arrays: tuple[np.ndarray, ...]) -> None:
        from dpt_ir.reference.interpreter import evaluate

        self.evaluate = evaluate
        self.a = a
        self.body = a.body
        carry, xs, closure = split_inputs(len(arrays), a, "scan")
        self.xs = [arrays[k] for k in xs]
        self.closure = [arrays[k] for k in closure]
        self.names = [i.name for i in self.body.inputs]

    def feed(self, carry: list[np.ndarray], i: int) -> dict[str, np.ndarray]:
        values = [*carry, *(x[i] for x in self.xs)]
        if self.a.index:
            values.append(np.asarray(i, dtype=np.int32))
        values += self.closure
        return dict(zip(self.names, values, strict=True))

    def forward(self, carry: list[np.ndarray], i: int) -> tuple[list[np.ndarray], list[np.ndarray]]:
        env = self.evaluate(self.body, self.feed(carry, i))
        results = [env[o.value] for o in self.body.outputs]
        return results[: self.a.carries], results[self.a.carries :]

    def vjp(self, carry: list[np.ndarray], i: int, cts: list[np.ndarray]) -> dict[str, np.ndarray]:
        joint = body_vjp(self.body)
        feed = self.feed(carry, i)
        ct_names = records.joint_record(joint).cotangents
        feed.update({ct_names[o.name]: ct for o, ct in zip(self.body.outputs, cts, strict=True)})
        env = self.evaluate(joint, feed)
        grads = records.joint_record(joint).gradients
        return {w: env[joint.output_value(g)] for w, g in grads.items()}


def body_vjp(body: Any) -> Any:
    """The body's joint forward/backward graph: every output seeded, every float input
    differentiated (cached per body)."""
    return _body_vjp(body.model_dump_json())


@functools.lru_cache(maxsize=64)
def _body_vjp(doc: str) -> Any:
    from dpt_ir.api.autodiff import joint_graph

    body = _body_from_document(doc)
    wrt = [i.name for i in body.inputs if is_float(i.type.dtype)]
    return joint_graph(body, wrt, [o.name for o in body.outputs])


def _scan_ref(a: ScanAttrs, *arrays: np.ndarray) -> np.ndarray:
    stepper = Stepper(a, arrays)
    carry = list(arrays[: a.carries])
    rows: list[list[np.ndarray]] = []
    for i in range(a.length):
        carry, ys = stepper.forward(carry, i)
        rows.append(ys)
    stacked = [np.stack([r[j] for r in rows]) for j in range(len(rows[0]))] if rows and rows[0] else []
    return pack([*carry, *stacked], arrays[0].dtype.name)


def checkpoint_plan(a: ScanAttrs, inputs: tuple[TensorType, ...]) -> revolve.CheckpointPlan:
    """The node's checkpoint policy resolved for its length and carries."""
    carry_bytes = sum(inputs[k].nbytes for k in range(a.carries))
    return revolve.plan(a.length, carry_bytes, a.checkpoint, a.memory_budget, "scan")


# -- the derivative entry ------------------------------------------------------------------------
# One loop node built by a formula serves the gradients of all the inputs of the node being
# differentiated: the formulas for the inputs of one node see the same cotangent handle, so
# the node built for the first is reused (keyed by the handle's identity, held weakly, and a tag).
_SHARED: dict[tuple[int, str], tuple[weakref.ref[Any], Any]] = {}


def once_per_cotangent(gy: Any, tag: str, build: Callable[[], Any]) -> Any:
    """``build()`` the first time a formula of the node whose cotangent is ``gy`` asks for
    ``tag``; the same result for the formulas of that node's other inputs."""
    entry = _SHARED.get((id(gy), tag))
    if entry is None or entry[0]() is not gy:
        if len(_SHARED) > 1024:
            _SHARED.clear()
        entry = (weakref.ref(gy), build())
        _SHARED[(id(gy), tag)] = entry
    return entry[1]


def _scan_grad(c: GradContext) -> Any:
    ins = [c.input(k) for k in range(len(c.sig.inputs))]
    vjp = once_per_cotangent(
        c.gy,
        "scan_vjp",
        lambda: F.builder_of([*ins, c.gy], "scan").emit("scan_vjp", [*ins, c.gy], c.attrs.model_dump(mode="json")),
    )
    return packed_part(vjp, c.sig.inputs, c.index, c.input_type(c.index).shape, "scan")


register_op(
    OpDef(
        name="scan",
        kind="loop",
        arity=None,
        attrs=ScanAttrs,
        infer=infer_scan,
        reference=_scan_ref,
        derivative=Derivative(formulas={ALL_INPUTS: _scan_grad}, saved_inputs=ALL_INPUTS),
        cost="expensive",
        doc="jax.lax.scan of a body graph; the final carries and stacked ys packed in one vector (dp.scan)",
    )
)

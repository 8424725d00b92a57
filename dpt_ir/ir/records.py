"""Typed records of pass results that a graph carries: the one module that reads or writes
their keys in ``graph.meta`` and ``node.meta``.

A pass result travels with its graph (through the textual IR, JSON and the disk cache), so
it is stored in the graph's ``meta`` as plain JSON. Everything else reads it through the
models and accessors here, as `dpt_ir.ir.kernel_ir` does for the kernel plan:

- `Autodiff` (written by autodiff): the ``wrt`` inputs, the cotangent input of each seeded
  output, the gradient output of each ``wrt`` input, and the seeds fixed at compile time;
- `Derived` (written by `dpt_ir.api.second_order`): a graph derived for forward mode or
  second order (jvp, hvp, gnvp): the inputs that carry the vectors and the outputs that carry
  the products. The intermediate levels of such a graph each carry their own `Autodiff`
  record while they are built; the finished graph has only this one;
- `SavedPlan` (written by saved_attributes): the saved values, the recomputed clones and the
  derived attributes, each with its reason;
- node tags: a node's ``phase`` (forward or backward), the forward node it is the gradient
  of (``grad_of``), the value it recomputes (``recompute_of``) and its fusion ``group``.

Assumes: nothing of the package above `dpt_ir.ir`. Guarantees: a record read back equals
the record written (``model_dump(mode="json")`` in, ``model_validate`` out); a malformed
record is a ContractError naming the graph and the field.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, JsonValue, ValidationError

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import ORIGIN, Graph, Node
from dpt_ir.ir.types import describe_validation_error

Phase = Literal["forward", "backward"]

# graph meta keys
WRT, COTANGENTS, GRADIENTS, FIXED_SEEDS = "wrt", "cotangents", "gradients", "fixed_seeds"
SAVED, SAVED_BYTES, RECOMPUTED, DERIVED = "saved", "saved_bytes", "recomputed", "derived_attributes"
DERIVED_GRAPH = "derived_from"
# node meta keys
PHASE, GRAD_OF, RECOMPUTE_OF, GROUP = "phase", "grad_of", "recompute_of", "group"


class Record(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Autodiff(Record):
    """The joint graph's differentiation: ``cotangents`` maps each seeded output to its
    cotangent input (only seeds unknown at compile time), ``gradients`` each ``wrt`` input to
    its gradient output, ``fixed_seeds`` the seeds folded to constants."""

    wrt: tuple[str, ...]
    cotangents: dict[str, str]
    gradients: dict[str, str]
    fixed_seeds: dict[str, float] = {}


DerivedKind = Literal["jvp", "hvp", "gnvp"]


class Derived(Record):
    """A graph derived from a forward graph for forward mode or second order, computed in one
    forward-only evaluation: ``kind`` jvp (``J v`` of the ``of`` outputs), hvp (``H v`` of the
    loss ``of[0]``, and its gradient) or gnvp (``J_rᵀ J_r v`` of the residual ``of[0]``).
    ``vectors`` maps each ``wrt`` input to the input carrying its vector; ``products`` maps each
    product's subject (jvp: an output; hvp and gnvp: a ``wrt`` input) to its output;
    ``gradients`` (hvp) each ``wrt`` input to its gradient output."""

    kind: DerivedKind
    wrt: tuple[str, ...]
    of: tuple[str, ...]
    vectors: dict[str, str]
    products: dict[str, str]
    gradients: dict[str, str] = {}


class SavedValue(Record):
    """A forward value the backward reads: its bytes, type, provenance (the forward node),
    the backward nodes that read it and why it is saved rather than recomputed."""

    value: str
    bytes: int
    type: str
    provenance: str
    op: str
    readers: tuple[str, ...]
    reason: str


class Recomputed(Record):
    """A backward clone of forward value ``recomputes``: its work per element (``own_work``
    its op's), the bytes saving it would have cost, the budget and the reason."""

    value: str
    recomputes: str
    op: str
    work: int
    own_work: int
    save_bytes: int
    budget: int | None
    reason: str


class DerivedAttribute(Record):
    """A static attribute of ``node`` (a count, a shape) a backward formula reads instead of
    a tensor."""

    node: str
    op: str
    attribute: str
    value: JsonValue


class SavedPlan(Record):
    """What crosses from forward to backward: the saved set, its bytes, the recomputed clones
    and the derived attributes."""

    saved: tuple[SavedValue, ...]
    saved_bytes: int
    recomputed: tuple[Recomputed, ...] = ()
    derived_attributes: tuple[DerivedAttribute, ...] = ()


_AUTODIFF_KEYS = (WRT, COTANGENTS, GRADIENTS, FIXED_SEEDS)
_SAVED_KEYS = (SAVED, SAVED_BYTES, RECOMPUTED, DERIVED)


def _read(graph: Graph, model: type[Record], keys: tuple[str, ...]) -> Any:
    doc = {k: graph.meta[k] for k in keys if k in graph.meta}
    try:
        return model.model_validate(doc)
    except ValidationError as exc:
        raise ContractError(
            describe_validation_error(exc, f"{model.__name__} record of graph {graph.name!r}")
        ) from None


def autodiff_of(graph: Graph) -> Autodiff | None:
    """The graph's `Autodiff` record; None for a graph autodiff has not extended."""
    return _read(graph, Autodiff, _AUTODIFF_KEYS) if GRADIENTS in graph.meta else None


def joint_record(graph: Graph) -> Autodiff:
    """The `Autodiff` record of a joint graph; ContractError naming the graph when autodiff has
    not extended it."""
    record = autodiff_of(graph)
    if record is None:
        raise ContractError(f"graph {graph.name!r}: expected a joint graph (autodiff's record), found none")
    return record


def cotangents(graph: Graph) -> dict[str, str]:
    """Seeded output -> its cotangent input; empty for a forward-only graph."""
    record = autodiff_of(graph)
    return {} if record is None else dict(record.cotangents)


def gradients(graph: Graph) -> dict[str, str]:
    """``wrt`` input -> its gradient output; empty for a forward-only graph."""
    record = autodiff_of(graph)
    return {} if record is None else dict(record.gradients)


def wrt_of(graph: Graph) -> tuple[str, ...]:
    """The inputs the graph differentiates; empty for a forward-only graph."""
    record = autodiff_of(graph)
    return () if record is None else record.wrt


def with_autodiff(meta: dict[str, Any], record: Autodiff) -> dict[str, Any]:
    """``meta`` holding ``record`` in place of any earlier one (``fixed_seeds`` only when some
    seed is fixed, as autodiff always wrote it)."""
    doc = record.model_dump(mode="json")
    if not record.fixed_seeds:
        doc.pop(FIXED_SEEDS)
    rest = {k: v for k, v in meta.items() if k not in _AUTODIFF_KEYS}
    return {**rest, **doc}


def without_autodiff(meta: dict[str, Any]) -> dict[str, Any]:
    """``meta`` without an `Autodiff` record (a derived graph's finished levels)."""
    return {k: v for k, v in meta.items() if k not in _AUTODIFF_KEYS}


def derived_record(graph: Graph) -> Derived:
    """The `Derived` record of a jvp, hvp or gnvp graph; ContractError naming the graph when it
    has none."""
    record = derived_of(graph)
    if record is None:
        raise ContractError(f"graph {graph.name!r}: expected a derived graph (jvp, hvp or gnvp record), found none")
    return record


def derived_of(graph: Graph) -> Derived | None:
    """The graph's `Derived` record; None for a graph not derived for jvp, hvp or gnvp."""
    if DERIVED_GRAPH not in graph.meta:
        return None
    try:
        return Derived.model_validate(graph.meta[DERIVED_GRAPH])
    except ValidationError as exc:
        raise ContractError(describe_validation_error(exc, f"Derived record of graph {graph.name!r}")) from None


def with_derived(meta: dict[str, Any], record: Derived) -> dict[str, Any]:
    """``meta`` holding ``record`` in place of any earlier one."""
    return {**meta, DERIVED_GRAPH: record.model_dump(mode="json")}


def saved_plan_of(graph: Graph) -> SavedPlan | None:
    """The graph's `SavedPlan`; None before saved_attributes has run."""
    return _read(graph, SavedPlan, _SAVED_KEYS) if SAVED in graph.meta else None


def saved_bytes(graph: Graph) -> int:
    """The bytes of the saved set; 0 before saved_attributes has run."""
    plan = saved_plan_of(graph)
    return 0 if plan is None else plan.saved_bytes


def saved_values(graph: Graph) -> set[str]:
    """The names of the saved values; empty before saved_attributes has run."""
    plan = saved_plan_of(graph)
    return set() if plan is None else {r.value for r in plan.saved}


def is_partitioned(graph: Graph) -> bool:
    """Whether saved_attributes has tagged every node with its phase."""
    return SAVED in graph.meta


def with_saved_plan(meta: dict[str, Any], plan: SavedPlan, *, recomputed: bool = True) -> dict[str, Any]:
    """``meta`` holding ``plan`` (without the ``recomputed`` key when ``recomputed`` is off:
    a graph that has nothing in its backward phase records no clones)."""
    doc = plan.model_dump(mode="json")
    if not recomputed:
        doc.pop(RECOMPUTED)
    rest = {k: v for k, v in meta.items() if k not in _SAVED_KEYS}
    return {**rest, **doc}


def phase_of(node: Node) -> Phase:
    """``forward`` unless autodiff or the partitioner tagged the node ``backward``."""
    return node.meta.get(PHASE, "forward")


def has_phase(node: Node) -> bool:
    """Whether the node carries an explicit phase tag."""
    return PHASE in node.meta


def grad_of(node: Node) -> str | None:
    """The forward node (or wrt input, or ``seed``) whose gradient this backward node computes."""
    return node.meta.get(GRAD_OF)


def recompute_of(node: Node) -> str | None:
    """The forward value this backward clone recomputes; None for any other node."""
    return node.meta.get(RECOMPUTE_OF)


def group_of(node: Node) -> str:
    """The fusion group the node belongs to; empty before fusion."""
    return str(node.meta.get(GROUP, ""))


def backward_tags(of: str) -> dict[str, str]:
    """The node tags of a backward node computing the gradient of ``of``."""
    return {PHASE: "backward", GRAD_OF: of}


def phase_tag(phase: Phase) -> dict[str, str]:
    """The node tag of a node of ``phase``."""
    return {PHASE: phase}


def recompute_tags(of: str) -> dict[str, str]:
    """The node tags of a backward clone recomputing forward value ``of``."""
    return {PHASE: "backward", RECOMPUTE_OF: of}


def group_tag(group: str) -> dict[str, str]:
    """The node tag of a member of fusion group ``group``."""
    return {GROUP: group}


def origin_of(graph: Graph, name: str) -> str:
    """The user-level function a node of ``graph`` comes from, for messages: its origin
    (``"dp.poisson_deviance"``, recorded by the builder under `dpt_ir.ir.graph.ORIGIN`), or for
    a backward node the origin of the forward node it was made for (``"the gradient of
    dp.poisson_deviance"``); "" when none is known."""
    node = graph.node_map.get(name)
    if node is None:
        return ""
    forward_name = grad_of(node)
    if forward_name is None:  # a forward node, or a recomputed clone (it copies the meta)
        return str(node.meta.get(ORIGIN, ""))
    # A backward node: any origin of its own came from a derivative formula, not the user.
    forward = graph.node_map.get(forward_name)
    if forward is None or not forward.meta.get(ORIGIN):
        return ""
    return f"the gradient of {forward.meta[ORIGIN]}"

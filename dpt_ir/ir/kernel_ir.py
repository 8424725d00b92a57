"""The kernel IR: what `fusion` and `schedule` decide, as typed, frozen, validated models.

Assumes: nothing about the graph (a plan names values; `verify` checks them against the
graph it belongs to).
Guarantees: a `KernelPlan` holds the program's kernels (`KernelGroup`, in launch order),
why each materialised value is a kernel boundary (`Boundary`), which multi-read producers
are recomputed over a stencil's halo (`Halo`) and, once `schedule` ran, the buffers
(`Schedule`, `Buffer`), and the row sets of row-local fusion (`RowSet`). Each model's
fields are named after the keys of the JSON records they serialise to
(``Boundary.from_`` is the one exception: ``from`` is a Python keyword; it serialises as
``from``).

The plan lives in the graph's ``meta`` under the keys of `PLAN_KEYS`, serialised as plain
JSON (so a `Graph` stays a frozen JSON document whose text round-trips, and whose JSON
keys the disk cache): `with_plan` validates a plan on the way in, `plan_of` on the way
out, once per graph (the parsed plan is cached on the graph object and reused while the
graph's meta still holds the same records). Every consumer reads the typed plan.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any, Literal

from pydantic import ConfigDict, Field, ValidationError, model_validator

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import DType, FrozenModel, describe_validation_error

if TYPE_CHECKING:
    from dpt_ir.ir.graph import Graph

PLAN_KEYS: tuple[str, ...] = ("groups", "boundaries", "halo", "schedule", "rows")
_CACHE = "_kernel_plan"  # graph.__dict__ entry: (the meta records parsed, the plan)

Phase = Literal["forward", "backward"]
GroupKind = Literal["pointwise", "reduction", "scatter", "contraction", "recurrence", "projection"]


class ScatterForm(FrozenModel):
    """How a scatter group's node is made deterministic without float atomics:
    ``transpose`` (positions known at compile time: an ordered gather) or ``sort``
    (positions depend on a program input: a counting sort by destination per
    evaluation, then an ordered segmented sum), and why."""

    node: str
    form: Literal["transpose", "sort"]
    reason: str


class KernelGroup(FrozenModel):
    """One kernel: its ``id`` (``f<k>``/``b<k>``, unique), ``phase``, ``kind``, iteration
    ``space`` (the output shape, or a reduction's input shape), reduced ``axes``, its
    ``nodes`` in topological order, the ``roots`` it computes for others, the ``epilogue``
    roots computed from a finished reduction, the values it reads from (``inputs``) and
    writes to (``outputs``) memory, the bytes of both, and a scatter's ``scatter`` form
    (present exactly for kind ``scatter``)."""

    id: str
    phase: Phase
    kind: GroupKind
    space: tuple[int, ...]
    axes: tuple[int, ...] = ()
    epilogue: tuple[str, ...] = ()
    nodes: tuple[str, ...]
    roots: tuple[str, ...]
    inputs: tuple[str, ...]
    outputs: tuple[str, ...]
    bytes_read: int = Field(ge=0)
    bytes_written: int = Field(ge=0)
    scatter: ScatterForm | None = None

    @model_validator(mode="after")
    def _scatter_form(self) -> KernelGroup:
        if (self.scatter is None) == (self.kind == "scatter"):
            found = "no scatter form" if self.scatter is None else f"a scatter form on a {self.kind} group"
            raise ContractError(
                f"kernel group {self.id!r}: expected a scatter form exactly on a scatter group, found {found}"
            )
        return self

    def check(self) -> None:
        """ContractError unless the nodes are distinct and every root, epilogue root and
        output is one of them (`verify` asks, after its dataflow checks)."""
        where = f"kernel group {self.id!r}"
        members = set(self.nodes)
        if len(members) != len(self.nodes):
            raise ContractError(f"{where}: expected distinct nodes, found {list(self.nodes)}")
        for what, names in (("root", self.roots), ("epilogue root", self.epilogue), ("output", self.outputs)):
            stray = [n for n in names if n not in members]
            if stray:
                raise ContractError(f"{where}: expected its {what}s among its nodes, found {stray} outside them")


class Boundary(FrozenModel):
    """A value written by kernel ``from`` and read by kernel ``to`` (not fused), and why."""

    model_config = ConfigDict(frozen=True, extra="forbid", populate_by_name=True)
    value: str
    from_: str = Field(alias="from")
    to: str
    reason: str


class Halo(FrozenModel):
    """A producer ``value`` recomputed inline at each of its ``reads`` reads per element by
    the multi-read node ``stencil``, at ``cost`` op work per read, instead of written."""

    value: str
    stencil: str
    reads: int = Field(ge=1)
    cost: int = Field(ge=0)


class Buffer(FrozenModel):
    """One allocation: ``size`` elements of ``dtype`` (``bytes`` in all), holding the
    ``values`` listed (over disjoint live ranges); ``output``: a graph output's own."""

    id: str
    dtype: DType
    size: int = Field(ge=0)
    bytes: int = Field(ge=0)
    output: bool
    values: tuple[str, ...]


class Schedule(FrozenModel):
    """Kernel ``order`` (group ids), the ``buffers``, ``assignment`` (value -> buffer id,
    exactly the buffers' values), ``workspace_bytes`` (intermediate buffers) and
    ``output_bytes`` (graph outputs' buffers)."""

    order: tuple[str, ...]
    buffers: tuple[Buffer, ...]
    assignment: dict[str, str]
    workspace_bytes: int = Field(ge=0)
    output_bytes: int = Field(ge=0)

    @staticmethod
    def held(buffers: tuple[Buffer, ...]) -> dict[str, str]:
        """Value -> id of the buffer holding it: the ``assignment`` that ``buffers`` make."""
        return {v: b.id for b in buffers for v in b.values}

    def check(self) -> None:
        """ContractError unless ``assignment`` is exactly the buffers' values and the byte
        totals are the buffers' (`verify` asks, after its liveness checks)."""
        held = self.held(self.buffers)
        if held != self.assignment:
            raise ContractError(f"schedule: expected the assignment {held} of its buffers, found {self.assignment}")
        sums = {
            "workspace_bytes": sum(b.bytes for b in self.buffers if not b.output),
            "output_bytes": sum(b.bytes for b in self.buffers if b.output),
        }
        for key, total in sums.items():
            if getattr(self, key) != total:
                raise ContractError(f"schedule: expected {key} {total} (its buffers'), found {getattr(self, key)}")


class RowSet(FrozenModel):
    """A row set (`fusion_rows`): the consecutive ``groups`` one CPU task runs row after row
    over the space ``space`` (rows of the trailing ``axes``, ``row`` elements each) while the
    row is in cache, ``row_bytes`` of full-shape values per row, and why (`KernelPlan.rows`)."""

    id: str
    groups: tuple[str, ...] = Field(min_length=2)
    space: tuple[int, ...]
    axes: tuple[int, ...] = Field(min_length=1)
    row: int = Field(ge=2)
    row_bytes: int = Field(ge=0)
    reason: str


class KernelPlan(FrozenModel):
    """The program's kernels in launch order (producers first, forward before backward),
    its boundaries and halo notes, and its schedule once `schedule` ran (whose ``order``
    is then the groups' ids). Fields are validated by type on construction; the
    relations between them by `check` (`verify` calls it after its own checks, so a
    broken plan is reported by the first invariant it breaks)."""

    groups: tuple[KernelGroup, ...]
    boundaries: tuple[Boundary, ...] = ()
    halo: tuple[Halo, ...] = ()
    schedule: Schedule | None = None
    rows: tuple[RowSet, ...] = ()  # row sets (`fusion_rows`); serialised only when there is one

    def check(self) -> None:
        """ContractError unless group ids are unique, each group is consistent, and the
        schedule (if any) orders exactly the groups and agrees with its buffers."""
        ids = [g.id for g in self.groups]
        if len(set(ids)) != len(ids):
            raise ContractError(f"kernel plan: expected unique group ids, found {ids}")
        for g in self.groups:
            g.check()
        if self.schedule is not None:
            if list(self.schedule.order) != ids:
                raise ContractError(f"schedule: expected the kernels' order {ids}, found {list(self.schedule.order)}")
            self.schedule.check()
        position = {g: k for k, g in enumerate(ids)}
        for r in self.rows:
            at = [position.get(g, -1) for g in r.groups]
            if -1 in at or at != list(range(at[0], at[0] + len(at))):
                found = list(r.groups)
                raise ContractError(f"row set {r.id!r}: expected consecutive kernels of the plan, found {found}")

    def group(self, gid: str) -> KernelGroup:
        """The group with id ``gid``."""
        for g in self.groups:
            if g.id == gid:
                return g
        raise ContractError(f"kernel plan: no group {gid!r}; groups are {[g.id for g in self.groups]}")

    def scheduled(self) -> Schedule:
        """The schedule; ContractError when the `schedule` pass has not run."""
        if self.schedule is None:
            raise ContractError("kernel plan: no schedule (the schedule pass has not run)")
        return self.schedule

    def to_meta(self) -> dict[str, Any]:
        """The JSON records the plan serialises to, by `PLAN_KEYS` key (no ``schedule`` before
        `schedule` ran)."""
        doc = self.model_dump(mode="json", by_alias=True, exclude_none=True)
        if not self.rows:
            doc.pop("rows")  # plans without row sets read as before row-local fusion
        return {k: doc[k] for k in PLAN_KEYS if k in doc}


def has_plan(graph: Graph) -> bool:
    """Whether `fusion` ran on ``graph`` (its meta holds kernel groups)."""
    return "groups" in graph.meta


def parse_plan(meta: dict[str, Any]) -> KernelPlan:
    """The plan held by a graph's ``meta``; ContractError naming the bad field."""
    doc = {k: meta[k] for k in PLAN_KEYS if k in meta}
    try:
        return KernelPlan.model_validate(doc)
    except ValidationError as exc:
        missing = next((e["loc"] for e in exc.errors() if e["type"] == "missing" and e["loc"][0] == "groups"), None)
        if missing is not None and len(missing) == 3:
            group = doc["groups"][missing[1]]
            gid = group.get("id", "?") if isinstance(group, dict) else "?"
            raise ContractError(f"fusion group {gid!r}: missing field {missing[2]!r}") from None
        raise ContractError(describe_validation_error(exc, "kernel plan in the graph's meta")) from None


def plan_of(graph: Graph) -> KernelPlan:
    """The typed plan of a fused graph, parsed once per graph object. ContractError when
    fusion has not run or the meta records are not a valid plan."""
    if not has_plan(graph):
        raise ContractError(f"graph {graph.name!r}: no kernel plan (the fusion pass has not run)")
    records = tuple(graph.meta.get(k) for k in PLAN_KEYS)
    cached = graph.__dict__.get(_CACHE)
    if cached is not None and all(a is b for a, b in zip(cached[0], records, strict=True)):
        return cached[1]
    plan = parse_plan(graph.meta)
    graph.__dict__[_CACHE] = (records, plan)  # the graph is frozen: this is a cache, like its cached_property's
    return plan


def with_plan(graph: Graph, plan: KernelPlan, **changes: Any) -> Graph:
    """``graph`` (with ``changes``, e.g. new nodes) whose meta holds ``plan`` in place of any
    earlier one: a schedule of earlier groups does not survive a new fusion."""
    meta = {k: v for k, v in graph.meta.items() if k not in PLAN_KEYS}
    out = graph.replace(meta={**meta, **plan.to_meta()}, **changes)
    out.__dict__[_CACHE] = (tuple(out.meta.get(k) for k in PLAN_KEYS), plan)
    return out

"""The pass manager: a pipeline described as data, verification after every pass,
per-pass timing, and dumps.

``run_pipeline(graph, options, pipeline, dump_dir)`` applies each named pass in turn.
With ``verify=True`` (the default) the `verify` pass checks the result of every pass,
and a failure names the pass that broke the graph. With a ``dump_dir`` (or the
``DPT_IR_DUMP`` environment variable) it writes ``NN-<pass>.ir`` and ``NN-<pass>.dot``
after each pass, then ``saved.txt``, ``fusion.txt`` and ``report.json``.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable, Sequence
from typing import Any

from pydantic import BaseModel, ConfigDict, ValidationError, ValidationInfo, computed_field, field_validator

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.types import FrozenModel
from dpt_ir.passes import (
    autodiff,
    canonicalize,
    cse,
    dce,
    dumps,
    expand,
    factor,
    fusion,
    reciprocal,
    saved_attributes,
    schedule,
    verify,
)
from dpt_ir.passes.dumps import resolve_dump_dir
from dpt_ir.passes.options import CompileOptions

PassFn = Callable[[Graph, CompileOptions], Graph]
PASSES: dict[str, PassFn] = {
    m.NAME: m.run
    for m in (verify, canonicalize, cse, dce, autodiff, expand, reciprocal, factor, saved_attributes, fusion, schedule)
}
DEFAULT_PIPELINE: tuple[str, ...] = (
    "verify",
    "canonicalize",
    "cse",
    "dce",
    "autodiff",
    "expand",
    "reciprocal",
    "canonicalize",
    "cse",
    "dce",
    "saved_attributes",
    "fusion",
    "schedule",
)


class PassSpec(FrozenModel):
    """One pipeline entry: a pass name and option overrides for that pass only.

    Each override is a field of `CompileOptions`, validated strictly when the spec is
    made (a bool must be a bool, an int an int): a misspelt or ill-typed option raises
    ContractError naming the pass and the option, and listing the valid options.
    """

    name: str
    options: dict[str, Any] = {}

    @field_validator("options", mode="after")
    @classmethod
    def _valid_options(cls, options: dict[str, Any], info: ValidationInfo) -> dict[str, Any]:
        where = f"pass {info.data.get('name')!r}"
        valid = sorted(CompileOptions.model_fields)
        unknown = [k for k in options if k not in CompileOptions.model_fields]
        if unknown:
            raise ContractError(f"{where}: unknown option(s) {unknown}; valid options are {valid}")
        try:
            checked = CompileOptions.model_validate(options, strict=True)
        except ValidationError as exc:
            problems = "; ".join(
                f"option {'.'.join(map(str, e['loc']))!r}: {e['msg']} (found {e.get('input')!r})" for e in exc.errors()
            )
            raise ContractError(f"{where}: {problems}; valid options are {valid}") from None
        return {k: getattr(checked, k) for k in options}


PipelineEntry = str | PassSpec


def _spec(entry: PipelineEntry) -> PassSpec:
    spec = entry if isinstance(entry, PassSpec) else PassSpec(name=entry)
    if spec.name not in PASSES:
        raise ContractError(f"pipeline: unknown pass {spec.name!r}; known passes are {sorted(PASSES)}")
    return spec


class PassRecord(BaseModel):
    """What one pass did: its position, name, time (the pass and the verification of its
    result), the node counts before and after it, and its growth (after / before; 1.0 for
    an empty graph)."""

    model_config = ConfigDict(frozen=True)
    index: int
    name: str
    seconds: float
    nodes_before: int
    nodes: int

    @computed_field  # type: ignore[prop-decorator]
    @property
    def growth(self) -> float:
        """Nodes after the pass over nodes before it."""
        return self.nodes / self.nodes_before if self.nodes_before else 1.0


class PipelineResult(BaseModel):
    """The final graph, every intermediate graph, and the per-pass records."""

    model_config = ConfigDict(frozen=True, arbitrary_types_allowed=True)
    graph: Graph
    stages: tuple[Graph, ...]
    records: tuple[PassRecord, ...]

    def after(self, name: str) -> Graph:
        """The graph after the last run of pass ``name``."""
        for rec, g in zip(reversed(self.records), reversed(self.stages), strict=True):
            if rec.name == name:
                return g
        raise ContractError(f"pass {name!r} is not in the pipeline {[r.name for r in self.records]}")


def run_pipeline(
    graph: Graph,
    options: CompileOptions | None = None,
    pipeline: Sequence[PipelineEntry] = DEFAULT_PIPELINE,
    dump_dir: str | os.PathLike[str] | None = None,
    verify_each: bool = True,
) -> PipelineResult:
    """Run ``pipeline`` over ``graph``; see the module docstring."""
    options = options or CompileOptions()
    specs = [_spec(entry) for entry in pipeline]
    out_dir = resolve_dump_dir(dump_dir)
    stages: list[Graph] = []
    records: list[PassRecord] = []
    for k, spec in enumerate(specs):
        name = spec.name
        # spec.options were checked against CompileOptions' fields when the spec was made;
        # the merged options are validated as a whole again
        pass_options = options
        if spec.options:
            pass_options = CompileOptions.model_validate({**options.model_dump(), **spec.options})
        start = time.perf_counter()
        before = len(graph.nodes)
        graph = PASSES[name](graph, pass_options)
        if verify_each:
            try:
                verify.run(graph)
            except ContractError as exc:
                raise ContractError(f"pass {name!r} produced an invalid graph: {exc}") from None
        records.append(
            PassRecord(
                index=k, name=name, seconds=time.perf_counter() - start, nodes_before=before, nodes=len(graph.nodes)
            )
        )
        stages.append(graph)
    result = PipelineResult(graph=graph, stages=tuple(stages), records=tuple(records))
    if out_dir is not None:
        dumps.write_all(result, out_dir)
    return result


def report(result: PipelineResult, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    """The ``report.json`` content: pass timings, kernels, bytes and saved bytes."""
    return dumps.report(result, extra)

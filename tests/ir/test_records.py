"""Typed pass records (`dpt_ir.ir.records`): what autodiff and saved_attributes store reads
back as the models they wrote, a malformed record is a ContractError naming the graph, and
no module of the package reads a pass result from ``meta`` by key but the records' own."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import dpt_ir as dp
from dpt_ir.ir import records
from dpt_ir.passes import fusion, saved_attributes
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

PACKAGE = Path(dp.__file__).parent
# The modules that own a stored record's keys: the pass records and the kernel plan.
OWNERS = {"ir/records.py", "ir/kernel_ir.py", "ir/kernel_ir_text.py"}
RECORD_KEYS = {
    records.WRT, records.COTANGENTS, records.GRADIENTS, records.FIXED_SEEDS, records.SAVED, records.SAVED_BYTES,
    records.RECOMPUTED, records.DERIVED, records.DERIVED_GRAPH, records.PHASE, records.GRAD_OF, records.RECOMPUTE_OF,
    records.GROUP,
    "groups", "schedule", "rows", "boundaries",
}  # fmt: skip


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("records")
    x = g.input("x", shape=(4, 6), dtype="float32")
    g.output("loss", dp.mean(dp.exp(x) * x))
    return g.build()


def _compiled(**options: object) -> dp.Graph:
    opts = CompileOptions(wrt=("x",), seeds=("loss",), **options)  # type: ignore[arg-type]
    return run_pipeline(_graph(), opts).graph


def test_autodiff_record_reads_back() -> None:
    joint = _compiled()
    record = records.joint_record(joint)
    assert record.wrt == ("x",)
    assert record.cotangents == {"loss": "ct.loss"} and record.gradients == {"x": "grad.x"}
    assert records.cotangents(joint) == dict(record.cotangents)
    assert records.autodiff_of(_graph()) is None and records.gradients(_graph()) == {}


def test_fixed_seed_is_recorded() -> None:
    joint = _compiled(seed_values={"loss": 1.0})
    record = records.joint_record(joint)
    assert record.cotangents == {} and record.fixed_seeds == {"loss": 1.0}


def test_saved_plan_reads_back_with_reasons() -> None:
    plan = records.saved_plan_of(_compiled())
    assert plan is not None
    assert plan.saved_bytes == sum(s.bytes for s in plan.saved)
    assert all(s.reason and s.readers for s in plan.saved)
    assert [(d.op, d.attribute, d.value) for d in plan.derived_attributes] == [("mean", "count", 24)]


def test_records_survive_the_text_and_json_round_trips() -> None:
    graph = _compiled()
    for again in (dp.Graph.from_text(graph.to_text()), dp.Graph.model_validate_json(graph.model_dump_json())):
        assert records.saved_plan_of(again) == records.saved_plan_of(graph)
        assert records.autodiff_of(again) == records.autodiff_of(graph)


def test_malformed_record_names_the_graph_and_field() -> None:
    graph = _compiled()
    broken = graph.replace(meta={**graph.meta, records.SAVED_BYTES: "many"})
    with pytest.raises(dp.ContractError, match=r"SavedPlan record of graph 'records'.*saved_bytes"):
        records.saved_plan_of(broken)
    with pytest.raises(dp.ContractError, match="expected a joint graph"):
        records.joint_record(_graph())


def test_pass_options_take_the_pass_defaults_and_refuse_strangers() -> None:
    assert fusion.FusionOptions.of(CompileOptions()).halo_budget == fusion.HALO_BUDGET
    assert fusion.FusionOptions.of(CompileOptions(halo_budget=7, row_budget=0)).row_budget == 0
    assert saved_attributes.SavedOptions.of(None).recompute
    with pytest.raises(dp.ContractError, match="expected CompileOptions or FusionOptions, found dict"):
        fusion.FusionOptions.of({"fuse": False})  # type: ignore[arg-type]


def _keyed_reads(tree: ast.AST) -> list[tuple[int, str]]:
    """``x.meta[KEY]``, ``x.meta.get(KEY ...)`` and ``KEY in x.meta`` with a record key."""
    found = []
    for node in ast.walk(tree):
        key, target = None, None
        if isinstance(node, ast.Subscript):
            target, key = node.value, node.slice
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr == "get":
            target, key = node.func.value, node.args[0] if node.args else None
        elif isinstance(node, ast.Compare) and len(node.ops) == 1 and isinstance(node.ops[0], ast.In | ast.NotIn):
            target, key = node.comparators[0], node.left
        is_meta = isinstance(target, ast.Attribute) and target.attr == "meta"
        if is_meta and isinstance(key, ast.Constant) and key.value in RECORD_KEYS:
            found.append((node.lineno, key.value))
    return found


def test_no_keyed_read_of_a_pass_result_outside_the_records() -> None:
    offenders = [
        f"{path.relative_to(PACKAGE)}:{line} reads meta[{key!r}]"
        for path in sorted(PACKAGE.rglob("*.py"))
        if str(path.relative_to(PACKAGE)) not in OWNERS
        for line, key in _keyed_reads(ast.parse(path.read_text()))
    ]
    assert not offenders, offenders


def test_the_read_finder_finds_reads() -> None:
    code = 'a = g.meta["saved"]\nb = n.meta.get("phase", "forward")\nc = "groups" in g.meta\nd = g.meta["other"]\n'
    assert [k for _, k in _keyed_reads(ast.parse(code))] == ["saved", "phase", "groups"]


def test_derived_record_reads_back_and_survives_the_round_trips() -> None:
    from dpt_ir.api.second_order import hvp_graph

    derived = hvp_graph(_graph(), ["x"], "loss")
    record = records.derived_of(derived)
    assert record is not None and record.kind == "hvp" and record.of == ("loss",)
    assert record.vectors == {"x": "vector.x"} and record.products == {"x": "hvp.x"}
    assert record.gradients == {"x": "grad.x"}
    assert records.autodiff_of(derived) is None and records.derived_of(_graph()) is None
    for again in (dp.Graph.from_text(derived.to_text()), dp.Graph.model_validate_json(derived.model_dump_json())):
        assert records.derived_of(again) == record
    broken = derived.replace(meta={**derived.meta, records.DERIVED_GRAPH: {"kind": "cubic"}})
    with pytest.raises(dp.ContractError, match=r"Derived record of graph 'records'.*kind"):
        records.derived_of(broken)

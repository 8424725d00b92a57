"""Unit tests of the passes and the pass manager, and the DESIGN §5 must-shows: what
the saved set holds and how many kernels the fusion makes for the reference graphs."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks.graphs import beer, normalisation, softmax_xent
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.ir.records import DerivedAttribute, SavedPlan, phase_of, recompute_of, saved_plan_of
from dpt_ir.ir.traits import copies
from dpt_ir.passes import canonicalize, cse, dce, manager, verify
from dpt_ir.passes.manager import DEFAULT_PIPELINE, PassSpec, run_pipeline
from dpt_ir.passes.options import CompileOptions

from .graphs import CASES

F64 = "float64"


def _run(name: str, **options: Any) -> manager.PipelineResult:
    case = CASES[name]
    return run_pipeline(case.graph, CompileOptions(wrt=case.wrt, **options))


def _ops(graph: dp.Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def _simplify(graph: dp.Graph) -> dp.Graph:
    return dce.run(cse.run(canonicalize.run(graph)))


def _saved(graph: dp.Graph) -> SavedPlan:
    plan = saved_plan_of(graph)
    assert plan is not None, f"graph {graph.name!r} has no saved plan"
    return plan


# -- verify --------------------------------------------------------------------------------
def test_verify_rejects_forward_node_reading_backward_value() -> None:
    b = dp.GraphBuilder("broken")
    x = b.input("x", (4,), F64)
    back = b.emit("exp", [x], name="late", meta={"phase": "backward"})
    b.output("y", b.emit("sin", [back], name="early"))
    with pytest.raises(dp.ContractError, match=r"node 'early'.*backward value 'late'"):
        verify.run(b.build())


def test_verify_rejects_unknown_phase() -> None:
    b = dp.GraphBuilder("broken")
    x = b.input("x", (4,), F64)
    b.output("y", b.emit("exp", [x], name="odd", meta={"phase": "sideways"}))
    with pytest.raises(dp.ContractError, match=r"node 'odd'.*unknown phase 'sideways'"):
        verify.run(b.build())


def _with_first_group(graph: dp.Graph, **changes: Any) -> dp.Graph:
    groups = [dict(g) for g in graph.meta["groups"]]
    groups[0].update(changes)
    return graph.replace(meta={**graph.meta, "groups": groups})


def test_verify_rejects_group_naming_a_missing_node() -> None:
    graph = _run("beer").graph
    first = graph.meta["groups"][0]
    broken = _with_first_group(graph, nodes=[*first["nodes"], "ghost"])
    with pytest.raises(dp.ContractError, match=rf"fusion group '{first['id']}'.*node 'ghost'"):
        verify.run(broken)


def test_verify_rejects_group_without_its_fields() -> None:
    graph = _run("beer").graph
    groups = [{k: v for k, v in g.items() if k != "outputs"} for g in graph.meta["groups"]]
    with pytest.raises(dp.ContractError, match=r"missing field 'outputs'"):
        verify.run(graph.replace(meta={**graph.meta, "groups": groups}))


def _with_groups(graph: dp.Graph, groups: list[dict[str, Any]]) -> dp.Graph:
    return graph.replace(meta={**graph.meta, "groups": groups})


def test_verify_rejects_a_kernel_reading_before_the_write() -> None:
    graph = _run("softmax_xent").graph  # f0 writes max_0 (logsumexp's shift), the backward kernel reads it
    groups = [dict(g) for g in graph.meta["groups"]]
    backward = next(g for g in groups if g["phase"] == "backward")
    assert "max_0" in backward["inputs"]
    reordered = [backward, *(g for g in groups if g is not backward)]
    with pytest.raises(
        dp.ContractError,
        match=r"kernel 'b\d+': reads '\w+' before any kernel writes it; it is written "
        r"later, by kernel 'f0'",
    ):
        verify.run(_with_groups(graph, reordered))


def test_verify_rejects_two_writers_of_a_value() -> None:
    graph = _run("softmax_xent").graph
    groups = [dict(g) for g in graph.meta["groups"]]
    groups[1]["outputs"] = [*groups[1]["outputs"], groups[0]["outputs"][0]]
    with pytest.raises(dp.ContractError, match=rf"value '{groups[0]['outputs'][0]}': written by kernels 'f0' and"):
        verify.run(_with_groups(graph, groups))


def test_verify_rejects_an_output_no_kernel_writes() -> None:
    graph = _run("beer").graph
    loss = graph.output_value("loss")
    groups = [dict(g, outputs=[v for v in g["outputs"] if v != loss]) for g in graph.meta["groups"]]
    with pytest.raises(dp.ContractError, match=rf"output 'loss': value '{loss}' is written by no kernel"):
        verify.run(_with_groups(graph, groups))


def test_verify_rejects_a_buffer_shared_by_live_values() -> None:
    graph = _run("softmax_xent").graph
    schedule = graph.meta["schedule"]
    first = graph.meta["groups"][0]["outputs"]  # written by one kernel: both live at once
    assert len(first) == 2
    assignment = schedule["assignment"]
    kept = [b for b in schedule["buffers"] if not set(b["values"]) & set(first)]
    merged = {**next(b for b in schedule["buffers"] if first[0] in b["values"]), "values": list(first)}
    broken = {**schedule, "buffers": [*kept, merged], "assignment": {**assignment, first[1]: merged["id"]}}
    with pytest.raises(dp.ContractError, match=rf"buffer '{merged['id']}': '\w+' is written by kernel 'f0' while"):
        verify.run(graph.replace(meta={**graph.meta, "schedule": broken}))


def test_manager_names_the_pass_that_broke_the_graph(monkeypatch: pytest.MonkeyPatch) -> None:
    def breaker(graph: dp.Graph, options: CompileOptions) -> dp.Graph:
        node = graph.nodes[0].model_copy(update={"meta": {"phase": "nowhere"}})
        return graph.replace(nodes=(node, *graph.nodes[1:]))

    monkeypatch.setitem(manager.PASSES, "breaker", breaker)
    with pytest.raises(dp.ContractError, match=r"pass 'breaker' produced an invalid graph: node"):
        run_pipeline(CASES["beer"].graph, pipeline=["verify", "breaker"])


# -- canonicalize --------------------------------------------------------------------------
def test_canonicalize_removes_identities_and_folds_constants() -> None:
    graph = _simplify(CASES["identities"].graph)
    assert _ops(graph) == ["constant", "square", "mul", "sum"]
    (six,) = (n for n in graph.nodes if n.op == "constant")
    assert six.attrs["value"] == 6.0
    assert graph.node_map["square_15"].inputs == ("x",)


def test_canonicalize_keeps_non_identities() -> None:
    b = dp.GraphBuilder("kept")
    x = b.input("x", (6,), F64)
    zeros = b.constant(0.0, F64, (8, 6))
    b.output("a", x + zeros)  # broadcasts: the result is not x's shape
    b.output("b", 0.0 - x)  # sub is not commutative
    b.output("c", 1.0 / x)  # div is not commutative
    b.output("d", x * 2.0)
    graph = b.build()
    assert canonicalize.run(graph) is graph


def test_canonicalize_folds_reductions_and_shape_ops_of_constants() -> None:
    b = dp.GraphBuilder("fold")
    x = b.input("x", (4, 3), F64)
    c = b.constant(2.0, F64, (4, 3))
    total = dp.sum(dp.transpose(c), axis=1)  # 4 * 2.0 in every element
    b.output("y", x * total)
    graph = _simplify(b.build())
    assert _ops(graph) == ["constant", "mul"]
    assert graph.nodes[0].attrs == {"value": 8.0, "dtype": F64, "shape": [3]}


def test_canonicalize_does_not_fold_a_non_uniform_shape_op() -> None:
    # embed_slice (the gradient of slice) pads a constant with zeros: not a uniform result.
    b = dp.GraphBuilder("embed")
    x = b.input("x", (2,), F64)
    one = b.constant(1.0, F64, (1,))
    padded = b.emit("embed_slice", [one], {"starts": [0], "stops": [1], "steps": [1], "shape": [2]})
    b.output("y", x * padded)
    graph = canonicalize.run(b.build())
    assert "embed_slice" in _ops(graph)
    assert dp.interpret(graph, x=[3.0, 4.0])["y"].tolist() == [3.0, 0.0]


def test_canonicalize_removes_double_negation_only() -> None:
    b = dp.GraphBuilder("neg")
    x = b.input("x", (3,), F64)
    b.output("y", dp.negative(dp.negative(x)))
    b.output("z", dp.negative(dp.negative(dp.negative(x))))
    graph = _simplify(b.build())
    assert graph.output_value("y") == "x"
    assert _ops(graph) == ["neg"]


def test_canonicalize_folds_a_swap_of_the_last_two_axes_into_matmul_flags() -> None:
    """``x.T @ y``, ``y @ x.T`` and a batched swap read ``x`` under matmul's transpose flag (no
    transposed copy), a swap of a flagged operand clears the flag, and the values are the same
    bits; a transpose that moves other axes stays."""
    b = dp.GraphBuilder("swaps")
    x, y = b.input("x", (5, 3), F64), b.input("y", (5, 4), F64)
    s, t = b.input("s", (2, 5, 3), F64), b.input("t", (2, 5, 4), F64)
    u, z, w = b.input("u", (3, 2, 5), F64), b.input("z", (3, 4), F64), b.input("w", (2, 4, 5), F64)
    b.output("a", dp.transpose(x) @ y)
    b.output("c", dp.transpose(y) @ x)
    b.output("d", dp.transpose(s, (0, 2, 1)) @ t)
    b.output("e", b.emit("matmul", [dp.transpose(x), z], {"transpose_a": True}))
    b.output("f", dp.transpose(u, (1, 0, 2)) @ dp.transpose(w, (0, 2, 1)))
    graph = b.build()
    simple = _simplify(graph)
    products = {o.name: simple.node_map[simple.output_value(o.name)] for o in simple.outputs}
    assert products["a"].inputs == ("x", "y") and products["a"].attrs.get("transpose_a") is True
    assert products["c"].inputs == ("y", "x") and products["c"].attrs.get("transpose_a") is True
    assert products["d"].inputs == ("s", "t") and products["d"].attrs.get("transpose_a") is True
    assert products["e"].inputs == ("x", "z") and not products["e"].attrs.get("transpose_a")
    f = products["f"]
    assert f.inputs[1] == "w" and f.attrs.get("transpose_b") is True
    assert simple.node_map[f.inputs[0]].op == "transpose"  # axes (1, 0, 2) swap the leading two
    rng = np.random.default_rng(0)
    inputs = {n.name: rng.standard_normal(n.type.shape) for n in graph.inputs}
    before, after = dp.interpret(graph, **inputs), dp.interpret(simple, **inputs)
    for name in "acdef":
        np.testing.assert_array_equal(after[name], before[name])


# -- cse and dce ---------------------------------------------------------------------------
def test_cse_merges_duplicates_but_not_different_attributes() -> None:
    b = dp.GraphBuilder("dups")
    x = b.input("x", (4, 3), F64)
    b.output("y", dp.exp(x) + dp.exp(x) + dp.sum(x, axis=0) + dp.sum(x, axis=0))
    b.output("z", dp.sum(x, axis=1))
    graph = dce.run(cse.run(b.build()))
    assert _ops(graph).count("exp") == 1
    assert _ops(graph).count("sum") == 2


def test_cse_keeps_recomputations_after_partition() -> None:
    partitioned = _run("beer").after("saved_attributes")
    clones = [n.name for n in partitioned.nodes if recompute_of(n) is not None]
    assert clones
    after = dce.run(cse.run(partitioned))
    assert [n.name for n in after.nodes if recompute_of(n) is not None] == clones


def test_dce_removes_dead_nodes_and_keeps_inputs() -> None:
    b = dp.GraphBuilder("dead")
    x = b.input("x", (3,), F64)
    b.input("unused", (3,), F64)
    dp.exp(dp.sin(x))
    b.output("y", dp.cos(x))
    graph = dce.run(b.build())
    assert _ops(graph) == ["cos"]
    assert [i.name for i in graph.inputs] == ["x", "unused"]


# -- the pass manager ----------------------------------------------------------------------
def test_unknown_pass_name_raises() -> None:
    with pytest.raises(dp.ContractError, match=r"unknown pass 'fuse_everything'.*known passes"):
        run_pipeline(CASES["beer"].graph, pipeline=["verify", "fuse_everything"])


def test_pass_spec_options_apply_to_that_pass_only() -> None:
    case = CASES["beer"]
    pipeline = [PassSpec(name=p, options={"fuse": False}) if p == "fusion" else p for p in DEFAULT_PIPELINE]
    result = run_pipeline(case.graph, CompileOptions(wrt=case.wrt), pipeline=pipeline)
    default = _run("beer").graph
    assert len(plan_of(result.graph).groups) > len(plan_of(default).groups)
    # saved_attributes still ran with recompute on: its clones are there.
    assert any(recompute_of(n) is not None for n in result.graph.nodes)


def test_fuse_off_gives_one_kernel_per_non_constant_node() -> None:
    graph = _run("beer", fuse=False).graph
    assert len(plan_of(graph).groups) == sum(n.op != "constant" for n in graph.nodes)


def test_recompute_off_saves_intermediates() -> None:
    graph = _run("beer", recompute=False).graph
    assert not any(recompute_of(n) is not None for n in graph.nodes)
    assert _saved(graph).saved_bytes > 0


def test_recompute_budget_saves_what_is_too_costly_to_recompute() -> None:
    unlimited = _run("chain16").graph
    assert _saved(unlimited).saved_bytes == 0  # bytes alone: recompute the whole chain
    budgeted = _run("chain16", recompute_budget=16).graph
    records = _saved(budgeted).saved
    assert records and _saved(budgeted).saved_bytes == sum(r.bytes for r in records)
    over = [r for r in records if "over the recompute budget 16" in r.reason]
    assert over, [r.reason for r in records]

    # The backward recomputes less work than without the budget.
    def recomputed_work(graph: dp.Graph) -> int:
        return sum(n.opdef.work for n in graph.nodes if recompute_of(n) is not None)

    assert 0 < recomputed_work(budgeted) < recomputed_work(unlimited)


def test_every_recomputation_is_explained(tmp_path: Path) -> None:
    """Each clone the backward recomputes has a record: the work per element it costs
    (its op's work plus that of the clones it reads), within the budget that decided, and
    the bytes saving it would have cost; saved.txt prints each reason."""
    graph = run_pipeline(
        CASES["chain16"].graph, CompileOptions(wrt=("x",), recompute_budget=16), dump_dir=tmp_path
    ).graph
    clones = {n.name: n for n in graph.nodes if recompute_of(n) is not None}
    records = {r.value: r for r in _saved(graph).recomputed}
    assert clones and set(records) == set(clones)
    for name, r in records.items():
        node = clones[name]
        assert r.recomputes == recompute_of(node) and r.op == node.op
        assert r.work == node.opdef.work + sum(records[i].work for i in node.inputs if i in records)
        assert r.own_work == node.opdef.work and r.work <= r.budget == 16
        assert r.save_bytes == graph.types[r.recomputes].nbytes
        assert "within the recompute budget 16" in r.reason and f"saving {r.save_bytes} B" in r.reason
    saved = (tmp_path / "saved.txt").read_text()
    assert all(r.reason in saved for r in records.values())
    unlimited = _saved(_run("chain16").graph).recomputed
    assert unlimited and all(r.budget is None and "no recompute budget" in r.reason for r in unlimited)


def test_recompute_budget_leaves_cheap_chains_alone() -> None:
    # beer recomputes exp(-0.7 x) from x: 10 units of work, within 16; nothing is saved.
    assert _saved(_run("beer", recompute_budget=16).graph).saved_bytes == 0
    assert _saved(_run("beer", recompute_budget=4).graph).saved_bytes > 0


def test_fusion_bounds_the_code_copies_of_nested_folds() -> None:
    # A two-axis `nearest` blur of radii 8 and 5: its folds have 17 and 11 boundary images;
    # one inlined into the other would emit 187 copies of the inner code.
    g = dp.GraphBuilder("nearest_blur")
    x = g.input("x", (7, 9), F64)
    g.output("loss", dp.sum(dp.square(dp.gaussian_filter(dp.exp(-x), (2.0, 1.2), mode="nearest"))))
    graph = run_pipeline(g.build(), CompileOptions(wrt=("x",))).graph
    images = {n.name: copies(n) for n in graph.nodes}
    assert sorted(c for c in images.values() if c > 1) == [11, 17]
    for group in plan_of(graph).groups:
        assert sum(images[n] > 1 for n in group.nodes) <= 1, group  # never a fold inside a fold
    reasons = [b.reason for b in plan_of(graph).boundaries]
    assert any("copies of its code (more than 64)" in r for r in reasons), reasons


def test_after_names_the_last_run_of_a_pass() -> None:
    result = _run("beer")
    assert result.after("canonicalize") is result.stages[5]
    with pytest.raises(dp.ContractError, match="not in the pipeline"):
        result.after("lower")


def test_every_pass_result_is_recorded() -> None:
    result = _run("softmax_xent")
    assert [r.name for r in result.records] == list(DEFAULT_PIPELINE)
    assert [r.nodes for r in result.records] == [len(g.nodes) for g in result.stages]
    inputs = (CASES["softmax_xent"].graph, *result.stages[:-1])  # what each pass was given
    assert [r.nodes_before for r in result.records] == [len(g.nodes) for g in inputs]
    assert all(r.growth == r.nodes / r.nodes_before for r in result.records)
    assert next(r for r in result.records if r.name == "autodiff").growth > 1  # the backward is added
    assert all(r.seconds >= 0 for r in result.records)


# -- dumps ---------------------------------------------------------------------------------
def _check_dump_dir(folder: Path, result: manager.PipelineResult) -> None:
    for rec, stage in zip(result.records, result.stages, strict=True):
        stem = folder / f"{rec.index:02d}-{rec.name}"
        assert dp.Graph.from_text(stem.with_suffix(".ir").read_text()) == stage
        assert stem.with_suffix(".dot").read_text().startswith("digraph ")
    report = json.loads((folder / "report.json").read_text())
    groups = plan_of(result.graph).groups
    assert report["kernel_count"] == len(groups)
    assert [k["id"] for k in report["kernels"]] == [g.id for g in groups]
    assert [p["name"] for p in report["passes"]] == list(DEFAULT_PIPELINE)
    assert [(p["nodes_before"], p["nodes"], p["growth"]) for p in report["passes"]] == [
        (r.nodes_before, r.nodes, r.growth) for r in result.records
    ]
    assert report["saved_bytes"] == _saved(result.graph).saved_bytes
    fusion = (folder / "fusion.txt").read_text()
    assert all(f"{g.id} [{g.phase}]" in fusion for g in groups)


def test_dump_dir_writes_every_stage(tmp_path: Path) -> None:
    case = CASES["exp_minus_max"]
    result = run_pipeline(case.graph, CompileOptions(wrt=case.wrt), dump_dir=tmp_path)
    _check_dump_dir(tmp_path, result)
    saved = (tmp_path / "saved.txt").read_text()
    for record in _saved(result.graph).saved:
        assert record.value in saved and record.reason in saved


def test_dump_env_var_writes_dumps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("DPT_IR_DUMP", str(tmp_path / "env"))
    case = CASES["beer"]
    result = run_pipeline(case.graph, CompileOptions(wrt=case.wrt))
    _check_dump_dir(tmp_path / "env", result)


def test_an_empty_dump_dir_is_a_contract_error() -> None:
    with pytest.raises(dp.ContractError, match="dump_dir is an empty string"):
        run_pipeline(CASES["beer"].graph, dump_dir="")


def test_forward_only_dumps_say_so(tmp_path: Path) -> None:
    run_pipeline(CASES["beer"].graph, dump_dir=tmp_path)
    assert "forward only" in (tmp_path / "saved.txt").read_text()


# -- partition and fusion invariants ---------------------------------------------------------
@pytest.mark.parametrize("name", sorted(CASES))
def test_partition_and_groups_are_consistent(name: str) -> None:
    graph = _run(name).graph
    phases = {n.name: phase_of(n) for n in graph.nodes}
    plan = _saved(graph)
    for record in plan.saved:
        assert phases[record.value] == "forward"
        assert record.readers and all(phases[r] == "backward" for r in record.readers)
        assert record.bytes == graph.types[record.value].nbytes and record.reason
    assert plan.saved_bytes == sum(r.bytes for r in plan.saved)
    covered = set()
    for group in plan_of(graph).groups:
        assert {phases[n] for n in group.nodes} == {group.phase}
        covered.update(group.nodes)
    assert covered == set(phases)


# -- DESIGN §5 must-shows --------------------------------------------------------------------
def _kernels(graph: dp.Graph, phase: str) -> int:
    return sum(g.phase == phase for g in plan_of(graph).groups)


def _largest_saved(graph: dp.Graph) -> int:
    return max((r.bytes for r in _saved(graph).saved), default=0)


def test_beer_at_512_saves_no_image_and_fuses_into_two_kernels() -> None:
    graph = beer((512, 512), "float32")
    result = run_pipeline(graph, CompileOptions(wrt=("x",)))
    final = result.graph
    image = 512 * 512 * 4
    assert _largest_saved(final) < image
    assert _kernels(final, "forward") <= 2 and _kernels(final, "backward") <= 2


@pytest.mark.parametrize("build", [softmax_xent, normalisation])
def test_row_reductions_save_only_row_statistics(build: Any) -> None:
    graph = build((64, 32), F64)
    final = run_pipeline(graph, CompileOptions(wrt=(graph.inputs[0].name,))).graph
    assert 0 < _largest_saved(final) <= 64 * 8
    assert all(r.op in ("max", "sum", "mean") for r in _saved(final).saved)  # logsumexp's shift and sum


def test_mean_saves_only_its_element_count(tmp_path: Path) -> None:
    case = CASES["mean_count"]
    result = run_pipeline(case.graph, CompileOptions(wrt=case.wrt), dump_dir=tmp_path)
    final = result.graph
    (mean,) = (n.name for n in case.graph.nodes if n.op == "mean")
    assert _saved(final).saved == ()
    assert _saved(final).derived_attributes == (DerivedAttribute(node=mean, op="mean", attribute="count", value=48),)
    saved = (tmp_path / "saved.txt").read_text()
    assert "nothing saved" in saved
    assert any(line.split() == [mean, "mean", "count", "48"] for line in saved.splitlines())


def test_exp_minus_max_saves_the_small_reduction_result(tmp_path: Path) -> None:
    case = CASES["exp_minus_max"]
    result = run_pipeline(case.graph, CompileOptions(wrt=case.wrt), dump_dir=tmp_path)
    final = result.graph
    (peak,) = (n.name for n in case.graph.nodes if n.op == "max")
    records = {r.value: r for r in _saved(final).saved}
    assert records[peak].bytes == 8 * 1 * 8
    assert _largest_saved(final) < 8 * 6 * 8  # the exp is recomputed, not saved
    (line,) = (ln for ln in (tmp_path / "saved.txt").read_text().splitlines() if ln.startswith(peak + " "))
    assert "reduction" in line


def test_a_projection_is_saved_not_recomputed() -> None:
    """A projection sums a whole line of taps per element: the backward of ``0.5 ||R x - b||²``
    reads the forward's sinogram rather than projecting again (one projection each way)."""
    g = dp.GraphBuilder("radon_loss")
    x = g.input("x", (16, 16), F64)
    b = g.input("b", (16, 12), F64, requires_grad=False)
    g.output("loss", 0.5 * dp.sum(dp.square(dp.radon(x, list(range(0, 180, 15))) - b)))
    graph = run_pipeline(g.build(), CompileOptions(wrt=("x",))).graph
    assert [n.op for n in graph.nodes].count("radon") == 1
    assert not any(recompute_of(n) is not None and n.op == "radon" for n in graph.nodes)
    (record,) = [r for r in _saved(graph).saved if graph.node_map[r.value].op == "radon"]
    assert "a projection result" in record.reason and record.bytes == 16 * 12 * 8

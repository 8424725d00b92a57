"""The typed kernel plan (`dpt_ir.ir.kernel_ir`) and its statements in the textual IR
(`dpt_ir.ir.kernel_ir_text`): what fusion and schedule produce parses into validated
models, prints one readable line per kernel, boundary, halo note and buffer, and reads back
to the same graph. Passes only: nothing here builds a Warp module."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.base import Target, target_for
from dpt_ir.ir.kernel_ir import Boundary, KernelPlan, plan_of, with_plan
from dpt_ir.passes import verify
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

from .graphs import CASES

PLAN_STATEMENTS = ("kernel ", "boundary ", "halo ", "schedule ", "buffer ")


def _every_form() -> dp.Graph:
    """A scatter (sort form), a reduction with an epilogue, a stencil recomputing a cheap
    producer over its halo and one writing an expensive one: every optional field of a kernel."""
    g = dp.GraphBuilder("every_form")
    x = g.input("x", (6, 5))
    i = g.input("i", (4,), dtype="int32", requires_grad=False)
    box = np.ones((3, 3)) / 9.0
    cheap = dp.convolve(x * 2.0, box, mode="reflect")
    dear = dp.convolve(dp.sin(x) * 2.0, box, mode="wrap")
    scat = dp.add_at(x * 0.0, i, x[0:4, :] * 3.0)
    g.output("loss", dp.sum(cheap) + dp.sum(dear) + dp.sum(scat) + dp.sum(dp.exp(x - dp.max(x, axis=1, keepdims=True))))
    return g.build()


@pytest.fixture(scope="module")
def scheduled() -> dict[str, dp.Graph]:
    graphs = {name: run_pipeline(c.graph, CompileOptions(wrt=c.wrt)).graph for name, c in CASES.items()}
    graphs["every_form"] = run_pipeline(_every_form(), CompileOptions(wrt=("x",))).graph
    return graphs


def test_plan_prints_as_statements_and_reads_back(scheduled: dict[str, dp.Graph]) -> None:
    for name, graph in scheduled.items():
        plan = plan_of(graph)
        text = graph.to_text()
        lines = text.splitlines()
        assert not any('"groups"' in line or '"schedule"' in line for line in lines), name
        assert sum(line.startswith("  kernel ") for line in lines) == len(plan.groups), name
        assert sum(line.startswith("  buffer ") for line in lines) == len(plan.scheduled().buffers), name
        again = dp.Graph.from_text(text)
        assert again == graph, name
        assert plan_of(again) == plan, name
        assert again.to_text() == text, name


def test_every_optional_field_survives_the_text(scheduled: dict[str, dp.Graph]) -> None:
    plan = plan_of(scheduled["every_form"])
    kinds = {g.kind for g in plan.groups}
    assert {"scatter", "reduction", "pointwise"} <= kinds
    assert any(g.epilogue for g in plan.groups) and plan.halo and plan.boundaries
    (scatter,) = [g for g in plan.groups if g.kind == "scatter"]
    assert scatter.scatter is not None and scatter.scatter.form == "sort"
    line = next(s for s in scheduled["every_form"].to_text().splitlines() if s.startswith(f"  kernel {scatter.id} "))
    assert line.endswith(f'scatter %{scatter.scatter.node} sort "{scatter.scatter.reason}"'), line


def test_a_kernel_line_reads_as_documented(scheduled: dict[str, dp.Graph]) -> None:
    graph = scheduled["softmax_xent"]
    lines = [line for line in graph.to_text().splitlines() if line.startswith(PLAN_STATEMENTS, 2)]
    assert lines[0] == (
        "  kernel f0 [forward] reduction over [8,6] axes [1]: nodes(%max_0, %mul_1, %sum_2) "
        "roots(%max_0, %sum_2) reads(%t, %z) writes(%max_0, %sum_2) bytes 768 -> 128"
    )
    assert "  schedule order(f0, f1, f2, b3) workspace_bytes 192 output_bytes 392" in lines
    assert "  buffer buf3: f64[1] bytes 8 output values(%mean_4)" in lines


def test_meta_records_keep_their_keys(scheduled: dict[str, dp.Graph]) -> None:
    """The records in ``meta`` are the models' dumps under today's keys (``from`` included),
    so code reading the JSON form still finds them."""
    graph = scheduled["softmax_xent"]
    bound = graph.meta["boundaries"][0]
    assert set(bound) == {"value", "from", "to", "reason"}
    assert Boundary.model_validate(bound).from_ == bound["from"] == "f0"
    assert set(graph.meta["groups"][0]) == {
        "id", "phase", "kind", "space", "axes", "epilogue", "nodes", "roots", "inputs", "outputs",
        "bytes_read", "bytes_written",
    }  # fmt: skip
    assert set(graph.meta["schedule"]) == {"order", "buffers", "assignment", "workspace_bytes", "output_bytes"}


def test_plan_of_parses_once_per_graph(scheduled: dict[str, dp.Graph]) -> None:
    graph = scheduled["beer"]
    assert plan_of(graph) is plan_of(graph)
    edited = graph.replace(meta={**graph.meta, "halo": []})
    assert plan_of(edited) is not plan_of(graph) and plan_of(edited) == plan_of(graph)


def test_a_plan_that_is_not_canonical_stays_json_and_round_trips(scheduled: dict[str, dp.Graph]) -> None:
    graph = scheduled["beer"]
    schedule = graph.meta["schedule"]
    odd = graph.replace(meta={**graph.meta, "schedule": {**schedule, "assignment": {}}})  # not the buffers' values
    text = odd.to_text()
    assert '"assignment": {}' in text and "  kernel " not in text
    assert dp.Graph.from_text(text) == odd
    with pytest.raises(dp.ContractError, match=r"schedule: expected the assignment .* of its buffers, found \{\}"):
        verify.run(odd)


def test_plan_statements_and_a_json_plan_together_are_refused(scheduled: dict[str, dp.Graph]) -> None:
    graph = scheduled["beer"]
    text = graph.to_text().replace('  meta {"', '  meta {"halo": [], "', 1)
    with pytest.raises(dp.ContractError, match=r"kernel plan statements and the graph's meta key\(s\) \['halo'\]"):
        dp.Graph.from_text(text)


def test_a_bad_plan_statement_names_its_line_and_column(scheduled: dict[str, dp.Graph]) -> None:
    text = scheduled["beer"].to_text()
    lines = text.splitlines()
    k = next(n for n, line in enumerate(lines) if line.startswith("  kernel f0 "))
    lines[k] = lines[k].replace(" over ", " across ")
    with pytest.raises(dp.ContractError, match=rf"line {k + 1}, column \d+: expected 'over' before the iteration"):
        dp.Graph.from_text("\n".join(lines) + "\n")
    lines = text.splitlines()
    lines[k] = lines[k].replace("[forward]", "[sideways]")
    with pytest.raises(dp.ContractError, match=r"kernel plan .*phase.*sideways"):
        dp.Graph.from_text("\n".join(lines) + "\n")


def test_verify_checks_the_typed_plan(scheduled: dict[str, dp.Graph]) -> None:
    graph = scheduled["softmax_xent"]
    plan = plan_of(graph)
    twice = KernelPlan(groups=(*plan.groups, plan.groups[0]), boundaries=plan.boundaries, halo=plan.halo)
    with pytest.raises(dp.ContractError, match="written by kernels 'f0' and 'f0'"):
        verify.run(with_plan(graph, twice))
    stray = plan.groups[0].model_copy(update={"roots": ("ghost",)})  # a copy made unchecked on purpose
    message = r"kernel group 'f0': expected its roots among its nodes, found \['ghost'\]"
    with pytest.raises(dp.ContractError, match=message):
        verify.run(with_plan(graph, KernelPlan(groups=(stray, *plan.groups[1:]))))


def test_target_holds_the_device_facts_plans_were_built_with() -> None:
    cpu, cuda = target_for("cpu"), target_for("cuda:0")
    assert (cpu.halo_budget, cpu.recompute_budget, cuda.halo_budget, cuda.recompute_budget) == (48, 16, 160, None)
    assert cpu.partial_count(1, 1 << 22) == 1  # one partial per output on the CPU
    assert cuda.partial_count(1, 8191) == 1 and cuda.partial_count(1, 1 << 22) == 1024
    assert cuda.partial_count(64, 1 << 20) == 256  # 65,536 threads in flight over 64 outputs
    mine = Target.for_device("cpu", threads=2, halo_budget=7)
    assert (mine.threads, mine.halo_budget, mine.recompute_budget) == (2, 7, 16)
    with pytest.raises(dp.ContractError, match=r"device must be 'cpu' or 'cuda\[:N\]', found 'tpu'"):
        Target.for_device("tpu")
    with pytest.raises(dp.ContractError, match="threads"):
        Target.for_device("cpu", threads=0)


def test_a_plan_update_is_validated(scheduled: dict[str, dp.Graph]) -> None:
    plan = plan_of(scheduled["softmax_xent"])
    assert plan.with_(halo=()) == KernelPlan(**{**dict(plan), "halo": ()})
    assert plan.with_(schedule=None).schedule is None and plan.with_(schedule=None).groups == plan.groups
    with pytest.raises(dp.ContractError, match="groups"):
        plan.with_(groups="not groups")

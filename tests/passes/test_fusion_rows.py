"""Row-local fusion (`dpt_ir.passes.fusion_rows`): which groups fusion puts in a row set, and
that the schedule then gives no buffer to two values inside a set (and verify refuses one that does).

Cheap by construction: the passes only (no Warp build), on the pipelines `dp.compile` runs
on the CPU; the compiled values, gradients and bits are `tests/backend/test_cxx_rows.py`'s.
"""

from __future__ import annotations

import pytest

import dpt_ir as dp
from benchmarks.graphs import normalisation, softmax_xent
from dpt_ir.backends.base import Target, target_for
from dpt_ir.driver.compile import options_of, pipelines
from dpt_ir.ir.kernel_ir import Buffer, Schedule, plan_of, with_plan
from dpt_ir.passes import verify
from dpt_ir.passes.dumps import fusion_table
from dpt_ir.passes.fusion_rows import ROW_BUDGET
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.util import live_ranges

BASE = options_of(target_for("cpu"))


def _plans(graph: dp.Graph, wrt: str) -> dict[str, dp.Graph]:
    """The run / value_and_grad / tape plans `dp.compile` builds on the CPU."""
    return {name: run_pipeline(graph, o).graph for name, o in pipelines(graph, (wrt,), "loss", BASE).items()}


def _ids(graph: dp.Graph) -> list[str]:
    return [g.id for g in plan_of(graph).groups]


def test_normalisation_runs_as_one_row_set() -> None:
    """value_and_grad: the two row means, the two backward row sums and the gradient with the
    loss (a sum over both axes: per-row partials) are one set; rows of 1024 floats with four
    full-shape values (x, w, the centred x, the gradient) are 16 KiB, within the budget."""
    plans = _plans(normalisation((64, 1024)), "x")
    vg = plans["value_and_grad"]
    (rset,) = plan_of(vg).rows
    assert list(rset.groups) == _ids(vg) and len(rset.groups) == 5
    assert rset.axes == (1,) and rset.row == 1024
    assert rset.row_bytes == 4 * 1024 * 4 <= target_for("cpu").row_budget == ROW_BUDGET
    assert "within the same row" in rset.reason
    assert "rows0: row-local fusion of f0, f1, f2, f3, f4" in fusion_table(vg)
    run = plans["run"]  # the forward alone: two row means and the loss
    assert [list(r.groups) for r in plan_of(run).rows] == [_ids(run)]


def test_softmax_xent_row_set_moves_the_mean_after_it() -> None:
    """The row maximum and dot (f0), the row sum of exp(z - max) (f1: logsumexp expanded,
    `passes.expand`) and the gradient (f3, reading both sums at its row) are one set; the mean
    over rows (f2, another space) reads the sets' results and moves after the set, which it
    does not feed."""
    vg = _plans(softmax_xent((32, 256)), "z")["value_and_grad"]
    (rset,) = plan_of(vg).rows
    assert rset.groups == ("f0", "f1", "f3")
    assert _ids(vg) == ["f0", "f1", "f3", "f2"]
    assert plan_of(vg).scheduled().order == ("f0", "f1", "f3", "f2")


def test_wide_rows_exceed_the_budget() -> None:
    """Rows of 16,384 floats: one row of x alone is 64 KiB, over the budget: no row set, the
    groups launch one by one as before."""
    vg = _plans(normalisation((4, 16384)), "x")["value_and_grad"]
    assert not plan_of(vg).rows and "rows" not in vg.meta
    assert "row-local" not in fusion_table(vg)


def test_a_read_at_another_row_is_not_row_local() -> None:
    """A row mean read transposed (element (r, j) reads the mean of row j) needs every row's
    mean first: no row set."""
    g = dp.GraphBuilder("transposed_mean")
    x = g.input("x", (64, 64), "float32")
    m = dp.mean(x, axis=1, keepdims=True)
    g.output("loss", dp.sum(dp.square(x - dp.transpose(m, (1, 0)))))
    vg = _plans(g.build(), "x")["value_and_grad"]
    assert not plan_of(vg).rows and "rows" not in vg.meta


def test_no_buffer_passes_between_values_inside_a_row_set() -> None:
    """The members' rows interleave, so every value written inside a set keeps its own buffer
    while the set runs (the plain liveness would let a later member's per-row result take
    the buffer of an earlier one's)."""
    vg = _plans(normalisation((64, 1024)), "x")["value_and_grad"]
    members = set(plan_of(vg).rows[0].groups)
    inside = {v for g in plan_of(vg).groups if g.id in members for v in g.outputs}
    assignment = plan_of(vg).scheduled().assignment
    buffers = [assignment[v] for v in inside]
    assert len(set(buffers)) == len(buffers), {v: assignment[v] for v in inside}


def test_verify_refuses_a_buffer_shared_inside_a_row_set() -> None:
    """A schedule that gives two values of one row set the same buffer, where the plain
    liveness (each member a kernel of its own) would allow it, fails verify naming both."""
    vg = _plans(normalisation((64, 1024)), "x")["value_and_grad"]
    plan = plan_of(vg)
    members = set(plan.rows[0].groups)
    outputs = {o.value for o in vg.outputs}
    inside = [v for g in plan.groups if g.id in members for v in g.outputs if v not in outputs]
    written, last_read = live_ranges(plan.groups)  # the plain ranges, no row set
    pairs = [
        (a, b)
        for a in inside
        for b in inside
        if a in last_read and last_read[a] < written[b] and vg.types[a].size >= vg.types[b].size
    ]
    assert pairs, inside
    a, b = pairs[0]
    schedule = plan.scheduled()
    held = schedule.assignment

    def values(buf: Buffer) -> tuple[str, ...]:
        kept = tuple(v for v in buf.values if v != b)
        return (*kept, b) if buf.id == held[a] else kept

    buffers = tuple(Buffer(**{**dict(buf), "values": values(buf)}) for buf in schedule.buffers if values(buf))
    shared = Schedule(
        order=schedule.order,
        buffers=buffers,
        assignment=Schedule.held(buffers),
        workspace_bytes=sum(buf.bytes for buf in buffers if not buf.output),
        output_bytes=schedule.output_bytes,
    )
    message = rf"buffer '{held[a]}': '{b}' is written by kernel .* while '{a}' is still read"
    with pytest.raises(dp.ContractError, match=message):
        verify.run(with_plan(vg, plan.with_(schedule=shared)))


def test_the_row_budget_is_the_targets() -> None:
    """The budget reaches fusion from `Target.row_budget` through the options (which key the
    caches): the 16 KiB normalisation set of five groups splits into smaller ones within 8 KiB, and
    none forms within 4 KiB (two full-shape values already take 8 KiB a row)."""
    cpu = target_for("cpu")
    graph = normalisation((64, 1024))

    def value_and_grad(budget: int) -> dp.Graph:
        options = options_of(Target(**{**dict(cpu), "row_budget": budget}))
        assert options["row_budget"] == budget and options != options_of(cpu)
        return run_pipeline(graph, pipelines(graph, ("x",), "loss", options)["value_and_grad"]).graph

    sets = plan_of(value_and_grad(8 * 1024)).rows
    assert sets and all(len(r.groups) < 5 and r.row_bytes <= 8 * 1024 for r in sets), sets
    assert all("(budget 8192 B)" in r.reason for r in sets)
    assert not plan_of(value_and_grad(4 * 1024)).rows


def test_no_row_budget_means_the_default_and_zero_means_none() -> None:
    """Options without a row budget plan with `ROW_BUDGET` (fusion_rows' one default); a budget
    of 0 is a budget too: no row set fits it."""
    graph = normalisation((64, 1024))

    def rows(budget: int | None) -> list:
        base = {**options_of(target_for("cpu")), "row_budget": budget}
        return plan_of(run_pipeline(graph, pipelines(graph, ("x",), "loss", base)["value_and_grad"]).graph).rows

    default = rows(None)
    assert default and default == rows(ROW_BUDGET)
    assert not rows(0)

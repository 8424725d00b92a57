"""Fusion and gathers (`OpDef.data_dependent_reads`): a gather reads each source element
about (output elements / source elements) times, so an expensive source is written once
rather than recomputed at every gathered read (a bicubic warp gathers each source sample
16 times, less the padding the boundary mode adds). The source here is an elementwise chain
(the B-spline prefilter, a recurrence, is a fusion boundary by its kind and never inlined)."""

from __future__ import annotations

import dpt_ir as dp
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions


def _warp(gather_many: bool) -> dp.Graph:
    g = dp.GraphBuilder("warp")
    image = g.input("image", (48, 48), "float64")
    shape = (2, 48, 48) if gather_many else (2, 1, 1)
    coords = g.input("coords", shape, "float64", requires_grad=False)
    source = dp.exp(dp.sin(image) * dp.cos(image)) + dp.log1p(dp.square(image))  # costly per element
    sampled = dp.map_coordinates(source, coords, order=3, mode="nearest", prefilter=False)
    g.output("loss", dp.sum(dp.square(sampled)))
    return g.build()


def _gather_boundaries(graph: dp.Graph) -> list[str]:
    fused = run_pipeline(graph, CompileOptions()).graph
    return [b.reason for b in plan_of(fused).boundaries if "by take_" in b.reason]


def test_an_expensive_source_gathered_many_times_is_written_once() -> None:
    reasons = _gather_boundaries(_warp(gather_many=True))
    assert reasons and all("written once" in r for r in reasons), reasons


def test_a_source_gathered_once_per_element_is_not_forced_out() -> None:
    """Fewer gathered reads than source elements (16 reads of a 48² image): no reuse to save."""
    assert _gather_boundaries(_warp(gather_many=False)) == []

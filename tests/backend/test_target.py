"""Code generation follows the `Target` it is given: the CPU task size, the element block, the
reduction partials and the CUDA combine group reach the drivers from the object passed to
`codegen.generate`, not from module constants (`dpt_ir.backends.base`)."""

from __future__ import annotations

import re

import dpt_ir as dp
from dpt_ir.backends.base import Target, target_for
from dpt_ir.backends.warp import codegen
from dpt_ir.backends.warp.codegen import ModuleSource
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions


def _sum(shape: tuple[int, ...], axis: int | None = None) -> dp.Graph:
    g = dp.GraphBuilder("target_sum")
    x = g.input("x", shape)
    g.output("y", dp.sum(dp.exp(x), axis=axis))
    return g.build()


def _source(graph: dp.Graph, target: Target) -> ModuleSource:
    return codegen.generate({"run": run_pipeline(graph, CompileOptions()).graph}, graph.name, "", True, target)


def _with(kind: str, **facts: int) -> Target:
    return Target(**{**target_for(kind).model_dump(), **facts})


def _dims(source: ModuleSource) -> dict[str, int]:
    """Launch name suffix (the group's launch, ``final``, ``combine``) -> launch size."""
    return {k.name.rsplit("_", 1)[1] if k.name.count("_") > 1 else "main": k.dim for k in source.kernels}


def test_the_cpu_task_size_sets_the_partition() -> None:
    """One output over 65,536 elements: one task by default, 16 partials and a final fold
    with tasks of 4,096 elements."""
    graph = _sum((256, 256))
    assert _dims(_source(graph, target_for("cpu"))) == {"main": 1}
    assert _dims(_source(graph, _with("cpu", cpu_task=4096))) == {"main": 16, "final": 1}


def test_the_block_sets_the_cpu_drivers_buffers() -> None:
    """The CPU driver's element blocks and stack buffers, and a column reduction's blocks of
    columns, are `Target.block` elements."""
    for graph in (_sum((256, 256)), _sum((64, 700), axis=0)):
        default, small = _source(graph, target_for("cpu")).text, _source(graph, _with("cpu", block=64)).text
        assert re.search(r"\[512\];", default) and not re.search(r"\[512\];", small), graph.name
        assert re.search(r"\[64\];", small) and not re.search(r"\[64\];", default), graph.name
    columns = _sum((64, 700), axis=0)
    assert _dims(_source(columns, target_for("cpu")))["main"] == 2  # 700 columns in blocks of 512
    assert _dims(_source(columns, _with("cpu", block=64)))["main"] == 11


def test_the_cuda_partials_and_combine_group_follow_the_target() -> None:
    """CUDA: 65,536 elements make 16 partials of 4,096 (`partial_chunk`), folded by the final
    kernel alone; a combine group of 4 adds the two-level combine (16 partials -> 4 groups)."""
    graph = _sum((256, 256))
    assert _dims(_source(graph, target_for("cuda"))) == {"main": 16, "final": 1}
    assert _dims(_source(graph, _with("cuda", partial_chunk=2048))) == {"main": 32, "final": 1}
    assert _dims(_source(graph, _with("cuda", combine_group=4))) == {"main": 16, "combine": 4, "final": 1}
    assert _dims(_source(graph, _with("cuda", partials_from=1 << 20))) == {"main": 1}


def test_the_contraction_block_is_the_cuda_launch_block() -> None:
    """The contraction drivers map a tile onto whole blocks of ``TILE * TILE`` threads and trap
    on another block size: it must be the block every CUDA launch uses (`Target.cuda_block`)."""
    from dpt_ir.backends.cxx import contraction

    assert contraction.BLOCK == target_for("cuda").cuda_block


def test_the_cpu_task_size_sets_the_row_kernels_tasks() -> None:
    """A row kernel's task is `Target.cpu_task` elements of rows: normalisation's 64 rows of
    1,024 make one task by default, eight with tasks of 8,192 elements."""
    from benchmarks.graphs import normalisation

    graph = normalisation((64, 1024))
    plan = run_pipeline(graph, CompileOptions(row_budget=target_for("cpu").row_budget)).graph

    def row_dims(target: Target) -> list[int]:
        source = codegen.generate({"run": plan}, graph.name, "", True, target)
        return [k.dim for k in source.kernels if "_rows" in k.name]

    assert row_dims(target_for("cpu")) == [1]
    assert row_dims(_with("cpu", cpu_task=8192)) == [8]

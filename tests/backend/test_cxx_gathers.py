"""Gathers and constant index tables on the C++ path (issue 11): ``take`` in every mode,
``take_along_axis``, integer-array indexing (one array, several arrays around a slice: a
reshape read through the gather's position), ``index_array`` tables, gathers of computed
values, in a reduction and through a stencil's pad; the groups take the C++ path, values and
gradients match the interpreter, ``threads=1`` and ``threads=2`` agree bit for bit, and a
runtime position out of range under ``raise`` is a NumericalError naming the node.

Cost: one graph (the largest gather 300 x 256: two CPU tasks) compiled twice (threads 1 and
2), plus pipeline-only probes (no build) over the op table's gather cases.
"""

from __future__ import annotations

import numpy as np
import pytest
from op_cases import CASES, OUTPUT, compiled

import dpt_ir as dp
from dpt_ir.backends.cxx import gathers
from dpt_ir.backends.cxx.nest import cover
from dpt_ir.ir.kernel_ir import KernelGroup, plan_of
from dpt_ir.ops.gather import table_attrs
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

from .harness import assert_same_bits, off_cxx, register

R, C = 300, 256
GATHER_OPS = {"take", "index_array"}


def gathers_graph() -> dp.Graph:
    g = dp.GraphBuilder("cxx_gathers")
    x = g.input("x", (R, C), "float32")
    z = g.input("z", (3, 5, 4), "float32")
    i = g.input("i", (C,), "int32", requires_grad=False)
    k = g.input("k", (5,), "int32", requires_grad=False)
    j = g.input("j", (R, 4), "int32", requires_grad=False)
    cols = x[:, i]  # positions from memory along axis 1: R x C elements, two CPU tasks
    fancy = z[[0, 2, 1, -1], :, [3, -1, 0, 1]]  # two arrays around a slice: (4, 5)
    smooth = dp.correlate(x, np.array([[0.25, 0.5, 0.25]], np.float32), mode="reflect")
    outs = {
        "cols": cols,
        "wrapped": dp.take(x, k, axis=0, mode="wrap"),
        "clipped": dp.take(x, k, axis=1, mode="clip"),
        "flat": dp.take(dp.exp(x * 0.5), [3, 70000, -1, 12]),  # axis None: a reshape of a member
        "along": dp.take_along_axis(x, j, axis=1),
        "fancy": fancy,
        "table": dp.sin(x[np.array([[1, 2], [299, -300]])]) * 2.0,  # an index_array table
        "rows": dp.sum(dp.square(cols), axis=1),  # a gather inside a reduction
        "smooth": dp.take(smooth, [0, 255, 1], axis=1),  # through a pad's boundary
    }
    for name, t in outs.items():
        g.output(name, t)
    loss = dp.sum(dp.square(cols)) + dp.sum(outs["rows"]) * 0.5 + dp.sum(dp.exp(fancy)) + dp.sum(outs["flat"])
    g.output("loss", loss + dp.sum(outs["along"] * outs["along"]) + dp.sum(outs["smooth"]) + dp.sum(outs["table"]))
    return g.build()


def feed(seed: int = 5) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.uniform(-1.0, 1.0, (R, C)).astype(np.float32),
        "z": rng.uniform(-1.0, 1.0, (3, 5, 4)).astype(np.float32),
        "i": rng.integers(-C, C, C).astype(np.int32),  # negatives count from the end; repeats
        "k": np.array([7, -9, 301, 2, -1], np.int32),  # out of range: wrap and clip normalise them
        "j": rng.integers(-C, C, (R, 4)).astype(np.int32),
    }


@pytest.fixture(scope="module")
def programs() -> tuple[dp.Program, dp.Program]:
    graph = gathers_graph()
    one = register(dp.compile(graph, wrt=["x", "z"], loss="loss", threads=1), "cxx_gathers")
    two = register(dp.compile(graph, wrt=["x", "z"], loss="loss", threads=2), "cxx_gathers_2")
    return one, two


def test_gather_launches_take_the_cxx_path(programs: tuple[dp.Program, dp.Program]) -> None:
    """Every launch of every plan, the gathers' adjoints (scatters) included."""
    program = programs[0]
    for plan in ("run", "value_and_grad", "tape"):
        warp = off_cxx(program.plans[plan].kernels, program.plans[plan].module.text)
        assert not warp, (plan, warp)


def test_values_and_gradients_match_the_interpreter(programs: tuple[dp.Program, dp.Program]) -> None:
    program, ins = programs[0], feed()
    got, want = program.run(**ins), dp.interpret(program.graph, **ins)
    for name, ref in want.items():
        np.testing.assert_allclose(got[name], ref, rtol=2e-5, atol=2e-5 * float(np.abs(ref).max()), err_msg=name)
    _, grads = program.value_and_grad(**ins)
    ref = dp.interpret_grad(program.graph, ["x", "z"], seed={"loss": 1.0}, **ins)
    for name in ("x", "z"):
        scale = float(np.abs(ref[name]).max())
        assert float(np.abs(grads[name] - ref[name]).max()) <= 2e-5 * scale, name


def test_threads_one_and_two_agree_bit_for_bit(programs: tuple[dp.Program, dp.Program]) -> None:
    assert_same_bits(*programs, feed(7))


def test_a_runtime_position_out_of_range_is_a_numerical_error(programs: tuple[dp.Program, dp.Program]) -> None:
    program, ins = programs[1], feed()
    bad = ins["i"].copy()
    bad[100] = C  # one past the end, under raise
    with pytest.raises(dp.NumericalError, match=r"node 'take_\d+'.*outside \[-256, 256\)"):
        program.run(**{**ins, "i": bad})
    np.testing.assert_array_equal(program.run(**ins)["cols"], ins["x"][:, ins["i"]])  # still usable


def _groups(graph: dp.Graph, wrt: tuple[str, ...]) -> list[tuple[dp.Graph, KernelGroup]]:
    options = CompileOptions(wrt=wrt, seeds=(OUTPUT,) if wrt else (), loss=None)
    scheduled = run_pipeline(graph, options).graph
    return [(scheduled, group) for group in plan_of(scheduled).groups]


def test_every_gather_group_of_the_op_table_is_covered() -> None:
    """The op cases' pointwise and reduction groups holding a gather or a table, in their run
    and value_and_grad pipelines (both dtypes), all go C++ (pipelines only, no build)."""
    seen, refused = 0, []
    for case in CASES:
        if not compiled(case) or case.op not in (*GATHER_OPS, "add_at"):
            continue
        for dtype in case.dtypes:
            graph = case.build(dtype)
            for wrt in ((), tuple(case.wrt)):
                for scheduled, group in _groups(graph, wrt):
                    ops = {scheduled.node_map[n].op for n in group.nodes}
                    if group.kind in ("pointwise", "reduction") and ops & GATHER_OPS:
                        seen += 1
                        if cover(scheduled, group) is None:
                            refused.append((case.name, dtype, wrt, sorted(ops)))
    assert seen >= 40 and not refused, (seen, refused)


def test_a_table_over_the_limit_is_a_launch_constant() -> None:
    """A table past `gathers.TABLE_MAX` elements is a launch constant of its C++ kernel
    (``$table:<node>``), not text in the C++; the gather reads it right."""
    n = gathers.TABLE_MAX + 1
    g = dp.GraphBuilder("big_table")
    x = g.input("x", (n,), "float32")
    table = g.emit("index_array", [], table_attrs(np.arange(n)[::-1]))
    g.output("y", dp.take(x, table))
    program = register(dp.compile(g.build()), "cxx_gathers_big_table")
    kernels = program.plans["run"].kernels
    assert not off_cxx(kernels, program.plans["run"].module.text)
    assert any(p.startswith("$table:") for k in kernels for p in k.constants)
    x_np = np.arange(n, dtype=np.float32)
    np.testing.assert_array_equal(program.run(x=x_np)["y"], x_np[::-1])


def test_a_table_in_an_epilogue_after_partials() -> None:
    """A table read by a reduction's epilogue computed in the final kernel (a single output
    of 76,800 elements: two CPU partials) is defined in that kernel's C++ too."""
    g = dp.GraphBuilder("table_epilogue")
    x = g.input("x", (R, C), "float32")
    t = g.emit("index_array", [], table_attrs(np.array(-3, np.int32)))
    g.output("s", dp.sum(dp.square(x)) * dp.cast(t, "float32"))
    program = register(dp.compile(g.build(), threads=2), "cxx_gathers_epilogue")
    kernels = program.plans["run"].kernels
    assert not off_cxx(kernels, program.plans["run"].module.text)
    assert any(k.name.endswith("_final") for k in kernels)
    x_np = feed()["x"]
    np.testing.assert_allclose(program.run(x=x_np)["s"], dp.interpret(program.graph, x=x_np)["s"], rtol=1e-6)


def test_a_flat_take_of_memory_reads_at_the_position() -> None:
    """``take`` with ``axis=None`` of a 2-D input in memory (7 x 13, no power of two) reads at
    the clipped position itself: no division into the input's digits only to multiply them back
    (`sites.children`); the values are the interpreter's."""
    g = dp.GraphBuilder("flat_take_of_memory")
    x = g.input("x", (7, 13), "float32")
    i = g.input("i", (5,), "int32", requires_grad=False)
    g.output("y", dp.take(x, i, mode="clip"))
    program = register(dp.compile(g.build()), "cxx_gathers_flat_memory")
    text = program.plans["run"].module.text
    assert not off_cxx(program.plans["run"].kernels, text)
    assert "/ 13" not in text and "% 13" not in text, "the position split into digits"
    x_np = feed()["x"][:7, :13].copy()
    i_np = np.array([0, 90, -4, 45, 12], np.int32)
    np.testing.assert_array_equal(program.run(x=x_np, i=i_np)["y"], dp.interpret(program.graph, x=x_np, i=i_np)["y"])

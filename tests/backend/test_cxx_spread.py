"""Reductions over non-adjacent axes and reshapes that do not split into coordinates, on the
C++ path (issue 11): `dpt_ir.backends.cxx.rowmap`, `nest._spread`, flat coordinates
(`sites._flat_children`).

- Every lane template over axes (0, 2) with the last axis reduced (sub-rows through the row
  map), over (0, 2) of a 4-D value with the last axis kept (columns through the row map),
  over (1, 3), and with a kept axis of one element (one output: partials on the CPU); fused
  producers (``where``, constants) and an epilogue; argmax / argmin over (0, 2) with ties
  (first index, as NumPy) and NaN (the first NaN, as NumPy), max / min with NaN.
- Reshapes whose offset does not split (3x4x5 as 6x10 through a member, 12x20x700 as 6x40x700
  in the loss and its gradient, a lone copy), and of a transpose (6x4 as 24, 3x8 and 2x12,
  pointwise and reduced: a finer loop space, `sites.refine`).
- Every launch takes ``[cxx]``; values and gradients equal the interpreter's (argmax exactly,
  NaN where NumPy has NaN); ``threads=1`` and ``threads=2`` give the same bits.
- A probe over the op table (no build): every pointwise or reduction group of the cases of
  these ops whose members all have C++ lowerings is covered.

- A reshape with no common refinement (a broadcast to 3x2 read as 2x3) reads at its digits
  (`Nest.digits`) and matches the interpreter.

Cost: one graph compiled once with ``checks=False`` (NaN inputs), run, value_and_grad and tape
pipelines; the 2-thread program reuses its modules; one small graph for the digits (~2.5 s
cold).
"""

from __future__ import annotations

import numpy as np
import pytest
from op_cases import CASES, OUTPUT, compiled

import dpt_ir as dp
from dpt_ir.backends.cxx.nest import _is_view, cover
from dpt_ir.ir.kernel_ir import KernelGroup, plan_of
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

from .harness import assert_same_bits, off_cxx

A = (12, 20, 700)  # axes (0, 2): 20 outputs of 8,400 elements, 7 per CPU task (3 tasks)
B = (4, 3, 6, 600)  # axes (0, 2) keep the last: columns (600: two blocks of 512)
C = (20, 1, 4000)  # axes (0, 2) keep one element: one output of 80,000 (two CPU partials)
N = (3, 4, 5)  # NaN and ties (argmax / argmin over (0, 2))


def _arg(op: str, x: dp.Tensor, axes: list[int]) -> dp.Tensor:
    return x.builder.emit(op, [x], {"axes": axes, "keepdims": False})


def spread_graph() -> dp.Graph:
    g = dp.GraphBuilder("cxx_spread")
    x = g.input("x", A, "float32")
    b = g.input("b", B, "float32", requires_grad=False)
    c = g.input("c", C, "float32", requires_grad=False)
    n = g.input("n", N, "float32", requires_grad=False)
    k = g.input("k", N, "int32", requires_grad=False)
    t = dp.transpose(g.input("t", (4, 6), "float32", requires_grad=False))  # (6, 4) read as (3, 8): (3, 2, 4)
    y = dp.where(x > 0.5, x * 2.0, dp.sin(x))
    g.output("sum02", dp.sum(y, axis=(0, 2)))
    g.output("mean02", dp.mean(x, axis=(0, 2), keepdims=True))
    g.output("max02", dp.max(y, axis=(0, 2)))
    g.output("min02", dp.min(x, axis=(-1, -3)))
    g.output("lse02", dp.logsumexp(x, axis=(0, 2)))
    g.output("epi", dp.sqrt(dp.reshape(dp.sum(dp.square(x), axis=(0, 2), keepdims=True), (20, 1)) + 1.0))
    g.output("arg02", _arg("argmax", y, [0, 2]))
    g.output("colsum", dp.sum(dp.exp(b * 0.5), axis=(0, 2)))
    g.output("colmax", dp.max(b, axis=(1, 3)))
    g.output("colarg", _arg("argmin", b, [0, 2]))
    g.output("one", dp.sum(c, axis=(0, 2)))
    g.output("nanmax", dp.max(n, axis=(0, 2)))
    g.output("nanmin", dp.min(n, axis=(0, 2)))
    g.output("nanarg", _arg("argmax", n, [0, 2]))
    g.output("nanargmin", _arg("argmin", n, [0, 2]))
    g.output("tiearg", _arg("argmax", k, [0, 2]))
    g.output("tieargmin", _arg("argmin", k, [0, 2]))
    g.output("flat", dp.reshape(dp.exp(n), (6, 10)) * 2.0)  # 3x4x5 read as 6x10 through a member
    g.output("copy", dp.reshape(k, (2, 30)))  # a lone copy
    g.output("flatT", dp.reshape(t, (24,)) * 2.0)  # iterated as 6x4: the transpose stays affine
    g.output("rowsT", dp.sum(dp.reshape(t, (3, 8)), axis=1))  # iterated as 3x2x4, axes (1, 2)
    g.output("colsT", dp.max(dp.reshape(t, (3, 8)), axis=0))  # axis 0: columns
    g.output("allT", dp.sum(dp.square(dp.reshape(t, (2, 12)))))  # iterated as 2x3x4
    w = dp.square(dp.reshape(dp.cos(x), (6, 40, 700))) * 0.5  # 12x20 read as 6x40
    loss = dp.sum(dp.square(dp.sum(y, axis=(0, 2)))) + dp.sum(dp.max(x, axis=(0, 2)) * 3.0)
    g.output("loss", loss + dp.sum(dp.logsumexp(x, axis=(0, 2))) + dp.sum(w))
    return g.build()


def feed(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    n = rng.uniform(-1.0, 1.0, N).astype(np.float32)
    n[1, 1, 3] = n[2, 1, 0] = np.nan  # output 1: the first NaN in (0, 2) order is at (1, 3): 8
    n[:, 2] = 0.25  # output 2: all tied: index 0
    n[0, 3, 4] = np.inf
    return {
        "x": rng.uniform(-2.0, 2.0, A).astype(np.float32),
        "b": rng.uniform(-1.0, 1.0, B).astype(np.float32),
        "c": rng.uniform(-1.0, 1.0, C).astype(np.float32),
        "n": n,
        "k": rng.integers(0, 3, N).astype(np.int32),
        "t": rng.uniform(-1.0, 1.0, (4, 6)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def programs() -> tuple[dp.Program, dp.Program]:
    graph = spread_graph()
    one = dp.compile(graph, wrt=["x"], loss="loss", threads=1, checks=False)
    return one, dp.compile(graph, wrt=["x"], loss="loss", threads=2, checks=False)


def test_every_launch_takes_the_cxx_path(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    for name in ("run", "value_and_grad", "tape"):
        plan = one.plans[name]
        off = off_cxx(plan.kernels, plan.module.text)
        assert plan.kernels and not off, (name, off)
    assert sorted(k.dim for k in one.plans["run"].kernels)[-3] > 1, "the row-map reductions should span tasks"
    g = run_pipeline(spread_graph(), CompileOptions()).graph
    nests = [cover(g, grp) for grp in plan_of(g).groups if grp.kind == "reduction"]
    maps = {(n.row_map.extents, n.columns is not None) for n in nests if n is not None and n.row_map}
    assert ((12, 20), False) in maps and ((4, 3, 6), True) in maps and ((20, 1), False) in maps, maps
    spaces = {n.space for grp in plan_of(g).groups if (n := cover(g, grp)) is not None}
    assert {(6, 4), (3, 2, 4), (2, 3, 4)} <= spaces, spaces


def test_values_match_the_interpreter_and_numpy(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    ins = feed(1)
    got, want = one.run(**ins), dp.interpret(one.graph, **ins)
    for name, ref in want.items():
        assert got[name].shape == ref.shape, name
        if ref.dtype.kind in "iu":
            np.testing.assert_array_equal(got[name], ref, err_msg=name)
        else:
            np.testing.assert_allclose(got[name], ref, rtol=1e-5, atol=1e-5, err_msg=name)
    n, k = ins["n"], ins["k"]
    moved = np.moveaxis(n, 1, 0).reshape(4, 15)  # (kept, reduced in (0, 2) order)
    np.testing.assert_array_equal(got["nanmax"], np.max(n, axis=(0, 2)))  # NaN where NumPy has NaN
    np.testing.assert_array_equal(got["nanmin"], np.min(n, axis=(0, 2)))
    np.testing.assert_array_equal(got["nanarg"], np.argmax(moved, axis=1))
    np.testing.assert_array_equal(got["nanargmin"], np.argmin(moved, axis=1))
    assert got["nanarg"][1] == 8 and got["nanarg"][2] == 0  # the first NaN; the first of a tie
    ties = np.moveaxis(k, 1, 0).reshape(4, 15)
    np.testing.assert_array_equal(got["tiearg"], np.argmax(ties, axis=1))
    np.testing.assert_array_equal(got["tieargmin"], np.argmin(ties, axis=1))


def test_gradients_match_the_interpreter(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    ins = feed(2)
    _, grads = one.value_and_grad(**ins)
    ref = dp.interpret_grad(one.graph, ["x"], seed={"loss": 1.0}, **ins)
    assert float(np.abs(grads["x"] - ref["x"]).max()) <= 1e-5 * float(np.abs(ref["x"]).max())


def test_one_and_two_threads_are_bit_identical(programs: tuple[dp.Program, dp.Program]) -> None:
    one, two = programs
    assert_same_bits(one, two, feed(3))


_OPS = {"sum", "mean", "max", "min", "logsumexp", "argmax", "argmin", "reshape", "embed_slice"}


def _lowered(graph: dp.Graph, group: KernelGroup) -> bool:
    """Whether every member of ``group`` has a C++ lowering (what `cover` asks of members)."""
    for name in group.nodes:
        op = graph.node_map[name].opdef
        if not (op.cxx is not None or op.cxx_reduce is not None or _is_view(op)):
            return False
    return group.kind in ("pointwise", "reduction")


def test_groups_of_reductions_and_reshapes_are_covered() -> None:
    """The op cases of the reductions, reshapes and slices (both dtypes, run and
    value_and_grad pipelines): no group whose members all lower to C++ is refused."""
    refused = []
    for case in CASES:
        if not compiled(case) or case.name.split("/")[0] not in {*_OPS, "slice", "where", "broadcast_to"}:
            continue
        for dtype in case.dtypes:
            graph = case.build(dtype)
            for wrt in ((), tuple(case.wrt)):
                options = CompileOptions(wrt=wrt, seeds=(OUTPUT,) if wrt else (), loss=None)
                g = run_pipeline(graph, options).graph
                for grp in plan_of(g).groups:
                    ops = {g.node_map[v].opdef.name for v in grp.nodes}
                    if ops & _OPS and _lowered(g, grp) and cover(g, grp) is None:
                        refused.append((case.name, dtype, sorted(ops)))
    assert not refused, refused


def test_a_reshape_with_no_common_refinement_reads_at_its_digits() -> None:
    """A broadcast to 3x2 read as 2x3 (no factorisation refines both) is covered with the
    reshape read at per-element digits (`Nest.digits`); compiled, it matches the
    interpreter (values, and the gradient's sum back through the broadcast)."""
    g = dp.GraphBuilder("digits")
    y = g.input("y", (1, 2), "float32")
    w = g.input("w", (2, 3, 1), "float32", requires_grad=False)
    b = dp.broadcast_to(dp.expand_dims(y, 2), (3, 2, 1))
    g.output("r", dp.reshape(b, (2, 3, 1)) * w)
    graph = g.build()
    groups = _groups_of(graph)
    nests = [cover(s, grp) for s, grp in groups]
    assert all(n is not None for n in nests) and any(n.digits for n in nests if n is not None)
    y0, w0 = np.array([[1.5, -2.0]], np.float32), np.arange(6.0, dtype=np.float32).reshape(2, 3, 1)
    program = dp.compile(graph, wrt=["y"], device="cpu")
    np.testing.assert_array_equal(program.run(y=y0, w=w0)["r"], dp.interpret(graph, y=y0, w=w0)["r"])


def _groups_of(graph: dp.Graph) -> list[tuple[dp.Graph, KernelGroup]]:
    scheduled = run_pipeline(graph, CompileOptions()).graph
    return [(scheduled, grp) for grp in plan_of(scheduled).groups]

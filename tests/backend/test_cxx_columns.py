"""Reductions over leading and middle axes on the C++ path (issue 11): per-column
accumulation (`dpt_ir.backends.cxx.columns`). Every launch takes ``[cxx]``, values and
gradients equal the interpreter's, and ``threads=1`` and ``threads=2`` give the same bits
(the partition is (kept prefix, block of 512 columns), fixed by the shape).

Cost: one graph of 40 x 3 x 700 (several column blocks and many tasks) compiled once for
the module (run, value_and_grad and tape pipelines); the 2-thread program reuses its modules.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.cxx.nest import cover
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

from .harness import assert_same_bits, off_cxx

SHAPE = (40, 3, 700)  # 700 columns: 2 CPU tasks (blocks of 512 columns) per (p, m)


def columns_graph() -> dp.Graph:
    """Every lane template over a leading block, a middle axis and the leading two axes, a
    float64 column sum, and a loss through a column sum (its gradient broadcasts; the
    tape's gradients of max and argmax reduce over axis 0 too)."""
    g = dp.GraphBuilder("cxx_columns")
    x = g.input("x", SHAPE, "float32")
    y = dp.sin(x * 3.0) + 0.5 * x
    g.output("sum0", dp.sum(y, axis=0))
    g.output("mean01", dp.mean(x, axis=(0, 1)))
    g.output("max0", dp.max(y, axis=0))
    g.output("min1", dp.min(x, axis=1, keepdims=True))
    g.output("lse0", dp.logsumexp(x, axis=0))
    g.output("arg1", dp.argmax(y, axis=1))
    g.output("sum64", dp.sum(dp.cast(x, "float64") * 0.1, axis=1))
    # A read broadcast along axis 1 (not contiguous over axes 1, 2): columns over axis 2 only.
    g.output("mix0", dp.sum(x * dp.max(x, axis=1, keepdims=True), axis=0))
    g.output("loss", dp.sum(dp.square(dp.sum(y, axis=0))))
    return g.build()


def feed(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).uniform(-2.0, 2.0, SHAPE).astype(np.float32)}


@pytest.fixture(scope="module")
def programs() -> tuple[dp.Program, dp.Program]:
    graph = columns_graph()
    return dp.compile(graph, wrt=["x"], loss="loss", threads=1), dp.compile(graph, wrt=["x"], loss="loss", threads=2)


def test_leading_and_middle_axis_reductions_are_column_nests() -> None:
    g = run_pipeline(columns_graph(), CompileOptions()).graph
    reductions = [grp for grp in plan_of(g).groups if grp.kind == "reduction"]
    nests = [cover(g, grp) for grp in reductions]
    missing = [grp.axes for grp, n in zip(reductions, nests, strict=True) if n is None]
    assert not missing, missing
    want = {(40, 3, 1, 700), (1, 120, 1, 700), (1, 40, 3, 700)}  # (P, R, M, C); mix0 makes axis 0 M = 3
    assert {n.columns for n in nests if n is not None and n.columns} >= want


def test_every_launch_takes_the_cxx_path(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    for name in ("run", "value_and_grad", "tape"):
        plan = one.plans[name]
        off = off_cxx(plan.kernels, plan.module.text)
        assert plan.kernels and not off, (name, off)
    assert max(k.dim for k in one.plans["run"].kernels) > 1, "some column reduction should span several tasks"


def test_values_and_gradients_match_the_interpreter(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    ins = feed(1)
    got, want = one.run(**ins), dp.interpret(one.graph, **ins)
    for name in ("sum0", "mean01", "max0", "min1", "lse0", "mix0", "loss"):
        assert got[name].shape == want[name].shape, name
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-5, err_msg=name)
    np.testing.assert_allclose(got["sum64"], want["sum64"], rtol=1e-12, atol=1e-12)
    np.testing.assert_array_equal(got["arg1"], want["arg1"])
    _, grads = one.value_and_grad(**ins)
    ref = dp.interpret_grad(one.graph, ["x"], seed={"loss": 1.0}, **ins)
    assert float(np.abs(grads["x"] - ref["x"]).max()) <= 1e-5 * float(np.abs(ref["x"]).max())


def test_one_and_two_threads_are_bit_identical(programs: tuple[dp.Program, dp.Program]) -> None:
    one, two = programs
    ins = feed(2)
    assert_same_bits(one, two, ins)

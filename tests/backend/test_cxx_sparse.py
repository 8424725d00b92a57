"""Constant sparse maps and scatters on the C++ path (issue 11): resample (rotate, zoom with
its spline prefilter, radon) and its adjoint as CSR row loops (spline_filter1d and its adjoint,
recurrences with their own line drivers since issue 29, take the C++ path too), with
fused elementwise producers and consumers; ``add_at`` with constant positions (a
compile-time transpose) and with data positions (a counting sort per run: count, scan,
place), along an axis and along every axis (take_along_axis's gradient), with positions
read from memory or computed in the group (binned data). Every launch of a
group holding those ops and no ``take`` takes the C++ path (gathers move separately); values
and gradients match the interpreter; threads 1 and 2 give the same bits (the rotate and the
sorted scatter are large enough to split into several tasks and chunks); a position out of
range raises NumericalError naming the node.

A probe (no compile) checks that `nest.cover` accepts every group holding these ops and no
``take`` in the op table's cases of them and of ``take`` (whose gradients are scatters), but
the recurrence groups (their own drivers: tests/backend/test_recurrence_cuda.py).

Cost: one graph compiled twice (threads 1 and 2; run, value_and_grad and tape pipelines).
"""

from __future__ import annotations

import numpy as np
import pytest
from op_cases import CASES, OUTPUT, compiled

import dpt_ir as dp
from dpt_ir.backends.cxx.nest import cover
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

from .harness import assert_same_bits, off_cxx, register

OPS = ("resample", "resample_adjoint", "spline_filter1d", "spline_filter1d_adjoint", "add_at")
N = 260  # 67,600 elements: two CPU tasks of 65,536
P = 8192  # positions of the sorted scatter: several counting-sort chunks


def sparse_graph() -> dp.Graph:
    g = dp.GraphBuilder("cxx_sparse")
    x = g.input("x", (N, N), "float32")
    s = g.input("s", (9, 11), "float32")
    img = g.input("img", (12, 12), "float32")
    v = g.input("v", (P,), "float32")
    i = g.input("i", (P,), "int32", requires_grad=False)
    t = g.input("t", (6, 5), "float32")
    k = g.input("k", (6, 3), "int32", requires_grad=False)
    rot = dp.rotate(dp.exp(x * 0.1) * 0.5, 20.0, order=1, reshape=False) + 1.0
    zoomed = dp.tanh(dp.zoom(dp.sin(s), 1.4))  # order 3: spline prefilter, then resample
    filt = dp.spline_filter1d(s * 2.0, axis=0, mode="nearest")
    sino = dp.radon(dp.square(img), theta=np.linspace(0.0, 180.0, 6, endpoint=False))
    fixed = dp.add_at(dp.cos(s), (slice(None), np.array([3, 0, 3, 10, 3])), dp.exp(s[:, :5]) * 2.0)
    sorted_ = dp.add_at(v[:64] * 0.5 + 0.25, i, dp.sin(v))
    along = dp.take_along_axis(t, k, axis=1)  # its gradient wrt t: add_at along every axis, sorted
    # positions computed in the scatter's group from data: element code of the sort stages
    binned = dp.add_at(dp.cos(s[:, 0]), dp.cast(dp.floor(dp.exp(s) * 3.0), "int32"), dp.sin(s))
    for name, y in (("rot", rot), ("zoomed", zoomed), ("filt", filt), ("sino", sino), ("fixed", fixed)):
        g.output(name, y)
    g.output("sorted", sorted_)
    g.output("binned", binned)
    terms = [dp.sum(dp.square(rot)) * 1e-4, dp.sum(zoomed * zoomed), dp.sum(filt), dp.sum(sino * 0.5)]
    # along is linear in the loss: its gradient (an add_at) recomputes no take
    terms += [dp.sum(fixed * fixed), dp.sum(dp.square(sorted_)), dp.sum(along * 1.5), dp.sum(binned * binned)]
    loss = terms[0]
    for term in terms[1:]:
        loss = loss + term
    g.output("loss", loss)
    return g.build()


def inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def u(*shape: int) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, shape).astype(np.float32)

    positions = rng.integers(-64, 64, P).astype(np.int32)  # negatives count from the end
    return {"x": u(N, N), "s": u(9, 11), "img": u(12, 12), "v": u(P), "i": positions, "t": u(6, 5),
            "k": rng.integers(0, 5, (6, 3)).astype(np.int32)}  # fmt: skip


WRT = ["x", "s", "img", "v", "t"]


@pytest.fixture(scope="module")
def programs() -> tuple[dp.Program, dp.Program]:
    graph = sparse_graph()
    one = register(dp.compile(graph, wrt=WRT, loss="loss", device="cpu", threads=1), "cxx_sparse")
    return one, dp.compile(graph, wrt=WRT, loss="loss", device="cpu", threads=2)


def _ops(program: dp.Program, plan: str, group: str) -> set[str]:
    graph = program.plans[plan].graph
    nodes = next(g.nodes for g in plan_of(graph).groups if g.id == group)
    return {graph.node_map[n].opdef.name for n in nodes}


def test_sparse_and_scatter_groups_take_the_cxx_path(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    seen: set[str] = set()
    for plan in ("run", "value_and_grad", "tape"):
        for k in one.plans[plan].kernels:
            every = _ops(one, plan, k.group)
            ops = every & set(OPS)
            seen |= ops
            if ops and "take" not in every:  # gathers move to the C++ path separately
                assert not off_cxx([k], one.plans[plan].module.text), (plan, k.name, ops)
    assert seen == set(OPS)
    names = [k.name for k in one.plans["run"].kernels]
    assert sum(n.endswith("_count") for n in names) == 2 and sum(n.endswith("_place") for n in names) == 2


def test_values_and_gradients_match_the_interpreter(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    ins = inputs(3)
    got, want = one.run(**ins), dp.interpret(one.graph, **ins)
    for name in want:
        scale = max(float(np.abs(want[name]).max()), 1.0)
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=2e-6 * scale, err_msg=name)
    _, grads = one.value_and_grad(**ins)
    ref = dp.interpret_grad(one.graph, WRT, seed={"loss": 1.0}, **ins)
    for name in WRT:
        scale = float(np.abs(ref[name]).max())
        assert float(np.abs(grads[name] - ref[name]).max()) <= 2e-5 * scale, name


def test_one_and_two_threads_are_bit_identical(programs: tuple[dp.Program, dp.Program]) -> None:
    one, two = programs
    assert max(k.dim for k in one.plans["run"].kernels if k.name.endswith("_count")) > 1  # several chunks
    assert_same_bits(one, two, inputs(5))
    ins = inputs(6)
    for name in WRT:
        np.testing.assert_array_equal(one.value_and_grad(**ins)[1][name], two.value_and_grad(**ins)[1][name])


def test_a_position_out_of_range_raises_and_the_program_stays_usable(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    ins = inputs(7)
    bad = dict(ins, i=np.where(np.arange(P) == 5, 64, ins["i"]).astype(np.int32))
    with pytest.raises(dp.NumericalError, match=r"add_at.*_count.*outside \[-64, 64\)"):
        one.run(**bad)
    np.testing.assert_allclose(one.run(**ins)["loss"], dp.interpret(one.graph, **ins)["loss"], rtol=1e-5)


def test_cover_accepts_the_op_tables_sparse_and_scatter_groups() -> None:
    refused = []
    for case in CASES:
        if case.op not in (*OPS, "take") or not compiled(case):  # take: its gradient is an add_at
            continue
        graph = case.build(case.dtypes[0])
        for wrt in ((), tuple(case.wrt)):
            opts = CompileOptions(wrt=wrt, seeds=(OUTPUT,) if wrt else (), loss=None)
            scheduled = run_pipeline(graph, opts).graph
            for group in plan_of(scheduled).groups:
                ops = {scheduled.node_map[n].opdef.name for n in group.nodes}
                if group.kind == "recurrence":  # a line filter: its own drivers, not a nest
                    continue
                if ops & set(OPS) and cover(scheduled, group) is None:
                    refused.append((case.op, group.kind, sorted(ops)))
    assert not refused, refused

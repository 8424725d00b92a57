"""Row kernels on the C++ path (`dpt_ir.backends.cxx.rows`): a row set of fusion runs as one
CPU launch whose task runs every member over a row, row after row. Values and gradients
equal the interpreter's, ``threads=1`` and ``threads=2`` give the same bits (the tasks are
fixed blocks of rows), the row kernel replaces its members' launches, and a full-shape value
only the set reads (the centred rows) lives in a row buffer, not in memory.

Cost: one graph compiled once for the module (run, value_and_grad and tape pipelines) holding
a normalisation and a softmax cross-entropy over rows of 257 (255 rows per task: 2 tasks),
and a 3-D normalisation whose loss reduces each of 3 blocks of 20 rows (a stage with one
partial per row, folded by its final kernel); the 2-thread program reuses the modules.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.cxx import rows
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

from .harness import off_cxx, register

ROWS = (300, 257)
BLOCKS = (3, 20, 130)
WRT = ["x", "z", "v"]


def rows_graph() -> dp.Graph:
    g = dp.GraphBuilder("cxx_rows")
    x = g.input("x", ROWS, "float32")
    w = g.input("w", ROWS, "float32", requires_grad=False)
    z = g.input("z", ROWS, "float32")
    t = g.input("t", ROWS, "float32", requires_grad=False)
    v = g.input("v", BLOCKS, "float32")
    centred = x - dp.mean(x, axis=1, keepdims=True)
    scale = dp.sqrt(dp.mean(dp.square(centred), axis=1, keepdims=True) + 1e-5)
    norm = dp.sum(w * dp.square(centred / scale))
    xent = dp.mean(dp.logsumexp(z, axis=1) - dp.sum(z * t, axis=1))
    c3 = v - dp.mean(v, axis=2, keepdims=True)
    blocks = dp.sum(dp.square(c3) * dp.tanh(v), axis=(1, 2))  # per block of 20 rows
    g.output("blocks", blocks)
    g.output("loss", norm * 1e-3 + xent + dp.sum(dp.square(blocks)) * 1e-4)
    return g.build()


def feed(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    t = rng.uniform(0.0, 1.0, ROWS).astype(np.float32)
    return {
        "x": rng.normal(0.0, 2.0, ROWS).astype(np.float32),
        "w": rng.uniform(0.5, 1.5, ROWS).astype(np.float32),
        "z": rng.normal(0.0, 3.0, ROWS).astype(np.float32),
        "t": t / t.sum(axis=1, keepdims=True),
        "v": rng.normal(0.0, 1.0, BLOCKS).astype(np.float32),
    }


@pytest.fixture(scope="module")
def programs() -> tuple[dp.Program, dp.Program]:
    graph = rows_graph()
    one = register(dp.compile(graph, wrt=WRT, loss="loss", device="cpu", threads=1), "cxx_rows")
    return one, dp.compile(graph, wrt=WRT, loss="loss", device="cpu", threads=2)


def test_row_kernels_replace_their_members(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    for name in ("run", "value_and_grad", "tape"):
        plan = one.plans[name]
        kernels = {k.name: k for k in plan.kernels}
        off = off_cxx(plan.kernels, plan.module.text)
        assert not off, (name, off)
        rows = [k for n, k in kernels.items() if "_rows" in n]
        assert rows, (name, list(kernels))
        members = {g for r in plan_of(plan.graph).rows for g in r.groups}
        launched = {n.split("_", 1)[1] for n in kernels if not n.endswith("_final") and "_rows" not in n}
        assert not members & launched, (name, members & launched)
    assert max(k.dim for k in one.plans["value_and_grad"].kernels if "_rows" in k.name) > 1, "rows over 2 tasks"
    vg = one.plans["value_and_grad"]
    assert "wb0[257]" in vg.module.text, "the centred rows should live in a row buffer of the task"
    bound = {p for k in vg.kernels for p in k.params}
    internal = [v for v in plan_of(vg.graph).scheduled().assignment if v not in bound]
    assert internal, "a value only the set reads should not be bound as a buffer"


def test_a_costly_value_two_stages_compute_is_computed_once(programs: tuple[dp.Program, dp.Program]) -> None:
    """logsumexp's gradient ``e / s`` shares ``e = exp(z - m)`` with the forward
    (`passes.expand`); the row kernel computes it once per element: the sum stage writes it to a
    row buffer, the gradient stage reads it there (`rows.shared_members`). The forward-only
    plan keeps logsumexp's own reduction."""
    one, _ = programs
    vg = one.plans["value_and_grad"]
    assert vg.module.text.count("dp_exp(") == 1, "one exp per element of z in forward and gradient"
    plan = plan_of(vg.graph)
    (exp,) = [n.name for n in vg.graph.nodes if n.op == "exp"]
    (rset,) = [r for r in plan.rows if any(exp in plan.group(g).nodes for g in r.groups)]
    members = [plan.group(g) for g in rset.groups]
    shared = rows.shared_members(vg.graph, members)
    computing = [g.id for g in shared if exp in g.nodes]
    assert len(computing) == 1 and len([g for g in members if exp in g.nodes]) == 2, computing
    assert exp in rows.row_local_values(vg.graph, rset, shared), "the shared value lives in a row buffer"
    assert any(exp in g.inputs for g in shared), "the later stage reads it"
    assert any(n.op == "logsumexp" for n in one.plans["run"].graph.nodes)


def _centred(costly: bool) -> dp.Graph:
    """``y - mean(y)`` over rows: the row mean's stage and the output's stage both compute
    ``y`` (an exp and a multiply, or only a multiply)."""
    g = dp.GraphBuilder("centred")
    x = g.input("x", (8, 64), "float32")
    y = dp.exp(x) * 3.0 if costly else x * 3.0
    g.output("y", y - dp.mean(y, axis=1, keepdims=True))
    return g.build()


@pytest.mark.parametrize("costly", [True, False])
def test_only_a_costly_shared_value_is_computed_once(costly: bool) -> None:
    """Below `rows.REUSE_WORK` per element (a multiply) each stage recomputes the value; at
    an exp's work the first stage writes it to a row buffer and the second reads it."""
    graph = run_pipeline(_centred(costly), CompileOptions()).graph
    plan = plan_of(graph)
    (rset,) = plan.rows
    members = [plan.group(g) for g in rset.groups]
    shared = rows.shared_members(graph, members)
    y = graph.node_map[graph.output_value("y")].inputs[0]
    assert all(y in g.nodes for g in members)
    if not costly:
        assert shared == members
        return
    assert [y in g.nodes for g in shared] == [True, False] and y in shared[1].inputs
    assert rows.row_local_values(graph, rset, shared) == [y]


def test_values_and_gradients_match_the_interpreter(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    ins = feed(1)
    got, want = one.run(**ins), dp.interpret(one.graph, **ins)
    for name in ("blocks", "loss"):
        np.testing.assert_allclose(got[name], want[name], rtol=1e-5, atol=1e-6, err_msg=name)
    out, grads = one.value_and_grad(**ins)
    np.testing.assert_allclose(out["loss"], want["loss"], rtol=1e-5)
    ref = dp.interpret_grad(one.graph, WRT, seed={"loss": 1.0}, **ins)
    for name in WRT:
        scale = float(np.abs(ref[name]).max())
        assert float(np.abs(grads[name] - ref[name]).max()) <= 1e-5 * scale, name


def test_one_and_two_threads_are_bit_identical(programs: tuple[dp.Program, dp.Program]) -> None:
    one, two = programs
    ins = feed(2)
    a, b = one.run(**ins), two.run(**ins)
    for name in a:
        np.testing.assert_array_equal(a[name], b[name], err_msg=name)
    (la, ga), (lb, gb) = one.value_and_grad(**ins), two.value_and_grad(**ins)
    np.testing.assert_array_equal(la["loss"], lb["loss"])
    for name in WRT:
        np.testing.assert_array_equal(ga[name], gb[name], err_msg=name)


def test_gradients_are_fresh_arrays_the_kernels_wrote(programs: tuple[dp.Program, dp.Program]) -> None:
    """On the CPU the gradient kernels write straight into a fresh NumPy array per call
    (`runtime._direct_results`: no copy out of the workspace): each call's arrays are its
    own, and writing into one changes no later result."""
    one, _ = programs
    ins = feed(3)
    plan = one.plans["value_and_grad"]
    values = [plan.outputs[g] for g in plan.gradients.values()]
    with plan.workspace() as ws:  # the pool's one workspace: the calls below check it out
        for v in values:
            ws.buffers[v].fill_(7.0)
    _, first = one.value_and_grad(**ins)
    with plan.workspace() as ws:
        for v in values:
            assert (ws.buffers[v].numpy() == 7.0).all(), f"{v} was written in the workspace, then copied out"
    keep = {k: v.copy() for k, v in first.items()}
    for v in first.values():
        v.fill(np.nan)
    _, second = one.value_and_grad(**ins)
    for name in WRT:
        assert second[name] is not first[name] and not np.shares_memory(second[name], first[name])
        np.testing.assert_array_equal(second[name], keep[name], err_msg=name)
        assert second[name].flags.owndata and second[name].shape == ins[name].shape

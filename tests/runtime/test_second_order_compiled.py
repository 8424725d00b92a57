"""Compiled forward mode and second order (`Program.jvp`, `hvp`, `gnvp`) against the
interpreter's (`dp.interpret_jvp`, `dp.interpret_hvp`), table-driven over the op table, on
the five benchmark cases, and their contracts.

The first two differentiable cases of every op (`tests/api/second_order_cases.py`, float64;
the interpreter's tests take them all) are each one block of one program (the disjoint union
of the case graphs, `tests/backend/harness.union`, plus a loss summing the cases' losses), so
the whole table costs one jvp and one hvp module; the union's block-diagonal Hessian gives
each case's ``H v``. The benchmark cases, float32 at a
small shape, are one more program the same way.
"""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks.cases import CASES as BENCH
from tests.api.second_order_cases import LOSS, problems, rel_error
from tests.backend.harness import prefixed, union

TOTAL = "total"
PER_OP = 2  # cases per op: the interpreter checks all of them against finite differences


def _sample() -> list:
    """The first `PER_OP` differentiable cases of each op (build time grows with the union)."""
    seen: dict[str, int] = {}
    out = []
    for p in problems():
        seen[p.case.op] = seen.get(p.case.op, 0) + 1
        if seen[p.case.op] <= PER_OP:
            out.append(p)
    return out


PROBLEMS = {f"c{k}": p for k, p in enumerate(_sample())}  # block ids: valid IR names


def _with_total(graph: dp.Graph, losses: list[str]) -> dp.Graph:
    b, handles = dp.GraphBuilder.from_graph(graph)
    b.set_outputs([*graph.outputs])
    total = handles[graph.output_value(losses[0])]
    for name in losses[1:]:
        total = total + handles[graph.output_value(name)]
    b.output(TOTAL, total)
    return b.build()


class Blocks:
    """Graphs compiled as one program, with their inputs, tangents and ``wrt``."""

    def __init__(self, name: str, graphs: Mapping[str, dp.Graph], inputs: Mapping[str, dict[str, np.ndarray]],
                 tangents: Mapping[str, dict[str, np.ndarray]], loss: str) -> None:  # fmt: skip
        self.graphs, self.loss = dict(graphs), loss
        full = _with_total(union(name, graphs), [prefixed(pid, loss) for pid in graphs])
        self.inputs = {prefixed(pid, k): v for pid, arrays in inputs.items() for k, v in arrays.items()}
        self.tangents = {prefixed(pid, k): v for pid, arrays in tangents.items() for k, v in arrays.items()}
        self.local_inputs, self.local_tangents = inputs, tangents
        self.program = dp.compile(full, wrt=list(self.tangents), loss=TOTAL, device="cpu")

    def split(self, values: Mapping[str, np.ndarray], pid: str) -> dict[str, np.ndarray]:
        head = f"{pid}."
        return {k[len(head) :]: v for k, v in values.items() if k.startswith(head)}


@pytest.fixture(scope="module")
def table() -> Blocks:
    return Blocks(
        "second_order_table",
        {pid: p.graph for pid, p in PROBLEMS.items()},
        {pid: p.inputs for pid, p in PROBLEMS.items()},
        {pid: p.tangents for pid, p in PROBLEMS.items()},
        LOSS,
    )


@pytest.fixture(scope="module")
def table_results(table: Blocks) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    _, tangents = table.program.jvp(table.tangents, **table.inputs)
    _, grads, hvps = table.program.hvp(table.tangents, **table.inputs)
    return tangents, grads, hvps


@pytest.mark.parametrize("pid", list(PROBLEMS), ids=[p.case.name for p in PROBLEMS.values()])
def test_op_case_compiled_equals_interpreter(table: Blocks, table_results: tuple, pid: str) -> None:
    tangents, grads, hvps = (table.split(r, pid) for r in table_results)
    p = PROBLEMS[pid]
    _, want_t = dp.interpret_jvp(p.graph, p.tangents, **p.inputs)
    _, want_g, want_h = dp.interpret_hvp(p.graph, list(p.case.wrt), p.tangents, loss=LOSS, **p.inputs)
    for name, t in want_t.items():
        assert rel_error(tangents[name], t) <= 1e-10, f"{pid}: tangent of {name}"
    for w in p.case.wrt:
        assert rel_error(grads[w], want_g[w]) <= 1e-10, f"{pid}: gradient of {w}"
        assert rel_error(hvps[w], want_h[w]) <= 1e-10, f"{pid}: H v of {w}"


SHAPE = (12, 16)


@pytest.fixture(scope="module")
def bench() -> Blocks:
    rng = np.random.default_rng(5)
    inputs = {name: case.inputs(SHAPE, rng) for name, case in BENCH.items()}
    tangents = {name: {c.wrt: rng.standard_normal(SHAPE).astype(np.float32)} for name, c in BENCH.items()}
    return Blocks("second_order_bench", {n: c.build(SHAPE) for n, c in BENCH.items()}, inputs, tangents, "loss")


def test_benchmark_cases_compiled_equal_interpreter(bench: Blocks) -> None:
    outs, tangents = bench.program.jvp(bench.tangents, **bench.inputs)
    _, grads, hvps = bench.program.hvp(bench.tangents, **bench.inputs)
    for name, case in BENCH.items():
        graph, inputs, v = bench.graphs[name], bench.local_inputs[name], bench.local_tangents[name]
        _, want_t = dp.interpret_jvp(graph, v, **inputs)
        _, want_g, want_h = dp.interpret_hvp(graph, [case.wrt], v, **inputs)
        assert rel_error(bench.split(tangents, name)["loss"], want_t["loss"]) <= 1e-4, name
        assert rel_error(bench.split(grads, name)[case.wrt], want_g[case.wrt]) <= 1e-4, name
        assert rel_error(bench.split(hvps, name)[case.wrt], want_h[case.wrt]) <= 1e-4, name
    assert set(bench.program.derived.built) == {"jvp", "hvp"}


def _model() -> dp.Graph:
    g = dp.GraphBuilder("so_contracts")
    x = g.input("x", (6,), "float64")
    n = g.input("n", (6,), "int32")
    r = dp.exp(0.3 * x) * dp.tanh(x) - 0.5
    g.output("r", r)
    g.output("count", n + 1)
    return g.build()


def test_gnvp_compiled_equals_the_vjp_of_the_jvp_and_misuse_is_refused() -> None:
    graph, rng = _model(), np.random.default_rng(0)
    inputs, v = {"x": rng.standard_normal(6), "n": np.arange(6, dtype=np.int32)}, {"x": rng.standard_normal(6)}
    program = dp.compile(graph, wrt=["x"], device="cpu")
    outs, products = program.gnvp(v, output="r", **inputs)
    _, tangents = dp.interpret_jvp(graph, v, **inputs)
    expected = dp.interpret_grad(graph, ["x"], seed={"r": tangents["r"]}, **inputs)
    assert rel_error(products["x"], expected["x"]) <= 1e-12
    np.testing.assert_array_equal(outs["count"], inputs["n"] + 1)
    with pytest.raises(dp.ContractError, match=r"\['n'\] are not differentiated inputs"):
        program.jvp({"n": np.zeros(6)}, **inputs)
    with pytest.raises(dp.ContractError, match=r"tangent for input 'x': expected shape \[6\].*found \[3\]"):
        program.jvp({"x": np.zeros(3)}, **inputs)
    with pytest.raises(dp.ContractError, match=r"gnvp: output 'count'.*int32; expected a float output"):
        program.gnvp(v, output="count", **inputs)
    with pytest.raises(dp.ContractError, match=r"gnvp: output='nope' is not an output"):
        program.gnvp(v, output="nope", **inputs)
    with pytest.raises(dp.ContractError, match=r"hvp needs the loss.*compile with loss="):
        program.hvp(v, **inputs)
    with pytest.raises(dp.ContractError, match=r"missing input\(s\) \['n'\]"):
        program.jvp(v, x=inputs["x"])


def test_derived_plans_are_bit_identical_over_calls_and_thread_counts(bench: Blocks) -> None:
    """Thread counts key the in-process cache only: the second program reuses the modules."""
    other = dp.compile(bench.program.graph, wrt=list(bench.tangents), loss=TOTAL, device="cpu", threads=2)
    first = bench.program.hvp(bench.tangents, **bench.inputs)
    for program in (bench.program, other):
        again = program.hvp(bench.tangents, **bench.inputs)
        for a, b in zip(first, again, strict=True):
            for k in a:
                np.testing.assert_array_equal(a[k], b[k])


def test_dumps_cover_the_derived_plans(tmp_path: Path) -> None:
    graph, rng = _model(), np.random.default_rng(1)
    program = dp.compile(graph, wrt=["x"], device="cpu", dump_dir=tmp_path)
    program.gnvp({"x": rng.standard_normal(6)}, output="r", x=rng.standard_normal(6), n=np.zeros(6, np.int32))
    folder = tmp_path / "gnvp-r"
    assert (folder / "fusion.txt").exists() and (folder / "saved.txt").exists()
    assert any(folder.glob("*-fusion.ir")) and any((folder / "kernels").glob("*.py"))
    assert not (tmp_path / "jvp").exists()  # built on first use only

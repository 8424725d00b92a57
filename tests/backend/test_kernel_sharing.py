"""Structural kernel sharing (issue 14): fusion groups with identical kernel text (the same
ops, attributes, types and access pattern, whatever their values are called) share one
``@wp.kernel``, launched with each group's own buffers, constants and status slots.

Cheap by construction: the size checks only generate source (no Warp build), and one
small stepped model (16², 6 steps) is compiled once per module for the value, gradient,
status and dump checks.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.base import target_for
from dpt_ir.backends.warp import codegen
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

LAPLACIAN = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
BOX = np.full((3, 3), 1.0 / 9.0)
N, STEPS = 16, 6


def heat(n: int, steps: int) -> dp.Graph:
    """``steps`` explicit heat steps ``u + 0.2 * laplacian(u)`` (``nearest``) and a misfit."""
    g = dp.GraphBuilder(f"heat_{steps}")
    u = g.input("u0", shape=(n, n), dtype="float32")
    obs = g.input("obs", shape=(n, n), dtype="float32", requires_grad=False)
    for _ in range(steps):
        u = u + 0.2 * dp.correlate(u, LAPLACIAN, mode="nearest")
    g.output("loss", dp.sum(dp.square(u - obs)))
    return g.build()


def log_steps(n: int, steps: int) -> dp.Graph:
    """``u = log(box(u)) + 1.5`` per step: finite for u0 in [2, 3]; a constant u0 = 0.1
    gives box(u1) < 0, so the first out-of-domain log is the second step's."""
    g = dp.GraphBuilder("log_steps")
    u = g.input("u0", shape=(n, n), dtype="float32")
    obs = g.input("obs", shape=(n, n), dtype="float32", requires_grad=False)
    for _ in range(steps):
        u = dp.log(dp.correlate(u, BOX, mode="nearest")) + 1.5
    g.output("loss", dp.sum(dp.square(u - obs)))
    return g.build()


def _pipelines(graph: dp.Graph) -> dict[str, dp.Graph]:
    """The run / value_and_grad / tape plans `dp.compile` builds, by kernel prefix."""
    options = {
        "run": CompileOptions(),
        "vg": CompileOptions(wrt=("u0",), seeds=("loss",), seed_values={"loss": 1.0}, loss="loss"),
        "tp": CompileOptions(wrt=("u0",)),
    }
    return {prefix: run_pipeline(graph, o).graph for prefix, o in options.items()}


def _source(graph: dp.Graph) -> codegen.ModuleSource:
    return codegen.generate(_pipelines(graph), graph.name, "kernel sharing test", True, target_for("cpu"))


def _defined(text: str) -> list[str]:
    return re.findall(r"@wp\.kernel\ndef (\w+)\(", text)


def test_identical_steps_share_kernels() -> None:
    """20 identical heat steps: the module defines as many kernels as 10 steps do, every
    launch runs a kernel the module defines, and the forward plan runs ≤ 4 distinct
    stencil kernels (the run pipeline: 20 steps fuse pairwise into one shared kernel)."""
    ten, twenty = _source(heat(N, 10)), _source(heat(N, 20))
    assert len(twenty.kernels) > len(ten.kernels)  # more launches ...
    assert len(_defined(twenty.text)) == len(_defined(ten.text)) == len(twenty.functions())  # ... same kernels
    assert set(_defined(twenty.text)) == {k.function for k in twenty.kernels}
    run = {k.function for k in twenty.kernels if k.name.startswith("run_")}
    stencils = [f for f in run if _is_stencil(twenty.text, next(k for k in twenty.kernels if k.function == f))]
    assert 1 <= len(stencils) <= 4, stencils
    # Kernel text carries no value names: parameters are positional (a__status, a__task0: fixed).
    assert not re.search(r"\ba_(?!_status|_task0)\w+", twenty.text.split("@wp.kernel", 1)[1])


def _is_stencil(text: str, kernel: codegen.KernelSource) -> bool:
    """A C++ kernel whose pads split rows into interior and edges."""
    (native,) = re.findall(r"\bn_(dpk_\w+)\(", kernel.text)
    return f"{native}_edge<" in text


def test_no_kernel_recomputes_another_kernels_stencil() -> None:
    """A value whose inline code holds a stencil is computed once, not recomputed by every
    kernel reading it: otherwise each backward step recomputes the steps after it over a
    growing halo (20 heat steps gave four kernels of one, two, three and four steps,
    ~3,500 of the module's 4,700 lines). Every stencil node lies in exactly one group of
    each plan, and the module for 20 steps stays small."""
    graph = heat(N, 20)
    for prefix, plan in _pipelines(graph).items():
        seen: dict[str, str] = {}
        for group in plan_of(plan).groups:
            for n in group.nodes:
                if plan.node_map[n].opdef.kind == "stencil":
                    assert n not in seen, f"{prefix}: stencil {n} in groups {seen[n]} and {group.id}"
                    seen[n] = group.id
    lines = codegen.generate(_pipelines(graph), graph.name, "", True, target_for("cpu")).text.count("\n")
    ten = heat(N, 10)
    # C++ kernels (element, edge and driver functions) are longer than the Warp-Python ones
    # were (2,217 lines measured for 20 steps, 1,333 with those); a halo recomputation would
    # also make 20 steps' module far larger than 10 steps' (2,162 measured).
    assert lines < 2600
    assert lines < 1.1 * codegen.generate(_pipelines(ten), ten.name, "", True, target_for("cpu")).text.count("\n")


def test_shared_kernels_keep_their_own_slots() -> None:
    """Each launch of a shared kernel owns consecutive status slots naming its own nodes."""
    source = _source(log_steps(N, STEPS))
    shared = [k for k in source.kernels if k.function != k.name]
    assert shared
    bases = [k.status_base for k in source.kernels]
    assert bases == sorted(bases) and len(set(bases)) == len(bases)
    for k in shared:
        first = next(f for f in source.kernels if f.name == k.function)
        mine = source.slots[k.status_base]
        assert mine.kernel == k.name
        if k.name.split("_")[0] == first.name.split("_")[0]:  # another step of the same pipeline
            assert mine.node != source.slots[first.status_base].node


@pytest.fixture(scope="module")
def stepped(tmp_path_factory: pytest.TempPathFactory) -> tuple[dp.Program, Path]:
    """The 6-step log model, compiled once (with dumps) for the checks below."""
    out = tmp_path_factory.mktemp("sharing_dump")
    return dp.compile(log_steps(N, STEPS), wrt=["u0"], device="cpu", dump_dir=out), out


def _good_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(14)
    return {
        "u0": rng.uniform(2.0, 3.0, (N, N)).astype(np.float32),
        "obs": rng.uniform(1.5, 2.5, (N, N)).astype(np.float32),
    }


def test_shared_kernels_match_interpreter(stepped: tuple[dp.Program, Path]) -> None:
    program, _ = stepped
    report = program.report
    assert report.distinct_kernels < report.launches
    inputs = _good_inputs()
    expected = dp.interpret(program.graph, **inputs)["loss"]
    grad = dp.interpret_grad(program.graph, ["u0"], **inputs)["u0"]
    np.testing.assert_allclose(program.run(**inputs)["loss"], expected, rtol=1e-5)
    out, grads = program.value_and_grad(**inputs)
    np.testing.assert_allclose(out["loss"], expected, rtol=1e-5)
    np.testing.assert_allclose(grads["u0"], grad, rtol=1e-4, atol=1e-6 * np.abs(grad).max())
    with program.tape_pass() as tp:
        tp.forward(**inputs)
    tape_grad = tp.backward(seed={"loss": 1.0})["u0"].numpy()
    tp.close()
    np.testing.assert_allclose(tape_grad, grad, rtol=1e-4, atol=1e-6 * np.abs(grad).max())


def test_numerical_error_names_the_launch_node(stepped: tuple[dp.Program, Path]) -> None:
    """The second step's log runs the first step's kernel; the error names the second
    step's node and launch, not the first's."""
    program, _ = stepped
    logs = [n.name for n in program.graph.nodes if n.op == "log"]
    inputs = {"u0": np.full((N, N), 0.1, np.float32), "obs": np.zeros((N, N), np.float32)}
    with pytest.raises(dp.NumericalError) as err:
        program.run(**inputs)
    first = str(err.value).split(": ", 1)[1].split(";")[0]
    assert f"out-of-domain input at node {logs[1]!r}" in first, str(err.value)
    assert f"node {logs[0]!r}" not in str(err.value)
    kernel = re.search(r"kernel (\w+)\)", first)
    assert kernel is not None
    launch = next(k for k in program.plans["run"].kernels if k.name == kernel.group(1))
    assert launch.function != launch.name  # raised from a shared kernel
    np.testing.assert_allclose(
        program.run(**_good_inputs())["loss"], dp.interpret(program.graph, **_good_inputs())["loss"], rtol=1e-5
    )


def test_dumps_list_distinct_kernels(stepped: tuple[dp.Program, Path]) -> None:
    program, out = stepped
    report = json.loads((out / "report.json").read_text())["program"]
    assert report["distinct_kernels"] == len({k.function for p in program.plans.values() for k in p.kernels})
    assert report["plans"]["run"]["distinct_kernels"] < report["plans"]["run"]["kernels"]
    fusion = (out / "run" / "fusion.txt").read_text()
    tail = fusion.split("generated kernels: ", 1)[1]
    counts = re.match(r"(\d+) distinct for (\d+) launch", tail)
    assert counts is not None
    run = report["plans"]["run"]
    assert (int(counts[1]), int(counts[2])) == (run["distinct_kernels"], run["kernels"])
    shared = next(k for k in program.plans["run"].kernels if k.function != k.name)
    row = next(line for line in tail.splitlines() if line.startswith(shared.function + " "))
    assert shared.name in row.replace(",", " ").split()


def test_cuda_reductions_share_kernels_not_partials() -> None:
    """CUDA variant (partials + combine kernels): steps that each reduce (``u - mean(u)``)
    share their partial and combine kernels, and every launch binds its own partials."""
    g = dp.GraphBuilder("centred_steps")
    u = g.input("u0", shape=(128, 128), dtype="float32")
    for _ in range(3):
        u = u + 0.2 * dp.correlate(u, LAPLACIAN, mode="nearest")
        u = u - dp.mean(u)
    g.output("loss", dp.sum(dp.square(u)))
    graph = g.build()
    source = codegen.generate(
        {"run": run_pipeline(graph, CompileOptions()).graph}, graph.name, "cuda", True, target_for("cuda")
    )
    combines = [k for k in source.kernels if k.name.endswith("_final")]
    shared = [k for k in combines if k.function != k.name]
    assert len(combines) >= 3 and shared, [k.name for k in source.kernels]
    partials = [p for k in source.kernels if k.partials for p in k.partials if k.name.endswith("_final")]
    assert len(partials) == len(set(partials))  # no two combine launches read one partial buffer
    for k in shared:
        first = next(f for f in source.kernels if f.name == k.function)
        assert list(k.partials.values()) == list(first.partials.values())  # same types and sizes ...
        assert set(k.partials).isdisjoint(first.partials)  # ... in buffers of its own

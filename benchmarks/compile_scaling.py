"""Cold compile time and peak memory against graph size: unrolled chains and a wide sum.

Graphs (float32, shape (256,)):

- ``chain``: ``y = sin(y) * 0.9 + 0.1 * x`` unrolled for ``steps`` steps, then ``sum(y)``
  (6 built nodes per step, ``0.1 * x`` is shared by cse);
- ``wide``: ``sum(square(sin(x * c_i) - d_i))`` for ``terms`` terms, summed as a balanced tree;
- ``heat``: ``u = u + 0.2 * dp.correlate(u, laplacian, mode="nearest")`` unrolled on 64² (5 nodes
  per step), then ``sum(square(u - obs))`` (issue 14's 20-step model is ``--kind heat --nodes 103``).

Each size is measured in a fresh child process (``python benchmarks/compile_scaling.py
--child KIND N``) with fresh ``DPT_IR_CACHE`` and ``WARP_CACHE_PATH`` directories, so the
compile is cold: passes, code generation and the Warp build, at the shipped build level
(a plain script, not pytest's ``-O0`` conftest). The child reports:

- ``passes_s``: the three pipelines of `dp.compile` (run, value_and_grad, tape), run
  before `dp.compile` on the same graph and options (the sum of their pass records);
- ``compile_s``: the cold `dp.compile` (passes again, code generation, Warp build);
  ``build_s`` = compile_s - passes_s is the code generation and Warp build;
  ``passes_cpu_s`` and ``compile_cpu_s`` are the process CPU times of the same spans
  (wall time on a shared machine includes waiting for a core);
- ``peak_rss_mib``: the child's peak resident memory (``ru_maxrss``), which includes
  the Python interpreter, NumPy, Warp and the compiled module;
- ``kernels``: the tape plan's kernel launches; ``distinct``: the module's distinct generated
  kernels (the three pipelines together, `dp.Program.report`), ``stencil_kernels``: how many of
  them evaluate a stencil (bind a stencil's ``$weights:`` constant);
- ``grad_error``: the largest relative difference between the compiled gradient and
  the interpreter's (``dp.interpret_grad``).

Run: ``python benchmarks/compile_scaling.py [--kind chain wide heat] [--nodes 500 1000 2000 5000]
[--passes-only] [--max-kernel-work N]``. ``--passes-only`` skips `dp.compile` (no Warp
build); ``--max-kernel-work`` sets fusion's size bound (`fusion_steps.MAX_KERNEL_WORK`)
in the children, to measure other values of it.
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
NODES_PER_STEP = 6
NODES_PER_TERM = 8  # const, mul, sin, const, sub, square, sum, add (in the tree)
NODES_PER_HEAT_STEP = 5  # pad, correlate_valid, const, mul, add
LAPLACIAN = ((0.0, 1.0, 0.0), (1.0, -4.0, 1.0), (0.0, 1.0, 0.0))


def chain(steps: int, shape: tuple[int, ...] = (256,)) -> Any:
    """``y = sin(y) * 0.9 + 0.1 * x`` for ``steps`` steps, then ``sum(y)``."""
    import dpt_ir as dp

    g = dp.GraphBuilder(f"chain{steps}")
    x = g.input("x", shape, "float32")
    y = x
    for _ in range(steps):
        y = dp.sin(y) * 0.9 + 0.1 * x
    g.output("loss", dp.sum(y))
    return g.build()


def wide(terms: int, shape: tuple[int, ...] = (256,)) -> Any:
    """``sum_i sum(square(sin(x * c_i) - d_i))``, the outer sum a balanced tree."""
    import dpt_ir as dp

    g = dp.GraphBuilder(f"wide{terms}")
    x = g.input("x", shape, "float32")
    parts = [dp.sum(dp.square(dp.sin(x * (0.5 + 0.01 * i)) - (0.1 * i % 1.0))) for i in range(terms)]
    while len(parts) > 1:
        parts = [parts[k] + parts[k + 1] if k + 1 < len(parts) else parts[k] for k in range(0, len(parts), 2)]
    g.output("loss", parts[0])
    return g.build()


def heat(steps: int, n: int = 64) -> Any:
    """``u = u + 0.2 * correlate(u, laplacian, "nearest")`` for ``steps`` steps on ``n``², then a misfit."""
    import numpy as np

    import dpt_ir as dp

    g = dp.GraphBuilder(f"heat{steps}")
    u = g.input("x", (n, n), "float32")
    obs = g.input("obs", (n, n), "float32", requires_grad=False)
    for _ in range(steps):
        u = u + 0.2 * dp.correlate(u, np.array(LAPLACIAN), mode="nearest")
    g.output("loss", dp.sum(dp.square(u - obs)))
    return g.build()


def build(kind: str, nodes: int) -> Any:
    """The ``kind`` graph with about ``nodes`` nodes."""
    if kind == "heat":
        return heat(max(1, nodes // NODES_PER_HEAT_STEP))
    return chain(max(1, nodes // NODES_PER_STEP)) if kind == "chain" else wide(max(2, nodes // NODES_PER_TERM))


def child(kind: str, nodes: int, passes_only: bool, max_kernel_work: int | None) -> dict[str, Any]:
    """Measure one cold compile in this (fresh) process."""
    import numpy as np

    import dpt_ir as dp
    from dpt_ir.backends.base import target_for
    from dpt_ir.driver.compile import options_of, pipelines
    from dpt_ir.passes import fusion_steps
    from dpt_ir.passes.manager import run_pipeline

    if max_kernel_work is not None:
        fusion_steps.MAX_KERNEL_WORK = max_kernel_work

    graph = build(kind, nodes)
    base = options_of(target_for("cpu"))
    res: dict[str, Any] = {"kind": kind, "nodes": len(graph.nodes), "max_kernel_work": fusion_steps.MAX_KERNEL_WORK}
    t, cpu = time.perf_counter(), time.process_time()
    per_pass: dict[str, float] = {}
    for options in pipelines(graph, ("x",), "loss", base).values():
        for rec in run_pipeline(graph, options).records:
            per_pass[rec.name] = per_pass.get(rec.name, 0.0) + rec.seconds
    res["passes_s"] = time.perf_counter() - t
    res["passes_cpu_s"] = time.process_time() - cpu
    res["per_pass_s"] = per_pass
    if not passes_only:
        t, cpu = time.perf_counter(), time.process_time()
        program = dp.compile(graph, wrt=["x"], device="cpu")
        program.build_all()  # dp.compile defers each plan's module build to its first use: a cold compile is both
        res["compile_s"] = time.perf_counter() - t
        res["compile_cpu_s"] = time.process_time() - cpu  # Warp runs the C++ compiler in this process
        res["build_s"] = res["compile_s"] - res["passes_s"]
        res["cache"] = program.report.cache
        res["kernels"] = program.report.plans["tape"].kernels
        res["distinct"] = program.report.distinct_kernels
        res["stencil_kernels"] = stencil_kernels(program)
        rng = np.random.default_rng(0)
        inputs = {v.name: rng.random(v.type.shape, dtype=np.float32) for v in graph.inputs}
        _, grads = program.value_and_grad(**inputs)
        ref = dp.interpret_grad(graph, ["x"], **inputs)["x"]
        res["grad_error"] = float(np.max(np.abs(grads["x"] - ref)) / max(float(np.max(np.abs(ref))), 1e-30))
    res["peak_rss_mib"] = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return res


def stencil_kernels(program: Any) -> int:
    """Distinct generated kernels of ``program`` whose fusion group holds a stencil op."""
    from dpt_ir.ir.kernel_ir import plan_of

    out = set()
    for plan in program.plans.values():
        groups = {g.id: g for g in plan_of(plan.graph).groups}
        for k in plan.kernels:
            nodes = groups[k.group].nodes if k.group in groups else ()
            if any(plan.graph.node_map[n].opdef.kind == "stencil" for n in nodes):
                out.add(k.function)
    return len(out)


def measure(kind: str, nodes: int, passes_only: bool, max_kernel_work: int | None = None) -> dict[str, Any]:
    """Run `child` in a new process with empty caches; its JSON line."""
    with tempfile.TemporaryDirectory(prefix="dpt_ir_scaling_") as tmp:
        env = {
            **os.environ,
            "DPT_IR_CACHE": str(Path(tmp) / "dpt_ir"),
            "WARP_CACHE_PATH": str(Path(tmp) / "warp"),
            "PYTHONPATH": str(ROOT),
        }
        args = [sys.executable, __file__, "--child", kind, str(nodes)] + (["--passes-only"] if passes_only else [])
        args += [] if max_kernel_work is None else ["--max-kernel-work", str(max_kernel_work)]
        out = subprocess.run(args, env=env, capture_output=True, text=True, check=False)
        if out.returncode != 0:
            return {"kind": kind, "nodes": nodes, "error": out.stderr.strip().splitlines()[-1:]}
        return json.loads(out.stdout.strip().splitlines()[-1])


def table(rows: list[dict[str, Any]]) -> str:
    """A Markdown table of the measured rows."""
    head = (
        "| graph | nodes | passes (s) | passes CPU (s) | build (s) | cold compile (s) | compile CPU (s) "
        "| peak RSS (MiB) | tape kernels | distinct kernels | stencil kernels | grad rel. err |"
    )
    lines = [head, "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|"]
    for r in rows:
        if "error" in r:
            lines.append(f"| {r['kind']} | {r['nodes']} | error: {r['error']} ||||||||||")
            continue
        cells = [_fmt(r, k) for k in ("passes_s", "passes_cpu_s", "build_s", "compile_s", "compile_cpu_s")]
        cells.append(_fmt(r, "peak_rss_mib", ".0f"))
        cells += [str(r.get(k, "-")) for k in ("kernels", "distinct", "stencil_kernels")]
        cells.append(_fmt(r, "grad_error", ".1e"))
        lines.append(f"| {r['kind']} | {r['nodes']} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _fmt(row: dict[str, Any], key: str, spec: str = ".1f") -> str:
    return format(row[key], spec) if key in row else "-"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--child", nargs=2, metavar=("KIND", "NODES"), help=argparse.SUPPRESS)
    parser.add_argument("--kind", nargs="+", default=["chain", "wide"], choices=["chain", "wide", "heat"])
    parser.add_argument("--nodes", nargs="+", type=int, default=[500, 1000, 2000, 5000])
    parser.add_argument("--passes-only", action="store_true", help="time the passes only (no Warp build)")
    parser.add_argument("--json", type=Path, help="also write the rows to this JSON file")
    parser.add_argument("--max-kernel-work", type=int, help="fusion's size bound in the children (default: shipped)")
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child[0], int(args.child[1]), args.passes_only, args.max_kernel_work)))
        return
    rows = []
    for kind in args.kind:
        for n in args.nodes:
            rows.append(measure(kind, n, args.passes_only, args.max_kernel_work))
            print(json.dumps(rows[-1]), flush=True)
    print(table(rows))
    if args.json:
        args.json.write_text(json.dumps(rows, indent=2))


if __name__ == "__main__":
    main()

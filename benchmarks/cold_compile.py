"""Cold ``dp.compile`` of each benchmark graph: a new process per graph and run, with fresh
dpt_ir and Warp caches, after a warm-up module (Warp's one-time start-up costs are paid
before the clock starts).

Run: ``python benchmarks/cold_compile.py [--n 20] [--runs 2] [--graphs beer chain16 ...]``
from the repository root. Each child times, wall and CPU (``process_time``, which counts
clang's work in the process; Warp builds CPU modules in-process):

- ``compile``: ``dp.compile(graph, wrt=[...], device="cpu")``;
- ``first_vg``: ``dp.compile`` plus the first ``value_and_grad`` (with modules built on
  first use this is where the ``value_and_grad`` module is built);
- ``build_all``: ``dp.compile`` plus ``Program.build_all()`` in a second fresh process
  (every pipeline's module: what a full eager build costs), when the program has it.

Prints one line per graph and run, then a table of the medians (JSON with ``--json``).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
GRAPHS = ("beer", "chain16", "softmax_xent", "normalisation", "imaging")
CHILD_MODES = ("first_vg", "build_all")


def child(name: str, n: int, mode: str) -> dict[str, Any]:
    """In a fresh process (the caches in the environment): warm up, then time one graph."""
    import warp as wp

    wp.config.kernel_cache_dir = os.environ["WARP_CACHE_PATH"]
    wp.config.log_level = 30
    import numpy as np

    import dpt_ir as dp
    from benchmarks.cases import CASES

    wp.init()
    warm = dp.GraphBuilder("cold_compile_warmup")
    x = warm.input("x", (4, 4), "float32")
    warm.output("loss", dp.sum(dp.exp(x) * x))
    warmup = dp.compile(warm.build(), wrt=["x"], device="cpu")
    warmup.value_and_grad(x=np.ones((4, 4), np.float32))
    case = CASES[name]
    side = 1 << (n // 2)
    shape = (side, (1 << n) // side)
    graph = case.build(shape)
    inputs = case.inputs(shape, np.random.default_rng(0))
    wall, cpu = time.perf_counter(), time.process_time()
    program = dp.compile(graph, wrt=[case.wrt], device="cpu")
    out: dict[str, Any] = {"compile_s": time.perf_counter() - wall, "compile_cpu_s": time.process_time() - cpu}
    if mode == "first_vg":
        program.value_and_grad(**inputs)
        out["first_vg_s"], out["first_vg_cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu
    elif hasattr(program, "build_all"):
        program.build_all()
        out["build_all_s"], out["build_all_cpu_s"] = time.perf_counter() - wall, time.process_time() - cpu
    out["cache"] = program.report.cache
    return out


def spawn(name: str, n: int, mode: str) -> dict[str, Any]:
    """One child with empty caches of its own; its JSON result."""
    with tempfile.TemporaryDirectory(prefix="cold_compile_") as tmp:
        env = dict(os.environ, DPT_IR_CACHE=f"{tmp}/dpt_ir", WARP_CACHE_PATH=f"{tmp}/warp", PYTHONPATH=str(ROOT))
        env.pop("DPT_IR_DUMP", None)
        cmd = [sys.executable, __file__, "--child", name, "--n", str(n), "--mode", mode]
        proc = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900, cwd=ROOT)
    if proc.returncode != 0:
        raise SystemExit(f"{name} ({mode}) failed:\n{proc.stderr[-3000:]}")
    return json.loads(proc.stdout.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=20, help="log2 of the element count (20: 1024 x 1024)")
    parser.add_argument("--runs", type=int, default=2)
    parser.add_argument("--graphs", nargs="*", default=list(GRAPHS), choices=GRAPHS)
    parser.add_argument("--json", type=Path, default=None, help="write every measurement here")
    parser.add_argument("--child", default=None, help=argparse.SUPPRESS)
    parser.add_argument("--mode", default="first_vg", choices=CHILD_MODES, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        print(json.dumps(child(args.child, args.n, args.mode)))
        return
    results: dict[str, list[dict[str, Any]]] = {g: [] for g in args.graphs}
    for run in range(args.runs):
        for name in args.graphs:  # graphs interleaved across runs: slow drift of a shared machine falls on all
            first, full = spawn(name, args.n, "first_vg"), spawn(name, args.n, "build_all")
            merged = {**first, **{k: v for k, v in full.items() if k.startswith("build_all")}}
            merged["compile_s"] = [first["compile_s"], full["compile_s"]]  # both children timed dp.compile
            results[name].append(merged)
            timed = {k: v for k, v in merged.items() if k.endswith("_s") and k != "compile_s"}
            print(f"run {run} {name}: compile {first['compile_s']:.2f}, {full['compile_s']:.2f}, "
                  + ", ".join(f"{k} {v:.2f}" for k, v in timed.items()))
    print(f"\ncold dp.compile, 2^{args.n} elements, median of {args.runs} (wall s, CPU s):")
    for name, rows in results.items():
        cells = [f"compile {statistics.median(t for r in rows for t in r['compile_s']):.2f}"]
        for key in ("first_vg", "build_all"):
            if rows and f"{key}_s" in rows[0]:
                cells.append(f"{key} {statistics.median(r[key + '_s'] for r in rows):.2f}")
        print(f"  {name:14s} " + ", ".join(cells))
    if args.json is not None:
        args.json.write_text(json.dumps({"n": args.n, "results": results}, indent=2))


if __name__ == "__main__":
    main()

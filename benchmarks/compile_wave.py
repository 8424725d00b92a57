"""Cold compile of the wave program of `bench_wave.py` (issue 28: <= 5 s, independent of the number of
steps), at several step counts in the same run.

Each measurement runs in its own child process with empty caches of its own (fresh ``DPT_IR_CACHE`` and
``WARP_CACHE_PATH`` folders, removed after): ``compile_s`` is ``dp.compile(graph, wrt=["v"], threads=1)``
of the value-and-grad program, which generates and builds the whole module (the C++ compiler included);
``graph_s`` is building the graph with ``dp.scan``; ``first_call_s`` the first ``value_and_grad`` (which
records the loop's native op table); ``kernels`` the distinct kernels of the module. Step counts
interleave over ``--rounds`` rounds; each figure is the median over the rounds.

Run: ``python benchmarks/compile_wave.py`` (128 x 128, one shot, 30 and 300 steps, 3 rounds);
``--size 32 --rounds 1`` is a quick smoke run. Prints a Markdown table.
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

ROOT = Path(__file__).resolve().parents[1]


def child(size: int, steps: int, shots: int) -> None:
    start = time.perf_counter()
    import dpt_ir as dp

    sys.path.insert(0, str(ROOT))
    from benchmarks import bench_wave

    imported = time.perf_counter()
    graph = bench_wave.wave_graph(size, steps, shots, None)
    built = time.perf_counter()
    program = dp.compile(graph, wrt=["v"], threads=1)
    compiled = time.perf_counter()
    x = bench_wave.problem(size, steps, shots)
    ready = time.perf_counter()
    program.value_and_grad(**x)
    called = time.perf_counter()
    print(json.dumps({"import_s": imported - start, "graph_s": built - imported, "compile_s": compiled - built,
                      "first_call_s": called - ready, "kernels": program.kernel_count}))  # fmt: skip


def measure(size: int, steps: int, shots: int) -> dict[str, float]:
    """One child with caches of its own."""
    with tempfile.TemporaryDirectory(prefix="compile_wave_") as tmp:
        env = dict(os.environ, DPT_IR_CACHE=f"{tmp}/dpt", WARP_CACHE_PATH=f"{tmp}/warp", OMP_NUM_THREADS="1")
        env["PYTHONPATH"] = os.pathsep.join([str(ROOT), env.get("PYTHONPATH", "")])
        cmd = [sys.executable, __file__, "--child", str(steps), "--size", str(size), "--shots", str(shots)]
        out = subprocess.run(cmd, env=env, capture_output=True, text=True, check=True).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--shots", type=int, default=1)
    parser.add_argument("--steps", type=int, nargs="+", default=[30, 300])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--child", type=int, default=None, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child is not None:
        child(args.size, args.child, args.shots)
        return
    runs: dict[int, list[dict[str, float]]] = {s: [] for s in args.steps}
    for r in range(args.rounds):
        order = args.steps[r % len(args.steps) :] + args.steps[: r % len(args.steps)]
        for steps in order:
            runs[steps].append(measure(args.size, steps, args.shots))
    print(f"cold compile of bench_wave's program, {args.size}x{args.size}, {args.shots} shot(s), "
          f"median of {args.rounds} round(s), fresh caches per run")  # fmt: skip
    print("\n| steps | compile_s | graph_s | first_call_s | import_s | kernels |")
    print("|---:|---:|---:|---:|---:|---:|")
    for steps, rows in runs.items():
        med = {k: statistics.median(r[k] for r in rows) for k in rows[0]}
        print(f"| {steps} | {med['compile_s']:.2f} | {med['graph_s']:.3f} | {med['first_call_s']:.2f} | "
              f"{med['import_s']:.2f} | {int(med['kernels'])} |")  # fmt: skip


if __name__ == "__main__":
    main()

"""dpt_ir on 1 and 2 threads, with a control job that shows whether 2 cores were free.

    python benchmarks/thread_scaling.py [--case chain16] [--size 1024] [--reps 15]
                                        [--torch] [--omp-wait passive|active|unset]
    python benchmarks/thread_scaling.py --wave 8 [--size 128] [--steps 300]
    python benchmarks/thread_scaling.py --matmul [--size 1024] [--dtype float32]

Compiles the case's program with ``threads=1`` and ``threads=2`` and times
``value_and_grad`` (wall clock), interleaved round by round with a control job: the same
fixed NumPy work (``np.sin`` into a preallocated array, which releases the GIL) run by 1
thread, then split over 2 threads. On a machine with 2 free cores the control's speed-up is
near 2; when it is not, the machine was busy and dpt_ir's figure is no measurement of the
design. ``--wave SHOTS`` times `bench_wave`'s program instead (``SHOTS`` shots batched,
``--size``, ``--steps``, store-all, gradient wrt the velocity) and, in the same rounds, its
one-shot program on one thread, so the time per batched shot compares with a single shot's.
``--matmul`` times issue 31's product instead: ``value_and_grad`` of ``0.5 ||A B - T||²`` wrt
``A`` (two ``--size``² products of ``--dtype``: the forward and the gradient's ``R Bᵀ``).
Prints both speed-ups (medians) and the load average before and after, and checks
that the two programs' loss and gradient are bit-identical.

``--torch`` runs the case's eager torch peer (2 threads) before every dpt_ir round, as the
suite's interleaved rounds do, and prints the CPU that threads which are not dpt_ir's (the
calling thread and its ``dpt_ir_cpu`` pool) ran during the 2-thread rounds, from
``/proc/self/task/*/schedstat``: an OpenMP worker that waits actively spins there.
``--omp-wait`` sets ``OMP_WAIT_POLICY`` before torch is imported (default passive, as in
the suite; ``unset`` leaves the environment's).
"""

from __future__ import annotations

import argparse
import os
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import numpy as np  # noqa: E402

import dpt_ir as dp  # noqa: E402
from benchmarks.cases import CASES  # noqa: E402


def control(threads: int, src: np.ndarray, dst: np.ndarray) -> Callable[[], None]:
    """The control job: ``dst = sin(src)``, its halves on ``threads`` threads."""
    cuts = np.linspace(0, src.size, threads + 1).astype(int)

    def part(k: int) -> None:
        np.sin(src[cuts[k] : cuts[k + 1]], out=dst[cuts[k] : cuts[k + 1]])

    def run() -> None:
        others = [threading.Thread(target=part, args=(k,)) for k in range(1, threads)]
        for t in others:
            t.start()
        part(0)
        for t in others:
            t.join()

    return run


def run_ns() -> dict[int, int]:
    """CPU time (ns) each thread of this process has run, by thread id."""
    out = {}
    for tid in os.listdir("/proc/self/task"):
        try:
            out[int(tid)] = int(Path(f"/proc/self/task/{tid}/schedstat").read_text().split()[0])
        except OSError:  # the thread ended
            continue
    return out


def foreign_ms(before: dict[int, int], after: dict[int, int]) -> float:
    """CPU (ms) run between the snapshots by threads that are not dpt_ir's."""
    ours = {t.native_id for t in threading.enumerate() if t is threading.main_thread() or t.name.startswith("dpt_ir")}
    return sum(after[t] - before.get(t, after[t]) for t in after if t not in ours) / 1e6


def torch_peer(case: str, inputs: dict[str, np.ndarray], wrt: str, policy: str) -> Callable[[], Any]:
    """The case's eager torch value-and-grad on 2 threads, imported under ``policy``."""
    if policy != "unset":
        os.environ["OMP_WAIT_POLICY"] = policy.upper()
    import torch

    from benchmarks import peers_torch

    torch.set_num_threads(2)
    return peers_torch.make_value_and_grad(case, inputs, wrt)


def matmul_problem(n: int, dtype: str) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    """Issue 31's workload: ``0.5 ||A B - T||²`` over ``n x n`` matrices, and its inputs (only
    ``A`` differentiated: its gradient is one more product)."""
    g = dp.GraphBuilder("thread_scaling_matmul")
    a = g.input("A", (n, n), dtype)
    b = g.input("B", (n, n), dtype, requires_grad=False)
    t = g.input("T", (n, n), dtype, requires_grad=False)
    g.output("loss", 0.5 * dp.sum(dp.square(a @ b - t)))
    rng = np.random.default_rng(0)
    inputs = {k: rng.standard_normal((n, n)).astype(dtype) for k in "ABT"}
    return g.build(), inputs


def timed(step: Callable[[], Any]) -> float:
    start = time.perf_counter()
    step()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--case", default="chain16")
    p.add_argument("--size", type=int, help="the grid side (default 1024; with --wave 128)")
    p.add_argument("--reps", type=int, default=15)
    p.add_argument("--torch", action="store_true", help="run the torch peer before every dpt_ir round")
    p.add_argument("--omp-wait", choices=("passive", "active", "unset"), default="passive")
    p.add_argument("--wave", type=int, metavar="SHOTS", help="bench_wave's program with SHOTS shots batched")
    p.add_argument("--steps", type=int, default=300, help="with --wave: the time steps")
    p.add_argument("--matmul", action="store_true", help="0.5 ||A B - T||² instead of a case")
    p.add_argument("--dtype", default="float32", choices=("float32", "float64"), help="with --matmul")
    args = p.parse_args(argv)
    args.size = args.size or (128 if args.wave else 1024)
    print(f"load average before: {os.getloadavg()}")
    if args.wave:
        from benchmarks import bench_wave

        title, wrt = f"wave {args.wave} shots, {args.steps} steps, store-all", "v"
        graph = bench_wave.wave_graph(args.size, args.steps, args.wave, None)
        inputs = bench_wave.problem(args.size, args.steps, args.wave)
    elif args.matmul:
        title, wrt = f"0.5 ||A B - T||^2 {args.dtype}", "A"
        graph, inputs = matmul_problem(args.size, args.dtype)
    else:
        case = CASES[args.case]
        shape = (args.size, args.size)
        title, wrt = args.case, case.wrt
        graph, inputs = case.build(shape), case.inputs(shape, np.random.default_rng(0))
    programs = {n: dp.compile(graph, wrt=[wrt], device="cpu", threads=n) for n in (1, 2)}
    results = {n: prog.value_and_grad(**inputs) for n, prog in programs.items()}
    same = all(np.array_equal(results[1][0][k], results[2][0][k]) for k in results[1][0]) and np.array_equal(
        results[1][1][wrt], results[2][1][wrt]
    )
    src = np.random.default_rng(1).uniform(-1, 1, 1 << 23).astype(np.float32)
    dst = np.empty_like(src)
    steps: dict[str, Callable[[], Any]] = {
        "dpt_ir 1": lambda: programs[1].value_and_grad(**inputs),
        "dpt_ir 2": lambda: programs[2].value_and_grad(**inputs),
        "control 1": control(1, src, dst),
        "control 2": control(2, src, dst),
    }
    if args.wave:
        one = bench_wave.problem(args.size, args.steps, 1)
        single = dp.compile(bench_wave.wave_graph(args.size, args.steps, 1, None), wrt=[wrt], threads=1)
        steps["dpt_ir 1 shot"] = lambda: single.value_and_grad(**one)
    peer = torch_peer(args.case, inputs, wrt, args.omp_wait) if args.torch else None
    for step in steps.values():
        step()
    times: dict[str, list[float]] = {k: [] for k in steps}
    foreign: list[float] = []
    for _ in range(args.reps):
        for name, step in steps.items():
            if peer is not None and name.startswith("dpt_ir"):
                peer()
            before = run_ns()
            times[name].append(timed(step))
            if name == "dpt_ir 2":
                foreign.append(foreign_ms(before, run_ns()))
    med = {k: 1e3 * float(np.median(v)) for k, v in times.items()}
    print(
        f"{title} {args.size}^2, median of {args.reps} (wall ms): "
        + ", ".join(f"{k} {v:.2f}" for k, v in med.items())
    )
    print(f"dpt_ir 1 -> 2 threads: {med['dpt_ir 1'] / med['dpt_ir 2']:.2f}x; bit-identical: {same}")
    if args.wave:
        per_shot = med["dpt_ir 1"] / args.wave
        print(f"per batched shot, 1 thread: {per_shot:.2f} ms; one shot alone: {med['dpt_ir 1 shot']:.2f} ms "
              f"(batched / single: {per_shot / med['dpt_ir 1 shot']:.2f})")  # fmt: skip
    print(f"control (np.sin over 8M floats) 1 -> 2 threads: {med['control 1'] / med['control 2']:.2f}x")
    print(f"CPU of other threads during a dpt_ir 2 round (median ms): {np.median(foreign):.2f}")
    print(f"load average after: {os.getloadavg()}")


if __name__ == "__main__":
    main()

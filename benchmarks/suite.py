"""`dpt-ir bench`: every benchmark case against every available peer, in one run.

    python benchmarks/suite.py [--quick] [--size N] [--reps R] [--cases a,b] [--peers a,b]
                               [--threads T] [--device cpu] [--json PATH] [--plot PATH] [--warm-caches]

For each case (`benchmarks.cases`), each contender (`benchmarks.contenders`) is built
and run once — timed as *time to first result* (compile included, on fresh caches
unless ``--warm-caches``) — and its loss and gradient are checked against the NumPy
reference interpreter (`dp.interpret_grad`) before anything is timed. Then ``--reps``
rounds (after one untimed round) call every contender once, in an order rotated each
round; tables show medians.
Every contender runs on ``--threads`` threads (default 1; dpt_ir's ``threads=None`` resolves to the CPUs the
process is pinned to). ``benchmarks/thread_scaling.py`` measures dpt_ir's 1 -> 2 thread speed-up against a control.
``--quick`` (256x256, 3 rounds, no torch.compile unless named in ``--peers``) finishes in
70 s measured on 2 lightly loaded cores (about 3 minutes on a busy machine).
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

QUICK_SKIPS = ("torch.compile",)  # inductor compiles take ~20 s per case on this CPU


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(prog="dpt-ir bench", description=__doc__.splitlines()[0])
    p.add_argument(
        "--quick",
        action="store_true",
        help="256x256, 3 rounds, no torch.compile: 70 s measured on 2 lightly loaded cores",
    )
    p.add_argument("--size", type=int, default=None, help="side of the square inputs (default 1024; quick 256)")
    p.add_argument("--reps", type=int, default=None, help="timed rounds (default 7; quick 3)")
    p.add_argument("--cases", default=None, help="comma list of cases (default: all)")
    p.add_argument("--peers", default=None, help="comma list of contenders (default: all installed)")
    p.add_argument("--threads", type=int, default=1, help="threads per contender (default 1)")
    p.add_argument("--device", default="cpu", help="device of dpt_ir and Warp (and PyTorch on CUDA)")
    p.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    p.add_argument("--plot", type=Path, default=None, help="write a PNG plot here (needs matplotlib)")
    p.add_argument("--warm-caches", action="store_true", help="use the existing compile caches, not fresh ones")
    args = p.parse_args(argv)
    args.size = args.size or (256 if args.quick else 1024)
    args.reps = args.reps or (3 if args.quick else 7)
    return args


def configure_environment(threads: int, fresh_caches: bool) -> str | None:
    """Thread counts and compile caches, set before any framework is imported. Returns the
    temporary cache folder, if one was made.

    The process is also pinned to ``threads`` CPUs: thread-pool flags differ between
    framework versions (XLA's CPU runtime ignores some), pinning holds for all of them.
    OpenMP pools (torch's libgomp) wait passively (``OMP_WAIT_POLICY=PASSIVE`` unless set):
    the contenders share one process, and an actively waiting worker spins on a core after
    its own contender's round, into the next contender's (docs/benchmarks.md, thread scaling).
    """
    if hasattr(os, "sched_setaffinity"):
        cpus = sorted(os.sched_getaffinity(0))
        os.sched_setaffinity(0, set(cpus[: max(threads, 1)]))
    flags = f"--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads={threads}"
    os.environ["XLA_FLAGS"] = (os.environ.get("XLA_FLAGS", "") + " " + flags).strip()
    for var in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        os.environ[var] = str(threads)
    os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")
    if not fresh_caches:
        return None
    folder = tempfile.mkdtemp(prefix="dpt_ir-bench-")
    os.environ["DPT_IR_CACHE"] = str(Path(folder) / "dpt_ir")
    os.environ["WARP_CACHE_PATH"] = str(Path(folder) / "warp")
    os.environ["TORCHINDUCTOR_CACHE_DIR"] = str(Path(folder) / "inductor")
    return folder


def select(names: str | None, known: list[str], what: str) -> list[str]:
    if names is None:
        return known
    chosen = [n.strip() for n in names.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        progress(f"error: unknown {what} {', '.join(unknown)}; known: {', '.join(known)}")
        raise SystemExit(2)
    return chosen


def progress(message: str) -> None:
    # Not dpt_ir.cli.commands.progress: importing dpt_ir (numpy, Warp) must wait for configure_environment.
    print(message, file=sys.stderr, flush=True)


def check(name: str, result: tuple[Any, Any], want_loss: float, want_grad: Any, loss_rtol: float) -> float:
    """Raise if ``result`` is not the reference loss and gradient; the gradient's max
    error relative to its largest magnitude."""
    import numpy as np

    from benchmarks.contenders import as_numpy

    loss, grad = (as_numpy(v) for v in result)
    grad = grad.reshape(want_grad.shape)
    if not abs(float(loss.reshape(-1)[0]) - want_loss) <= loss_rtol * max(abs(want_loss), 1e-30):
        raise SystemExit(f"error: {name}: loss {float(loss.reshape(-1)[0])!r} differs from the reference {want_loss!r}")
    error = float(np.abs(grad - want_grad).max() / max(np.abs(want_grad).max(), 1e-30))
    if not error <= 1e-3:
        raise SystemExit(f"error: {name}: gradient differs from the reference (max relative error {error:.2e})")
    return error


def bench_case(
    case: Any,
    contenders: list[Any],
    args: argparse.Namespace,
    failures: list[str],
    cpu_steps: dict[str, list[float]] | None = None,
) -> dict[str, Any]:
    """Build, check and time every contender on one case. A peer that raises while being
    built or run is left out of the case and its error appended to ``failures``; a wrong
    result stops the run (the peer's code is wrong), and so does any error of dpt_ir.
    ``cpu_steps``, if given, gets each contender's process CPU seconds per timed step."""
    cpu_steps = {} if cpu_steps is None else cpu_steps
    import numpy as np

    import dpt_ir as dp
    from benchmarks.report import BASELINE, Measurement

    shape = (args.size, args.size)
    graph = case.build(shape)
    inputs = case.inputs(shape, np.random.default_rng(0))
    ref_out = dp.interpret(graph, **inputs)
    ref_grad = dp.interpret_grad(graph, [case.wrt], **inputs)[case.wrt].astype(np.float64)
    want_loss = float(ref_out["loss"])
    steps: dict[str, Any] = {}
    results: dict[str, Measurement] = {}
    for contender in contenders:
        start = time.perf_counter()
        try:
            step = contender.make(case, graph, inputs, args.device)
            result = None if step is None else step()
        except Exception as exc:  # a broken peer install must not end the run
            if contender.name == BASELINE:
                raise
            failures.append(f"{case.name}/{contender.name}: {type(exc).__name__}: {str(exc).splitlines()[0][:200]}")
            progress(f"  {contender.name:<15} FAILED, left out: {failures[-1]}")
            continue
        if step is None:
            continue
        first = time.perf_counter() - start
        error = check(f"{case.name}/{contender.name}", result, want_loss, ref_grad, contender.loss_rtol)
        launches = step.launches() if hasattr(step, "launches") else None
        results[contender.name] = Measurement(first, launches=launches, loss=want_loss, grad_error=error)
        steps[contender.name] = step
        progress(f"  {contender.name:<15} first result {first:7.2f} s   gradient error {error:.1e}")
    names = list(steps)
    for name in names:  # one untimed round: JIT peers settle after their first call
        steps[name]()
    for rep in range(args.reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            cpu0, t0 = time.process_time(), time.perf_counter()
            steps[name]()
            results[name].times_s.append(time.perf_counter() - t0)
            results[name].cpu_s += time.process_time() - cpu0
            cpu_steps.setdefault(name, []).append(time.process_time() - cpu0)
    return results


def cpu_report(cpu_ms: dict[str, dict[str, float]]) -> str:
    """Median process CPU time per step and the peers' CPU-time ratios to dpt_ir: on a shared,
    busy machine a step's CPU time is far less sensitive to descheduling than its wall time."""
    from benchmarks.report import BASELINE, _table

    names = list(dict.fromkeys(n for per in cpu_ms.values() for n in per))
    peers = [n for n in names if n != BASELINE]
    times = [[case, *(f"{per[n]:.2f}" if n in per else "-" for n in names)] for case, per in cpu_ms.items()]
    ratios = [
        [case, *(f"{per[n] / per[BASELINE]:.2f}x" if n in per else "-" for n in peers)]
        for case, per in cpu_ms.items()
        if BASELINE in per
    ]
    return "\n\n".join(
        [
            "CPU time per step (process CPU ms, median):\n" + _table(["cpu ms", *names], times),
            "Speed-up of dpt_ir by CPU time (peer / dpt_ir):\n" + _table(["peer / dpt_ir (cpu)", *peers], ratios),
        ]
    )


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cache_folder = configure_environment(args.threads, fresh_caches=not args.warm_caches)
    import warp as wp

    wp.config.log_level = 30  # warnings only: no banner or per-module load lines in the report
    from benchmarks.cases import CASES
    from benchmarks.contenders import CONTENDERS
    from benchmarks.report import format_report, machine, write_json, write_plot

    case_names = select(args.cases, list(CASES), "case")
    chosen = select(args.peers, list(CONTENDERS), "contender")
    wanted = [n for n in CONTENDERS if n in chosen]  # table order, whatever the order asked
    if args.quick and args.peers is None:
        wanted = [n for n in wanted if n not in QUICK_SKIPS]
    contenders = [CONTENDERS[n] for n in wanted]
    missing = [c.name for c in contenders if not c.available()]
    contenders = [c for c in contenders if c.available()]
    if "torch" in {r for c in contenders for r in c.requires}:
        import torch

        torch.set_num_threads(args.threads)
    meta: dict[str, Any] = {
        **machine(),
        "device": args.device,
        "threads": args.threads,
        "shape": [args.size, args.size],
        "shape_label": f"{args.size}x{args.size}",
        "reps": args.reps,
        "fresh_caches": cache_folder is not None,
        "contenders": {c.name: c.note for c in contenders},
        "not_installed": missing,
    }
    print(
        f"dpt-ir bench: {args.size}x{args.size} float32, device {args.device}, {args.threads} thread(s), "
        f"median of {args.reps}; {meta['cpu']} ({meta['cores']} cores); {meta['date']}"
    )
    print("versions: " + ", ".join(f"{k} {v}" for k, v in meta["versions"].items()))
    if missing:
        print(f"not installed (pip install -e '.[peers]'): {', '.join(missing)}")
    start = time.perf_counter()
    results = {}
    failures: list[str] = []
    cpu_ms: dict[str, dict[str, float]] = {}
    for k, name in enumerate(case_names, 1):
        progress(f"[{k}/{len(case_names)}] {name}: {CASES[name].title}")
        cpu_steps: dict[str, list[float]] = {}
        results[name] = bench_case(CASES[name], contenders, args, failures, cpu_steps)
        cpu_ms[name] = {n: 1e3 * statistics.median(v) for n, v in cpu_steps.items()}
    meta["failures"] = failures
    meta["cpu_ms_median"] = cpu_ms
    print()
    print(format_report(results))
    print()
    print(cpu_report(cpu_ms))
    if failures:
        print("\nLeft out after an error:\n  " + "\n  ".join(failures))
    if args.json:
        write_json(args.json, results, meta)
        print(f"\nwrote {args.json}")
    if args.plot and importlib.util.find_spec("matplotlib") is None:
        progress(f"bench: no plot written to {args.plot}: matplotlib is not installed (pip install matplotlib)")
    elif args.plot:
        write_plot(args.plot, results, meta)
        print(f"wrote {args.plot}")
    progress(f"bench: {len(case_names)} case(s) in {time.perf_counter() - start:.1f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())

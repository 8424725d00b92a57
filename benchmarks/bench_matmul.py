"""Matrix product benchmark: ``value_and_grad`` of ``sum(s * (a @ b))`` against NumPy, on the CPU.

    OPENBLAS_NUM_THREADS=1 python benchmarks/bench_matmul.py [--size 256] [--reps 7] [--threads 1]

In one process, for N x N operands in float64 and float32:

1. dpt_ir: ``Program.value_and_grad`` (the product and both gradients, ``s @ b.T`` and
   ``a.T @ s``: three launches of the C++ contraction driver, float32 summed in float64 in
   one fixed order);
2. NumPy: the same three products with ``np.matmul`` (BLAS) and the loss.

The gradients are checked against each other first. Rounds interleave the contenders in
rotating order after one warm-up (`benchmarks.rounds.measure`); each reports the median
wall time and the median CPU time of the calling thread, and the median per-round ratios.
With one thread each (``--threads 1`` and a single-threaded BLAS, as above) the CPU time
is all of the work and does not depend on what else the machine runs. dpt_ir's kernels sum
in float64 in one fixed order, BLAS in the operands' precision in its own: the ratio says what that costs.

Thin products (matrix x vector, vector x matrix, a batched matrix x vector) against OpenBLAS's
best kernel and PyTorch: ``python benchmarks/bench_gemm.py --thin`` (its peers and re-execution
without ``OPENBLAS_CORETYPE`` / ``OPENBLAS_L2_SIZE``).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# First on the path: the repository root holds the benchmarks package, and run from another
# checkout (an A/B worktree) the script imports that checkout's dpt_ir, not the editable install's.
sys.path.insert(0, str(ROOT))

import dpt_ir as dp  # noqa: E402
from benchmarks.rounds import measure  # noqa: E402


def _program(n: int, dtype: str, threads: int | None) -> dp.Program:
    g = dp.GraphBuilder(f"bench_matmul_{dtype}")
    a, b = g.input("a", (n, n), dtype), g.input("b", (n, n), dtype)
    s = g.input("s", (n, n), dtype, requires_grad=False)
    g.output("loss", dp.sum(s * (a @ b)))
    return dp.compile(g.build(), wrt=["a", "b"], device="cpu", threads=threads)


def _numpy(a: np.ndarray, b: np.ndarray, s: np.ndarray) -> tuple[float, np.ndarray, np.ndarray]:
    return float(np.sum(s * (a @ b))), s @ b.T, a.T @ s


def _bench(n: int, dtype: str, rtol: float, threads: int | None, reps: int) -> None:
    """Check, time and print one dtype."""
    rng = np.random.default_rng(0)
    a, b, s = (rng.standard_normal((n, n)).astype(dtype) for _ in range(3))
    program = _program(n, dtype, threads)
    _, grads = program.value_and_grad(a=a, b=b, s=s)
    _, ga, gb = _numpy(a, b, s)
    np.testing.assert_allclose(grads["a"], ga, rtol=rtol, atol=rtol * n)
    np.testing.assert_allclose(grads["b"], gb, rtol=rtol, atol=rtol * n)
    times = measure({"dpt_ir": lambda: program.value_and_grad(a=a, b=b, s=s), "numpy": lambda: _numpy(a, b, s)}, reps)
    ratio = {
        k: statistics.median(x / y for x, y in zip(times["dpt_ir"][k], times["numpy"][k], strict=True))
        for k in ("wall", "cpu")
    }
    used = program.plans["value_and_grad"].threads
    print(f"{n} x {n} @ {n} x {n} value_and_grad, {dtype}, dpt_ir on {used} thread(s):")
    for name, t in times.items():
        wall, cpu = statistics.median(t["wall"]) * 1e3, statistics.median(t["cpu"]) * 1e3
        print(f"  {name:7s} wall {wall:8.2f} ms   cpu (calling thread) {cpu:8.2f} ms")
    print(f"  dpt_ir / numpy (median per round): wall {ratio['wall']:.1f}x, cpu {ratio['cpu']:.1f}x")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--threads", type=int, default=None, help="CPU threads per launch (default: every core)")
    args = parser.parse_args()
    for dtype, rtol in (("float64", 1e-10), ("float32", 1e-4)):
        _bench(args.size, dtype, rtol, args.threads, args.reps)


if __name__ == "__main__":
    main()

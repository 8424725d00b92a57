"""Dense products against OpenBLAS (through NumPy) and PyTorch eager: GFLOP/s, ratios measured in
one run, and the fraction of the core's peak (issue 31).

    python benchmarks/bench_gemm.py [--quick] [--thin] [--epilogue] [--sizes N ...] [--threads 1|all|both] [--reps 5]
                                    [--out R.json]

Cases, float32 and float64: square products ``A @ B`` at 64², 256², 512², 1024², 2048² (or
``--sizes``); a batched 256 x 64 x 64 product; thin products (``--thin``: only these and the
squares of ``--sizes``): matrix x vector ``A @ x`` (1024 x 1024, 4096 x 1024), vector x matrix
``x @ B`` (1024 x 1024, 1024 x 4096) and a batched matrix x vector (64 x 256 x 256 @ 64 x 256
x 1); and an MLP layer ``sum(s * tanh(x @ W + b))`` whose ``value_and_grad``
(wrt x, W, b) runs the forward product and both backward ones (``dX = dY Wᵀ``, ``dW = Xᵀ dY``).
``--epilogue``: only the forward layer ``tanh(x @ W + b)`` at ``--sizes`` (default 64² to 1024²),
its bias and ``tanh`` fused into the product's kernel (``dp.compile(..., epilogues=True)``, the
row "dpt_ir") against the same program with a pointwise kernel of its own ("unfused",
``epilogues=False``) and PyTorch eager; the two programs' bits are checked equal first.
Each contender runs with one thread (timed in the calling thread's CPU time, where every contender
computes), then with every core (wall time; ``--threads``); the rounds interleave
the contenders after a warm-up (`benchmarks.rounds.measure`) and report medians. A sample is as
many calls as make the slowest contender's span 2 ms (one call from 512² up; hundreds at 64²), the
same count for every contender, and the figures are per call.

OpenBLAS: this machine sets ``OPENBLAS_CORETYPE=Haswell`` and ``OPENBLAS_L2_SIZE``, which hold
OpenBLAS to its AVX2 kernel; the script re-executes itself without them (and without any
``*_NUM_THREADS``) before NumPy is imported, so OpenBLAS picks its best kernel for the core, and
prints which one ran (`threadpoolctl`). Tests and CI never change these variables.

Peak: ``clock x FMA lanes x 2 (an FMA is two flops) x vector FMAs per cycle``. The clock is
measured: a chain of dependent integer additions (one cycle each on every x86 core) compiled with
the system C compiler, timed over 2·10⁹ additions; without a C compiler, the kernel's ``cpu MHz``
is used and the line says so. Lanes follow the widest vector ISA the CPU flags list (AVX-512: 16
float32 or 8 float64; AVX2: 8 or 4). The FMAs per cycle are measured too: 12 independent chains
of vector FMAs of that width (``vfmadd231ps``), timed like the clock (an AMD Zen 4 core runs a
512-bit FMA on its two 256-bit pipes, one per cycle; a Sapphire Rapids core two); without a C
compiler, 2 (the FMA units of current x86 server cores), and the line says so.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

BLAS_VARS = ("OPENBLAS_CORETYPE", "OPENBLAS_L2_SIZE", "OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS")
if any(v in os.environ for v in BLAS_VARS) and os.environ.get("DPT_IR_GEMM_CHILD") != "1":
    env = {k: v for k, v in os.environ.items() if k not in BLAS_VARS}
    env["DPT_IR_GEMM_CHILD"] = "1"
    os.execve(sys.executable, [sys.executable, *sys.argv], env)  # OpenBLAS reads them when it loads

import numpy as np  # noqa: E402
import torch  # noqa: E402
from threadpoolctl import threadpool_info, threadpool_limits  # noqa: E402

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import dpt_ir as dp  # noqa: E402
from benchmarks.rounds import measure  # noqa: E402

SQUARES = (64, 256, 512, 1024, 2048)
QUICK = (64, 256, 512)
BATCH = (256, 64, 64, 64)  # batch, m, k, n
MLP = (512, 512, 512)  # rows, features in, features out
# thin products: case -> (A's shape, B's shape)
THIN_SHAPES = {
    "mv 1024": ((1024, 1024), (1024,)),
    "mv 4096x1024": ((4096, 1024), (1024,)),
    "vm 1024": ((1024,), (1024, 1024)),
    "vm 1024x4096": ((1024,), (1024, 4096)),
    "batched mv": ((64, 256, 256), (64, 256, 1)),
}
CLOCK_C = r"""
#include <stdint.h>
uint64_t chain(uint64_t n) {
    uint64_t x = 0;
    for (uint64_t i = 0; i < n; i += 8)
        __asm__ volatile("add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\t"
                         "add $1, %0\n\tadd $1, %0\n\tadd $1, %0\n\tadd $1, %0" : "+r"(x));
    return x;
}
"""


def measured_clock_ghz() -> tuple[float, str]:
    """The core's clock in GHz and how it was found."""
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp) / "clock.c", Path(tmp) / "clock.so"
        src.write_text(CLOCK_C)
        built = subprocess.run(["cc", "-O2", "-shared", "-fPIC", str(src), "-o", str(lib)], capture_output=True)
        if built.returncode == 0:
            chain = ctypes.CDLL(str(lib)).chain
            chain.argtypes, chain.restype = [ctypes.c_uint64], ctypes.c_uint64
            n = 2_000_000_000
            chain(n // 20)  # reach the boost clock
            start = time.thread_time()  # this thread's CPU time: another process's load does not count
            chain(n)
            ghz = n / (time.thread_time() - start) / 1e9
            return ghz, f"measured: {n:.0e} dependent adds, 1 cycle each, timed in this thread's CPU time"
    mhz = next(float(line.split(":")[1]) for line in Path("/proc/cpuinfo").read_text().splitlines() if "MHz" in line)
    return mhz / 1e3, "from /proc/cpuinfo (no C compiler to measure it)"


FMA_C = r"""
#include <stdint.h>
#define F(r) "vfmadd231ps %%REG0, %%REG1, %%" #r "\n\t"
void fmas(uint64_t n) {
    for (uint64_t i = 0; i < n; ++i)
        __asm__ volatile(F(REG2) F(REG3) F(REG4) F(REG5) F(REG6) F(REG7)
                         F(REG8) F(REG9) F(REG10) F(REG11) F(REG12) F(REG13) ::: "memory");
}
"""


def vector_bits() -> int:
    """The widest vector FMA the CPU flags list: 512 (AVX-512), 256 (AVX2) or 128."""
    flags = Path("/proc/cpuinfo").read_text()
    return 512 if "avx512f" in flags else 256 if "avx2" in flags else 128


def measured_fmas_per_cycle(bits: int, ghz: float) -> tuple[float, str]:
    """Vector FMAs of width ``bits`` the core retires per cycle, and how it was found: 12
    independent chains (more than latency x pipes on current cores), timed in this thread."""
    reg = {512: "zmm", 256: "ymm", 128: "xmm"}[bits]
    text = FMA_C
    for r in range(13, -1, -1):  # REG13 before REG1: no name is a prefix of a later one
        text = text.replace(f"REG{r}", f"{reg}{r}")
    with tempfile.TemporaryDirectory() as tmp:
        src, lib = Path(tmp) / "fma.c", Path(tmp) / "fma.so"
        src.write_text(text)
        flag = {512: "-mavx512f", 256: "-mavx2", 128: "-msse2"}[bits]
        command = ["cc", "-O2", flag, "-mfma", "-shared", "-fPIC", str(src), "-o", str(lib)]
        built = subprocess.run(command, capture_output=True)
        if built.returncode == 0:
            fmas = ctypes.CDLL(str(lib)).fmas
            fmas.argtypes, fmas.restype = [ctypes.c_uint64], None
            n = 100_000_000
            fmas(n // 20)
            start = time.thread_time()
            fmas(n)
            rate = 12 * n / (time.thread_time() - start) / (ghz * 1e9)
            return rate, f"measured: {12 * n:.1e} independent {bits}-bit FMAs, timed in this thread's CPU time"
    return 2.0, "stated: 2 FMA pipes (no C compiler to measure them)"


def peak_gflops(dtype: str, ghz: float, fma_rate: float) -> tuple[float, str]:
    bits = vector_bits()
    lanes = bits // (32 if dtype == "float32" else 64)
    return ghz * lanes * 2 * fma_rate, (
        f"{ghz:.2f} GHz x {lanes} {dtype} lanes ({bits}-bit FMA) x 2 flops x {fma_rate:.2f} FMAs per cycle"
    )


def _matmul_program(shape_a: tuple[int, ...], shape_b: tuple[int, ...], dtype: str, threads: int) -> dp.Program:
    g = dp.GraphBuilder(f"gemm_{dtype}")
    a, b = g.input("a", shape_a, dtype), g.input("b", shape_b, dtype)
    g.output("c", a @ b)
    return dp.compile(g.build(), device="cpu", threads=threads)


def _mlp_program(dtype: str, threads: int) -> dp.Program:
    rows, fin, fout = MLP
    g = dp.GraphBuilder(f"mlp_{dtype}")
    x, w, b = g.input("x", (rows, fin), dtype), g.input("w", (fin, fout), dtype), g.input("b", (fout,), dtype)
    s = g.input("s", (rows, fout), dtype, requires_grad=False)
    g.output("loss", dp.sum(s * dp.tanh(x @ w + b)))
    return dp.compile(g.build(), wrt=["x", "w", "b"], device="cpu", threads=threads)


def _layer_program(n: int, dtype: str, threads: int, epilogues: bool) -> dp.Program:
    """``tanh(x @ W + b)`` at n², forward only, its pointwise part fused into the product's kernel
    (``epilogues``) or a kernel of its own."""
    g = dp.GraphBuilder(f"layer_{dtype}")
    x, w, b = g.input("x", (n, n), dtype), g.input("w", (n, n), dtype), g.input("b", (n,), dtype)
    g.output("y", dp.tanh(x @ w + b))
    return dp.compile(g.build(), device="cpu", threads=threads, epilogues=epilogues)


def _torch_mlp(x: np.ndarray, w: np.ndarray, b: np.ndarray, s: np.ndarray) -> Callable[[], Any]:
    tx, tw, tb = (torch.tensor(v, requires_grad=True) for v in (x, w, b))
    ts = torch.tensor(s)

    def run() -> Any:
        for t in (tx, tw, tb):
            t.grad = None
        loss = (ts * torch.tanh(tx @ tw + tb)).sum()
        loss.backward()
        return loss

    return run


def _contenders(case: str, n: int, dtype: str, threads: int, rng: np.random.Generator) -> tuple[dict, float]:
    """The callables of one case, checked to agree, and its flop count."""
    if case == "mlp":
        rows, fin, fout = MLP
        x, w = (rng.standard_normal(s).astype(dtype) for s in ((rows, fin), (fin, fout)))
        b, s = rng.standard_normal(fout).astype(dtype), rng.standard_normal((rows, fout)).astype(dtype)
        program = _mlp_program(dtype, threads)
        ins = {"x": x, "w": w, "b": b, "s": s}
        return {
            "dpt_ir": lambda: program.value_and_grad(**ins),
            "torch": _torch_mlp(x, w, b, s),
        }, 3 * 2.0 * rows * fin * fout
    if case == "layer":
        x, w = rng.standard_normal((n, n)).astype(dtype), (rng.standard_normal((n, n)) / np.sqrt(n)).astype(dtype)
        b = rng.standard_normal(n).astype(dtype)
        fused, unfused = (_layer_program(n, dtype, threads, e) for e in (True, False))
        ins = {"x": x, "w": w, "b": b}
        assert np.array_equal(fused.run(**ins)["y"], unfused.run(**ins)["y"])  # the same bits
        tx, tw, tb = (torch.tensor(v) for v in (x, w, b))
        return {
            "dpt_ir": lambda: fused.run(**ins),
            "unfused": lambda: unfused.run(**ins),
            "torch": lambda: torch.tanh(tx @ tw + tb),
        }, 2.0 * n**3
    if case in THIN_SHAPES:
        sa, sb = THIN_SHAPES[case]
        a, b = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
        flops = 2.0 * np.matmul(a, b).size * sa[-1]  # each output element: k FMAs
    elif case == "batched":
        batch, m, k, nn = BATCH
        a, b = rng.standard_normal((batch, m, k)).astype(dtype), rng.standard_normal((batch, k, nn)).astype(dtype)
        flops = 2.0 * batch * m * k * nn
    else:
        a, b = rng.standard_normal((n, n)).astype(dtype), rng.standard_normal((n, n)).astype(dtype)
        flops = 2.0 * n**3
    program = _matmul_program(a.shape, b.shape, dtype, threads)
    got, want = program.run(a=a, b=b)["c"], a @ b
    np.testing.assert_allclose(got, want, rtol=1e-4 if dtype == "float32" else 1e-10, atol=1e-3)
    ta, tb = torch.tensor(a), torch.tensor(b)
    return {"dpt_ir": lambda: program.run(a=a, b=b), "numpy": lambda: a @ b, "torch": lambda: ta @ tb}, flops


SAMPLE_SECONDS = 2e-3  # a timed sample spans at least this long (`_calls_per_sample`)


def _calls_per_sample(fns: dict[str, Callable[[], Any]]) -> int:
    """Calls per timed sample, the same for every contender: enough for the slowest one's sample
    to span `SAMPLE_SECONDS`. A lone call of a few microseconds (64²) would be timed mostly
    cold and with the clock's own cost in it, which biases every ratio towards 1."""
    slowest = 0.0
    for fn in fns.values():
        fn()  # warm
        start = time.perf_counter()
        fn()
        slowest = max(slowest, time.perf_counter() - start)
    return max(1, int(SAMPLE_SECONDS / max(slowest, 1e-9)))


def _repeated(fn: Callable[[], Any], calls: int) -> Callable[[], None]:
    def sample() -> None:
        for _ in range(calls):
            fn()

    return sample


def run(cases: list[tuple[str, int]], dtypes: list[str], threads: list[int], reps: int) -> list[dict[str, Any]]:
    rows = []
    rng = np.random.default_rng(0)
    ghz, how = measured_clock_ghz()
    print(f"clock {ghz:.2f} GHz ({how})")
    fma_rate, fma_how = measured_fmas_per_cycle(vector_bits(), ghz)
    print(f"vector FMAs per cycle {fma_rate:.2f} ({fma_how})")
    for dtype in dtypes:
        peak, formula = peak_gflops(dtype, ghz, fma_rate)
        print(f"peak {dtype}: {peak:.0f} GFLOP/s per core = {formula}")
    for t in threads:
        torch.set_num_threads(t)
        with threadpool_limits(limits=t):
            blas = [f"{i['internal_api']} {i.get('version')} {i.get('architecture')}" for i in threadpool_info()]
            print(f"\n-- {t} thread(s); BLAS: {', '.join(blas)}")
            for dtype in dtypes:
                peak, _ = peak_gflops(dtype, ghz, fma_rate)
                for case, n in cases:
                    fns, flops = _contenders(case, n, dtype, t, rng)
                    calls = _calls_per_sample(fns)
                    times = measure({k: _repeated(fn, calls) for k, fn in fns.items()}, reps)
                    label = f"{case} {n}" if case in ("square", "layer") else case
                    row = {"case": label, "dtype": dtype, "threads": t, "flops": flops}
                    for name, m in times.items():
                        # one thread: the calling thread's CPU time (every contender computes on
                        # it, and another process's load does not count); more: wall time
                        seconds = statistics.median(m["cpu" if t == 1 else "wall"]) / calls
                        row[name] = {"ms": seconds * 1e3, "gflops": flops / seconds / 1e9}
                    gf = row["dpt_ir"]["gflops"]
                    ratios = "  ".join(f"vs {k} {gf / row[k]['gflops']:.2f}x" for k in fns if k != "dpt_ir")
                    peers = "  ".join(f"{k} {row[k]['gflops']:7.1f}" for k in fns if k != "dpt_ir")
                    print(f"{label:>12} {dtype}: dpt_ir {gf:7.1f} GFLOP/s ({gf / (peak * t):5.1%} of peak)  "
                          f"{peers}  {ratios}")  # fmt: skip
                    rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--quick", action="store_true", help="64², 256², 512², batched and MLP only")
    parser.add_argument("--thin", action="store_true", help="the thin products only (and the squares of --sizes)")
    parser.add_argument("--sizes", type=int, nargs="+", help="the square sizes (default: all, or --quick's)")
    parser.add_argument(
        "--epilogue", action="store_true", help="tanh(x @ W + b) forward, fused epilogue against unfused (--sizes)"
    )
    parser.add_argument("--threads", choices=["1", "all", "both"], default="both")
    parser.add_argument("--dtype", choices=["float32", "float64", "both"], default="both")
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--out", type=Path, help="also write the rows as JSON")
    args = parser.parse_args()
    cores = len(os.sched_getaffinity(0))
    threads = {"1": [1], "all": [cores], "both": sorted({1, cores})}[args.threads]
    dtypes = ["float32", "float64"] if args.dtype == "both" else [args.dtype]
    sizes = args.sizes or (QUICK if args.quick else SQUARES)
    cases = [("square", n) for n in sizes] + [("batched", 0)] + [(c, 0) for c in THIN_SHAPES] + [("mlp", 0)]
    if args.thin:
        cases = [("square", n) for n in args.sizes or ()] + [(c, 0) for c in THIN_SHAPES]
    if args.epilogue:
        cases = [("layer", n) for n in args.sizes or (64, 256, 512, 1024)]
    rows = run(cases, dtypes, threads, args.reps)
    if args.out is not None:
        args.out.write_text(json.dumps(rows, indent=1))


if __name__ == "__main__":
    main()

"""Throughput of the float32 math header (`dp_math.h`) against NumPy, one thread.

    python benchmarks/bench_math.py [--n 22] [--reps 7] [--only exp softplus ...]

Also the harness the accuracy test uses (`tests/backend/test_math_ulp.py`): one Warp CPU
module whose module preamble is the header plus a driver, ``dp_eval``, with one plain C++
element loop per function (``o[i] = dp_f(a[i])``: every call inlined, so the loop
vectorises); ``evaluate`` runs one function over NumPy arrays through a ``wp.func_native``
stub. The same text is also the module's CUDA preamble.

Timing: 2^n float32 elements (default 4M), each function evaluated by the header and by
its NumPy (SciPy for erf) float32 counterpart writing into a preallocated output; a round
runs every contender once in rotating order, and the table gives the median of the
calling thread's CPU time (``time.thread_time``) over ``--reps`` rounds after a warm-up,
and the median of the per-round ratios. Inputs are drawn once (seed 0) from each
function's usual range (in table order, so ``--only`` draws other samples).
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import warp as wp

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

from dpt_ir.backends.cxx import math_header  # noqa: E402

# Every function of the header; the *_fast trig variants report huge arguments in a flag.
UNARY = ("exp", "log", "log1p", "expm1", "sin", "cos", "sin_fast", "cos_fast", "tanh", "sigmoid", "softplus", "erf")
UNARY += ("sqrt", "rsqrt")
BINARY = ("pow", "atan2")
FUNCTIONS = UNARY + BINARY


def _case(k: int, name: str) -> str:
    if name in BINARY:
        body = f"o[i] = dp_{name}(a[i], b[i]);"
    elif name.endswith("_fast"):
        body = f"o[i] = dp_{name}(a[i], big);"
    else:
        body = f"o[i] = dp_{name}(a[i]);"
    return f"    case {k}: for (int i = 0; i < n; ++i) {{ {body} }} break;"


DRIVER = "\n".join(
    [
        "// One element loop per function; flag[0] = 1 when a fast trig loop saw |x| >= 2^19.",
        "DP_FN void dp_eval(int fn, const float* __restrict__ a, const float* __restrict__ b,",
        "                   float* __restrict__ o, int* flag, int n) {",
        "    bool big = false;",
        "    switch (fn) {",
        *(_case(k, name) for k, name in enumerate(FUNCTIONS)),
        "    default: break;",
        "    }",
        "    flag[0] = big;",
        "}",
    ]
)
PREAMBLE = math_header() + "\n" + DRIVER + "\n"

wp.set_module_options(
    {
        "enable_backward": False,
        "extra_build_options": wp.ModuleBuildOptions(extra_cpu_preamble=PREAMBLE, extra_cuda_preamble=PREAMBLE),
    }
)


@wp.func_native("dp_eval(fn, (const float*)a.data, (const float*)b.data, (float*)o.data, (int*)flag.data, n);")
def dp_eval_native(
    fn: int,
    a: wp.array(dtype=wp.float32),
    b: wp.array(dtype=wp.float32),
    o: wp.array(dtype=wp.float32),
    flag: wp.array(dtype=wp.int32),
    n: int,
): ...


@wp.kernel
def eval_kernel(
    fn: int,
    a: wp.array(dtype=wp.float32),
    b: wp.array(dtype=wp.float32),
    o: wp.array(dtype=wp.float32),
    flag: wp.array(dtype=wp.int32),
    n: int,
):
    dp_eval_native(fn, a, b, o, flag, n)


def build() -> None:
    """Build (or load from Warp's cache) the harness module for the CPU."""
    wp.init()
    wp.load_module(eval_kernel.module, device="cpu")


class Evaluator:
    """Evaluates one header function into a preallocated output, zero-copy on NumPy arrays."""

    def __init__(self, name: str, a: np.ndarray, b: np.ndarray | None = None) -> None:
        if name not in FUNCTIONS:
            raise ValueError(f"dp_math.h has no function {name!r}; expected one of {FUNCTIONS}")
        if (b is not None) != (name in BINARY):
            raise ValueError(f"{name} takes {2 if name in BINARY else 1} argument(s)")
        self.a = np.ascontiguousarray(a, dtype=np.float32)
        self.b = self.a if b is None else np.ascontiguousarray(b, dtype=np.float32)
        if self.b.shape != self.a.shape:
            raise ValueError(f"{name}: argument shapes differ: {self.a.shape} and {self.b.shape}")
        self.out = np.empty_like(self.a)
        self.flag = np.zeros(1, dtype=np.int32)
        arrays = [
            wp.array(v.reshape(-1), dtype=dtype, device="cpu", copy=False)
            for v, dtype in ((self.a, wp.float32), (self.b, wp.float32), (self.out, wp.float32), (self.flag, wp.int32))
        ]
        self.inputs = [FUNCTIONS.index(name), *arrays, self.a.size]

    def __call__(self) -> np.ndarray:
        wp.launch(eval_kernel, dim=1, inputs=self.inputs, device="cpu")
        return self.out


def evaluate(name: str, a: np.ndarray, b: np.ndarray | None = None) -> tuple[np.ndarray, bool]:
    """``dp_<name>`` over ``a`` (and ``b``); (the float32 results, whether a fast trig
    function saw a finite |x| >= 2^19)."""
    ev = Evaluator(name, a, b)
    out = ev()
    return out.copy(), bool(ev.flag[0])


# -- the benchmark ---------------------------------------------------------------------
def _erf(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    from scipy.special import erf

    return erf(x, out=out)


def _sigmoid(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.negative(x, out=out)
    np.exp(out, out=out)
    out += 1.0
    return np.reciprocal(out, out=out)


def _rsqrt(x: np.ndarray, out: np.ndarray) -> np.ndarray:
    np.sqrt(x, out=out)
    return np.reciprocal(out, out=out)


NUMPY: dict[str, tuple[str, Callable[..., np.ndarray]]] = {
    "exp": ("np.exp", np.exp),
    "log": ("np.log", np.log),
    "log1p": ("np.log1p", np.log1p),
    "expm1": ("np.expm1", np.expm1),
    "sin": ("np.sin", np.sin),
    "cos": ("np.cos", np.cos),
    "sin_fast": ("np.sin", np.sin),
    "cos_fast": ("np.cos", np.cos),
    "tanh": ("np.tanh", np.tanh),
    "sigmoid": ("1/(1+np.exp(-x))", _sigmoid),
    "softplus": ("np.logaddexp(0, x)", lambda x, out: np.logaddexp(np.float32(0), x, out=out)),
    "erf": ("scipy.special.erf", _erf),
    "sqrt": ("np.sqrt", np.sqrt),
    "rsqrt": ("1/np.sqrt(x)", _rsqrt),
    "pow": ("np.power", np.power),
    "atan2": ("np.arctan2", np.arctan2),
}

RANGES: dict[str, tuple[float, float]] = {
    "exp": (-80.0, 80.0),
    "log": (1e-30, 1e30),
    "log1p": (-0.99, 100.0),
    "expm1": (-10.0, 10.0),
    "sin": (-100.0, 100.0),
    "cos": (-100.0, 100.0),
    "sin_fast": (-100.0, 100.0),
    "cos_fast": (-100.0, 100.0),
    "tanh": (-10.0, 10.0),
    "sigmoid": (-20.0, 20.0),
    "softplus": (-20.0, 20.0),
    "erf": (-4.0, 4.0),
    "sqrt": (0.0, 1e6),
    "rsqrt": (1e-6, 1e6),
    "pow": (0.0, 10.0),
    "atan2": (-10.0, 10.0),
}


def bench_inputs(name: str, n: int, rng: np.random.Generator) -> tuple[np.ndarray, ...]:
    lo, hi = RANGES[name]
    a = rng.uniform(lo, hi, n).astype(np.float32)
    if name == "pow":
        return a, rng.uniform(-4.0, 4.0, n).astype(np.float32)
    if name == "atan2":
        return a, rng.uniform(lo, hi, n).astype(np.float32)
    return (a,)


def measure(name: str, n: int, reps: int, rng: np.random.Generator) -> tuple[float, float, float]:
    """(header ms, NumPy ms, median NumPy/header ratio) of one function."""
    args = bench_inputs(name, n, rng)
    ev = Evaluator(name, *args)
    out = np.empty(n, np.float32)
    peer = NUMPY[name][1]
    contenders: list[Callable[[], object]] = [ev, lambda: peer(*args, out=out)]
    times: list[list[float]] = [[], []]
    for rnd in range(reps + 1):
        order = [0, 1] if rnd % 2 == 0 else [1, 0]
        for k in order:
            t0 = time.thread_time()
            contenders[k]()
            if rnd:
                times[k].append(time.thread_time() - t0)
    ratio = statistics.median(p / h for h, p in zip(times[0], times[1], strict=True))
    return statistics.median(times[0]) * 1e3, statistics.median(times[1]) * 1e3, ratio


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--n", type=int, default=22, help="log2 of the element count (default 22: 4M)")
    parser.add_argument("--reps", type=int, default=7, help="timed rounds per function (default 7)")
    parser.add_argument("--only", nargs="+", choices=FUNCTIONS, help="time these functions only (default: all)")
    args = parser.parse_args(argv)
    n = 1 << args.n
    build()
    rng = np.random.default_rng(0)
    print(f"# dp_math.h vs NumPy {np.__version__}, {n} float32, one thread, CPU time, median of {args.reps}")
    print("| function | input range | dp_math ms | peer | peer ms | peer / dp_math |")
    print("|---|---|---:|---|---:|---:|")
    for name in args.only or FUNCTIONS:
        ms, peer_ms, ratio = measure(name, n, args.reps, rng)
        lo, hi = RANGES[name]
        print(f"| {name} | [{lo:g}, {hi:g}] | {ms:.2f} | {NUMPY[name][0]} | {peer_ms:.2f} | {ratio:.2f}x |")


if __name__ == "__main__":
    main()

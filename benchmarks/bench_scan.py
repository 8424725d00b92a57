"""value_and_grad of explicit heat steps through a loop: dpt_ir's `dp.scan` against PyTorch
eager autograd and `jax.jit` of `lax.scan` + `jax.grad`, in the same run.

The model (float32, ``n x n``, ``steps`` steps, conductivity ``k`` closed over):

    u_{t+1} = u_t + 0.2 * k * laplacian(u_t)   (nearest-value boundaries)
    loss    = sum((u_T - obs)^2)                gradients wrt u0 and k

Each contender runs in its own child process (``--child NAME``), so its peak resident
memory (``ru_maxrss``) is its own; the figure reported is the peak minus the resident
size after imports and input set-up (``peak_mib``). ``dpt_ir_K32`` is ``checkpoint=32``
(binomial checkpointing with 32 stored carries); the ``_dtype`` variants build the laplacian with
``accumulate="dtype"`` (float32 taps summed as an fmaf chain, as XLA and PyTorch sum them; the
default sums them in float64, as SciPy). Every contender runs on one thread
(``dp.compile(threads=1)``, ``torch.set_num_threads(1)``, XLA's single-threaded Eigen with
``intra_op_parallelism_threads=1``): the machine is shared, and issue 28 states its targets
per thread. ``first_s`` is the first call
(dpt_ir: ``dp.compile`` with empty caches of its own, then one call; JAX: trace + XLA compile + one
call; PyTorch: one call), ``time_s`` the median of ``--repeat`` further calls. dpt_ir
runs twice: a child with empty caches (the cold first call, which includes building the
Warp modules), then one with the caches it left (the warm first call); time and peak
memory are the warm child's, so that the C++ compiler's memory is not counted as the
program's. Gradients
are checked against dpt_ir's (the largest relative difference, ``grad_rel_diff``).

Run: ``python benchmarks/bench_scan.py`` (1,000 steps on 128 x 128); ``--steps 20 --size
16`` is a quick smoke run. Prints a Markdown table.
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

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# First on the path: run from another checkout (an A/B worktree), the script imports that
# checkout's dpt_ir, not the editable install's.
sys.path.insert(0, str(ROOT))

CONTENDERS = ("dpt_ir", "dpt_ir_K32", "dpt_ir_dtype", "dpt_ir_K32_dtype", "torch", "jax")
LAPLACIAN = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])


def problem(n: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(0)
    return {
        "u0": rng.uniform(-1.0, 1.0, (n, n)).astype(np.float32),
        "k": rng.uniform(0.5, 1.0, (n, n)).astype(np.float32),
        "obs": np.zeros((n, n), np.float32),
    }


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# -- contenders: each returns (first call seconds, a function () -> (loss, {name: grad})) ----
def dpt_ir_runner(
    x: dict[str, np.ndarray], steps: int, checkpoint: int | None, accumulate: str = "float64"
) -> tuple[float, Any]:
    import dpt_ir as dp

    n = x["u0"].shape[0]
    start = time.perf_counter()
    g = dp.GraphBuilder("bench_heat")
    u0, k = g.input("u0", (n, n)), g.input("k", (n, n))
    obs = g.input("obs", (n, n), requires_grad=False)
    def step(u: Any, _: Any) -> tuple[Any, None]:
        return u + 0.2 * k * dp.correlate(u, LAPLACIAN, mode="nearest", accumulate=accumulate), None

    u, _ = dp.scan(step, u0, length=steps, checkpoint=checkpoint)
    g.output("loss", dp.sum(dp.square(u - obs)))
    program = dp.compile(g.build(), wrt=["u0", "k"], threads=1)

    def call() -> tuple[float, dict[str, np.ndarray]]:
        out, grads = program.value_and_grad(**x)
        return float(out["loss"]), grads

    call()
    return time.perf_counter() - start, call


def torch_runner(x: dict[str, np.ndarray], steps: int) -> tuple[float, Any]:
    import torch
    import torch.nn.functional as tf

    weights = torch.tensor(LAPLACIAN, dtype=torch.float32).reshape(1, 1, 3, 3)

    def call() -> tuple[float, dict[str, np.ndarray]]:
        u0 = torch.tensor(x["u0"], requires_grad=True)
        k = torch.tensor(x["k"], requires_grad=True)
        u = u0
        for _ in range(steps):
            lap = tf.conv2d(tf.pad(u[None, None], (1, 1, 1, 1), mode="replicate"), weights)[0, 0]
            u = u + 0.2 * k * lap
        loss = torch.sum(torch.square(u - torch.tensor(x["obs"])))
        loss.backward()
        return float(loss), {"u0": u0.grad.numpy(), "k": k.grad.numpy()}

    start = time.perf_counter()
    call()
    return time.perf_counter() - start, call


def jax_runner(x: dict[str, np.ndarray], steps: int) -> tuple[float, Any]:
    import jax
    import jax.numpy as jnp

    jax.config.update("jax_platforms", "cpu")

    def loss(u0: Any, k: Any, obs: Any) -> Any:
        def step(u: Any, _: Any) -> tuple[Any, None]:
            p = jnp.pad(u, 1, mode="edge")
            lap = p[:-2, 1:-1] + p[2:, 1:-1] + p[1:-1, :-2] + p[1:-1, 2:] - 4.0 * u
            return u + 0.2 * k * lap, None

        u, _ = jax.lax.scan(step, u0, None, length=steps)
        return jnp.sum(jnp.square(u - obs))

    fn = jax.jit(jax.value_and_grad(loss, argnums=(0, 1)))
    args = [jnp.asarray(x[n]) for n in ("u0", "k", "obs")]

    def call() -> tuple[float, dict[str, np.ndarray]]:
        value, (gu, gk) = fn(*args)
        return float(value), {"u0": np.asarray(gu), "k": np.asarray(gk)}

    start = time.perf_counter()
    call()
    return time.perf_counter() - start, call


def child(name: str, steps: int, n: int, repeat: int, out_dir: Path) -> None:
    if name.startswith("dpt_ir"):
        import dpt_ir  # noqa: F401  (imports before the baseline: peak_mib is the run's own memory)
    elif name == "torch":
        import torch

        torch.set_num_threads(1)  # as dpt_ir's CPU backend (one thread); the machine is shared
    else:
        import jax  # noqa: F401
    x = problem(n)
    base = _rss_mib()
    if name.startswith("dpt_ir"):
        checkpoint = 32 if "_K32" in name else None
        first, call = dpt_ir_runner(x, steps, checkpoint, "dtype" if name.endswith("_dtype") else "float64")
    elif name == "torch":
        first, call = torch_runner(x, steps)
    else:
        first, call = jax_runner(x, steps)
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        loss, grads = call()
        times.append(time.perf_counter() - t)
    np.savez(out_dir / f"{name}.npz", **grads)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"name": name, "first_s": first, "time_s": float(np.median(times)), "loss": loss,
                      "peak_mib": peak - base, "peak_rss_mib": peak}))  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--child", choices=CONTENDERS)
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.child:
        child(args.child, args.steps, args.size, args.repeat, args.out)
        return
    rows = []
    with tempfile.TemporaryDirectory() as tmp:
        for name in CONTENDERS:
            env = {**os.environ, "DPT_IR_CACHE": f"{tmp}/{name}/dpt_ir", "WARP_CACHE_PATH": f"{tmp}/{name}/warp",
                   "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
                   "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}  # fmt: skip
            cmd = [sys.executable, __file__, "--child", name, "--steps", str(args.steps), "--size", str(args.size),
                   "--repeat", str(args.repeat), "--out", tmp]  # fmt: skip
            runs = 2 if name.startswith("dpt_ir") else 1  # a cold-cache child, then a warm-cache one
            results = []
            for _ in range(runs):
                proc = subprocess.run(cmd, capture_output=True, text=True, env=env, check=False)
                if proc.returncode != 0:
                    results.append({"name": name, "error": proc.stderr.strip().splitlines()[-1:]})
                    break
                results.append(json.loads(proc.stdout.strip().splitlines()[-1]))
            row = results[-1]
            row["cold_s"] = results[0].get("first_s", float("nan"))
            rows.append(row)
        ref = np.load(Path(tmp) / "dpt_ir.npz")
        for r in rows:
            path = Path(tmp) / f"{r['name']}.npz"
            if path.exists():
                other = np.load(path)
                r["grad_rel_diff"] = max(
                    float(np.max(np.abs(other[w] - ref[w])) / max(float(np.max(np.abs(ref[w]))), 1e-30))
                    for w in ("u0", "k")
                )
    print(f"value_and_grad of {args.steps} heat steps on {args.size}x{args.size} (float32, CPU, one thread each)\n")
    print("| contender | cold first call (s) | warm first call (s) | time (s) | vs dpt_ir | peak memory (MiB) "
          "| grad rel. diff |")  # fmt: skip
    print("|---|---|---|---|---|---|---|")
    base = next((r["time_s"] for r in rows if r["name"] == "dpt_ir" and "time_s" in r), None)
    for r in rows:
        if "error" in r:
            print(f"| {r['name']} | failed: {r['error']} | | | | | |")
            continue
        ratio = f"{r['time_s'] / base:.2f}x" if base else "-"
        warm = f"{r['first_s']:.2f}" if r["name"].startswith("dpt_ir") else "-"
        print(f"| {r['name']} | {r['cold_s']:.2f} | {warm} | {r['time_s']:.3f} | {ratio} | {r['peak_mib']:.0f} "
              f"| {r.get('grad_rel_diff', float('nan')):.1e} |")  # fmt: skip


if __name__ == "__main__":
    main()

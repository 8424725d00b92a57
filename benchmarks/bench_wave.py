"""value_and_grad of a 2-D acoustic wave equation (FWI style) wrt the velocity: dpt_ir's `dp.scan`
(store-all and ``checkpoint=16``) against deepwave's ``scalar`` propagator, JAX ``lax.scan`` (with and
without ``jax.checkpoint``), PyTorch eager autograd and ``torch.compile``, in the same run.

The model (float32, ``n x n`` cells of ``H`` m, ``steps`` leapfrog steps of ``DT`` s, ``shots`` shots):

    c        = v^2 dt^2 / h^2
    u_{t+1}  = 2 u_t - u_{t-1} + c * lap5(u_t) - v^2 dt^2 * f_t * delta_src   (zero outside the grid)
    d_t      = u_t[REC_ROW, :]              (a receiver line; deepwave records before the update)
    loss     = sum((d - d_obs)^2)                                              gradient wrt v

``lap5`` is the 5-point laplacian with zero values outside the grid: deepwave's ``accuracy=2`` with
``pml_width=0`` on every face (its bare zero-width faces are free surfaces, and at accuracy 2 the exterior
image is the zero value). ``f`` is a Ricker wavelet of ``FREQ`` Hz; ``dt`` is far inside deepwave's CFL
limit so it takes no internal sub-steps. ``d_obs`` comes from the true model (`velocity`).

``dpt_ir_flush`` and ``dpt_ir_K16_flush`` compile with ``denormals="flush"``: XLA's CPU runtime flushes
denormals to zero (under ``jax.jit``, ``float32(1e-30) * 1e-10`` is 0, not 1e-40), and the wavefront's
precursor decays through them (docs/backend.md, "Denormals"); the other contenders keep IEEE denormals.
``dpt_ir_dtype`` and ``dpt_ir_K16_dtype`` build the laplacian with ``accumulate="dtype"``: its float32 taps
summed as an ordered fmaf chain, as XLA, PyTorch and deepwave sum them (the default sums them in float64,
as SciPy). ``dpt_ir_add_at`` injects the point sources with `dp.add_at` on the flattened batch instead of the
dense source mask (`wave_graph`), as deepwave and `examples/fwi.py` do.

Each contender runs in its own child process (``--child NAME``) so its peak resident memory is its own
(``peak_mib``: the peak minus the resident size after imports and set-up, in the last round, where
dpt_ir's caches are warm so the C++ compiler's memory is not counted). Children run in interleaved
rounds (``--rounds``, the order rotated each round), each child timing ``--repeat`` calls; ``time_s`` is
the median over every round's calls. Every contender runs on one thread (``OMP_NUM_THREADS=1``,
``torch.set_num_threads(1)``, XLA's single-threaded Eigen, ``dp.compile(threads=1)``). dpt_ir's first
round has empty caches of its own (``cold_s``: compile plus one call). ``grad_rel`` is the largest
difference from a float64 reference of the same scheme (PyTorch, float64), relative to its largest
value; deepwave's is against deepwave in float64 (``grad_rel`` of deepwave's own scheme), and
``vs_scheme`` states how far deepwave's float64 gradient is from the scheme's.

Run: ``python benchmarks/bench_wave.py`` (128 x 128, 300 steps, one shot) and ``--shots 8``;
``--steps 30 --size 32 --rounds 1`` is a quick smoke run. Prints a Markdown table.
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
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
# First on the path: run from another checkout (an A/B worktree), the script imports that
# checkout's dpt_ir, not the editable install's.
sys.path.insert(0, str(ROOT))

CONTENDERS = (
    "dpt_ir",
    "dpt_ir_K16",
    "dpt_ir_flush",
    "dpt_ir_K16_flush",
    "dpt_ir_dtype",
    "dpt_ir_K16_dtype",
    "dpt_ir_add_at",
    "deepwave",
    "jax",
    "jax_ckpt",
    "torch",
    "torch_compile",
)
H, DT, FREQ, REC_ROW, SRC_ROW = 5.0, 0.0005, 25.0, 2, 2
LAP = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])


def ricker(steps: int) -> np.ndarray:
    t = np.arange(steps) * DT - 1.5 / FREQ
    a = (np.pi * FREQ * t) ** 2
    return ((1 - 2 * a) * np.exp(-a)).astype(np.float32)


def velocity(n: int, true: bool) -> np.ndarray:
    """The true model, layered (1500 to 2500 m/s with depth) with a slow disc near the sources, or the
    starting one: the layers 3% too slow, so that the direct wave misses the data (a misfit well above
    float32 rounding within the 0.15 s the steps cover)."""
    v = np.repeat(np.linspace(1500.0, 2500.0, n)[:, None], n, axis=1)
    if not true:
        return (0.97 * v).astype(np.float32)
    yy, xx = np.mgrid[:n, :n]
    v[(yy - n // 6) ** 2 + (xx - n // 2) ** 2 < (n // 10) ** 2] -= 300.0
    return v.astype(np.float32)


def source_columns(n: int, shots: int) -> list[int]:
    return [int(c) for c in np.linspace(n // 8, n - 1 - n // 8, shots).round()] if shots > 1 else [n // 2]


def source_mask(n: int, shots: int) -> np.ndarray:
    mask = np.zeros((shots, n, n), np.float32)
    for s, col in enumerate(source_columns(n, shots)):
        mask[s, SRC_ROW, col] = 1.0
    return mask


def torch_scheme(v: Any, f: Any, mask: Any, steps: int, step_fn: Any = None) -> Any:
    """The receiver data (steps, shots, n) of the scheme, in PyTorch (differentiable in ``v``)."""
    import torch

    shots, n = mask.shape[0], mask.shape[1]
    c = (v * v * (DT * DT / (H * H)))[None]
    s = -(v * v * DT * DT)[None] * mask
    step = step_fn or wave_step_torch
    u_prev = torch.zeros((shots, n, n), dtype=v.dtype)
    u = torch.zeros_like(u_prev)
    data = []
    for t in range(steps):
        data.append(u[:, REC_ROW, :])
        u_prev, u = step(u_prev, u, c, s, f[t])
    return torch.stack(data)


def wave_step_torch(u_prev: Any, u: Any, c: Any, s: Any, ft: Any) -> tuple[Any, Any]:
    import torch.nn.functional as tf

    lap = tf.pad(u, (1, 1, 1, 1))
    lap = lap[:, :-2, 1:-1] + lap[:, 2:, 1:-1] + lap[:, 1:-1, :-2] + lap[:, 1:-1, 2:] - 4.0 * u
    return u, 2.0 * u - u_prev + c * lap + s * ft


def problem(n: int, steps: int, shots: int) -> dict[str, np.ndarray]:
    import torch

    f, mask = ricker(steps), source_mask(n, shots)
    v_true = torch.tensor(velocity(n, True), dtype=torch.float64)
    obs = torch_scheme(v_true, torch.tensor(f, dtype=torch.float64), torch.tensor(mask, dtype=torch.float64), steps)
    return {"v": velocity(n, False), "f": f, "mask": mask, "obs": obs.numpy().astype(np.float32)}


def reference_grad(x: dict[str, np.ndarray], steps: int) -> np.ndarray:
    import torch

    v = torch.tensor(x["v"], dtype=torch.float64, requires_grad=True)
    d = torch_scheme(v, torch.tensor(x["f"], dtype=torch.float64), torch.tensor(x["mask"], dtype=torch.float64), steps)
    torch.sum(torch.square(d - torch.tensor(x["obs"], dtype=torch.float64))).backward()
    return v.grad.numpy()


def _rss_mib() -> float:
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


# -- contenders: each returns a function () -> gradient wrt v (float32 numpy) ----------------------
def dpt_ir_runner(
    x: dict[str, np.ndarray],
    steps: int,
    checkpoint: int | None,
    denormals: str = "keep",
    accumulate: str = "float64",
    sources: str = "mask",
) -> Any:
    import dpt_ir as dp

    graph = wave_graph(x["mask"].shape[1], steps, x["mask"].shape[0], checkpoint, accumulate, sources)
    program = dp.compile(graph, wrt=["v"], threads=1, denormals=denormals)
    inputs = {k: a for k, a in x.items() if k != "mask" or sources == "mask"}
    return lambda: program.value_and_grad(**inputs)[1]["v"]


def wave_graph(
    n: int, steps: int, shots: int, checkpoint: int | None, accumulate: str = "float64", sources: str = "mask"
) -> Any:
    """dpt_ir's graph of the workload (also compiled cold by `compile_wave.py`). ``sources``:
    ``"mask"`` adds ``s * f_t`` over the field (``s`` the source mask times ``-v^2 dt^2``);
    ``"add_at"`` injects each shot's point source with `dp.add_at` at its cell of the flattened
    batch, as deepwave injects them and as `examples/fwi.py` writes it (the same values, the same
    bits: at the source cell both add the same float32 product once)."""
    import dpt_ir as dp

    g = dp.GraphBuilder("bench_wave")
    v = g.input("v", (n, n))
    f = g.input("f", (steps,), requires_grad=False)
    mask = g.input("mask", (shots, n, n), requires_grad=False) if sources == "mask" else None
    obs = g.input("obs", (steps, shots, n), requires_grad=False)
    c = v * v * (DT * DT / (H * H))
    cells = np.array([SRC_ROW * n + col for col in source_columns(n, shots)])
    flat = cells + n * n * np.arange(shots)  # each shot's source cell in the flattened batch
    s = -(v * v * (DT * DT)) * mask if mask is not None else dp.reshape(-(v * v * (DT * DT)), (-1,))[cells]

    def step(carry: Any, ft: Any) -> tuple[Any, Any]:
        u_prev, u = carry
        u_next = 2.0 * u - u_prev + c * dp.correlate(u, LAP, mode="constant", accumulate=accumulate)
        if mask is not None:
            u_next = u_next + s * ft
        else:
            u_next = dp.reshape(dp.add_at(dp.reshape(u_next, (-1,)), flat, s * ft), (shots, n, n))
        return (u, u_next), u[:, REC_ROW, :]

    zero = dp.broadcast_to(0.0 * v, (shots, n, n))
    _, data = dp.scan(step, (zero, zero), f, checkpoint=checkpoint)
    g.output("loss", dp.sum(dp.square(data - obs)))
    return g.build()


def deepwave_runner(x: dict[str, np.ndarray], steps: int, dtype: Any = None) -> Any:
    import deepwave
    import torch

    dtype = dtype or torch.float32
    shots, n = x["mask"].shape[0], x["mask"].shape[1]
    cols = source_columns(n, shots)
    src_loc = torch.tensor([[[SRC_ROW, col]] for col in cols], dtype=torch.long)
    rec_loc = torch.tensor([[[REC_ROW, j] for j in range(n)]] * shots, dtype=torch.long)
    amp = torch.tensor(x["f"], dtype=dtype).reshape(1, 1, -1).repeat(shots, 1, 1)
    obs = torch.tensor(x["obs"], dtype=dtype).permute(1, 2, 0)  # deepwave's data is [shot, receiver, time]

    def call() -> np.ndarray:
        v = torch.tensor(x["v"], dtype=dtype, requires_grad=True)
        warnings.simplefilter("ignore", deepwave.ZeroWidthFaceWarning)  # the free surface is meant
        out = deepwave.scalar(v, H, DT, source_amplitudes=amp, source_locations=src_loc,
                              receiver_locations=rec_loc, accuracy=2, pml_width=0)  # fmt: skip
        torch.sum(torch.square(out.receiver_amplitudes - obs)).backward()
        return v.grad.numpy()

    return call


def torch_runner(x: dict[str, np.ndarray], steps: int, compiled: bool) -> Any:
    import torch

    step = torch.compile(wave_step_torch) if compiled else wave_step_torch
    f, mask, obs = (torch.tensor(x[k]) for k in ("f", "mask", "obs"))

    def call() -> np.ndarray:
        v = torch.tensor(x["v"], requires_grad=True)
        torch.sum(torch.square(torch_scheme(v, f, mask, steps, step) - obs)).backward()
        return v.grad.numpy()

    return call


def jax_runner(x: dict[str, np.ndarray], checkpointed: bool) -> Any:
    import jax
    import jax.numpy as jnp

    def loss(v: Any, f: Any, mask: Any, obs: Any) -> Any:
        c = (v * v * (DT * DT / (H * H)))[None]
        s = -(v * v * (DT * DT))[None] * mask

        def step(carry: Any, ft: Any) -> tuple[Any, Any]:
            u_prev, u = carry
            p = jnp.pad(u, ((0, 0), (1, 1), (1, 1)))
            lap = p[:, :-2, 1:-1] + p[:, 2:, 1:-1] + p[:, 1:-1, :-2] + p[:, 1:-1, 2:] - 4.0 * u
            u_next = 2.0 * u - u_prev + c * lap + s * ft
            return (u, u_next), u[:, REC_ROW, :]

        zero = jnp.zeros(mask.shape, v.dtype)
        _, data = jax.lax.scan(jax.checkpoint(step) if checkpointed else step, (zero, zero), f)
        return jnp.sum(jnp.square(data - obs))

    fn = jax.jit(jax.grad(loss))
    args = [jnp.asarray(x[k]) for k in ("v", "f", "mask", "obs")]
    return lambda: np.asarray(fn(*args))


def child(name: str, x: dict[str, np.ndarray], steps: int, repeat: int, out: Path) -> None:
    base = _rss_mib()
    start = time.perf_counter()
    if name.startswith("dpt_ir"):
        checkpoint = 16 if "K16" in name else None
        denormals = "flush" if "_flush" in name else "keep"
        accumulate = "dtype" if "_dtype" in name else "float64"
        call = dpt_ir_runner(x, steps, checkpoint, denormals, accumulate, "add_at" if "_add_at" in name else "mask")
    elif name == "deepwave":
        call = deepwave_runner(x, steps)
    elif name.startswith("torch"):
        call = torch_runner(x, steps, name == "torch_compile")
    else:
        call = jax_runner(x, name == "jax_ckpt")
    grad = call()
    first = time.perf_counter() - start
    times = []
    for _ in range(repeat):
        t = time.perf_counter()
        grad = call()
        times.append(time.perf_counter() - t)
    np.save(out / f"{name}.npy", grad)
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(json.dumps({"name": name, "first_s": first, "times": times, "peak_mib": peak - base}))


def child_main(name: str, steps: int, repeat: int, out: Path) -> None:
    x = {k: v for k, v in np.load(out / "problem.npz").items()}
    if name.startswith("dpt_ir"):
        import dpt_ir  # noqa: F401  (imported before the baseline: peak_mib is the run's own memory)
    elif name.startswith("torch") or name == "deepwave":
        import torch

        torch.set_num_threads(1)
        if name == "deepwave":
            import deepwave  # noqa: F401
    else:
        import jax

        jax.config.update("jax_platforms", "cpu")
    child(name, x, steps, repeat, out)


def prepare(n: int, steps: int, shots: int, out: Path) -> None:
    """The problem and the float64 references, in a child of their own: a child process keeps the
    peak resident size of the process it was forked from, so the parent stays small."""
    import torch

    torch.set_num_threads(1)
    x = problem(n, steps, shots)
    np.savez(out / "problem.npz", **x)
    np.save(out / "ref.npy", reference_grad(x, steps))
    np.save(out / "deepwave_ref.npy", deepwave_runner(x, steps, torch.float64)())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=300)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--shots", type=int, default=1)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--only", nargs="*", choices=CONTENDERS, default=list(CONTENDERS))
    parser.add_argument("--child", choices=CONTENDERS)
    parser.add_argument("--prepare", action="store_true", help="(internal) write the problem and references")
    parser.add_argument("--out", type=Path)
    args = parser.parse_args()
    if args.prepare:
        prepare(args.size, args.steps, args.shots, args.out)
        return
    if args.child:
        child_main(args.child, args.steps, args.repeat, args.out)
        return
    with tempfile.TemporaryDirectory() as tmp:
        cmd = [sys.executable, __file__, "--prepare", "--size", str(args.size), "--steps", str(args.steps),
               "--shots", str(args.shots), "--out", tmp]  # fmt: skip
        subprocess.run(cmd, check=True, env={**os.environ, "OMP_NUM_THREADS": "1"})
        ref, dw_ref = np.load(Path(tmp) / "ref.npy"), np.load(Path(tmp) / "deepwave_ref.npy")
        env = {**os.environ, "OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1",
               "XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"}  # fmt: skip
        rows: dict[str, dict[str, Any]] = {name: {"times": [], "peak_mib": []} for name in args.only}
        names = list(args.only)
        for r in range(args.rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                cenv = {**env, "DPT_IR_CACHE": f"{tmp}/{name}/dpt_ir", "WARP_CACHE_PATH": f"{tmp}/{name}/warp"}
                cmd = [sys.executable, __file__, "--child", name, "--steps", str(args.steps),
                       "--repeat", str(args.repeat), "--out", tmp]  # fmt: skip
                proc = subprocess.run(cmd, capture_output=True, text=True, env=cenv, check=False)
                row = rows[name]
                if proc.returncode != 0:
                    row["error"] = proc.stderr.strip().splitlines()[-1:]
                    continue
                res = json.loads(proc.stdout.strip().splitlines()[-1])
                row.setdefault("cold_s", res["first_s"])
                row["times"] += res["times"]
                row["peak_mib"].append(res["peak_mib"])
        for name, row in rows.items():
            path = Path(tmp) / f"{name}.npy"
            if path.exists():
                grad, against = np.load(path), dw_ref if name == "deepwave" else ref
                row["grad_rel"] = float(np.max(np.abs(grad - against)) / np.max(np.abs(against)))
        vs_scheme = float(np.max(np.abs(dw_ref - ref)) / np.max(np.abs(ref)))
    print(f"value_and_grad wrt v of {args.steps} wave steps on {args.size}x{args.size}, {args.shots} shot(s) "
          f"(float32, CPU, one thread each; median of {args.rounds} interleaved rounds "
          f"x {args.repeat} calls)\n")  # fmt: skip
    print("| contender | first call (s) | time (ms) | its time / dpt_ir's (store-all / K16) | peak memory (MiB) "
          "| grad rel. diff |")  # fmt: skip
    print("|---|---|---|---|---|---|")
    med = {k: float(np.median(r["times"])) for k, r in rows.items() if r["times"]}
    for name, row in rows.items():
        if name not in med:
            print(f"| {name} | failed: {row.get('error')} | | | | |")
            continue
        ratio = " / ".join(f"{med[name] / med[d]:.2f}x" for d in ("dpt_ir", "dpt_ir_K16") if d in med)
        print(f"| {name} | {row['cold_s']:.2f} | {1e3 * med[name]:.1f} | {ratio} | {row['peak_mib'][-1]:.0f} "
              f"| {row.get('grad_rel', float('nan')):.1e} |")  # fmt: skip
    print(f"\ndeepwave's float64 gradient vs the scheme's float64 gradient: {vs_scheme:.1e} (relative to max)")


if __name__ == "__main__":
    main()

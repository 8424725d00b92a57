"""Registration benchmark: one non-rigid registration step against PyTorch ``grid_sample``,
and the order-3 warp alone against ``scipy.ndimage.map_coordinates``.

    python benchmarks/bench_registration.py [--size 256] [--dims 2] [--reps 7] [--no-compile]
    python benchmarks/bench_registration.py --dims 3 --size 128 --reps 3

The step (`benchmarks.registration_problems`): the loss and its gradient wrt the
displacement field ``u``, float32, of ``0.5 * ||warp(moving, grid + u) - fixed||² +
smoothness * ||D u||²``, the objective of ``examples/registration.py``:

- ``dpt_ir order 3``: ``Program.value_and_grad`` with cubic B-spline warping
  (``dp.map_coordinates(order=3, mode="nearest")`` at graph-tensor coordinates, the
  prefilter of the moving image included in the step);
- ``dpt_ir order 1``: the same with (bi/tri)linear warping, the like-for-like comparison;
- ``torch grid_sample``: ``F.grid_sample(mode="bilinear", padding_mode="border",
  align_corners=True)`` (4-D, or 5-D: trilinear) with autograd, eager, and the same loss
  under ``torch.compile`` (``--no-compile`` leaves it out).

The warp alone: ``dpt_ir`` ``Program.run`` of ``map_coordinates(moving, coords, order)``
against ``scipy.ndimage.map_coordinates(moving, coords, order, mode="nearest")``, both with
the prefilter, float32 in and out (orders 3, and 1 in 3-D).

Everything runs one thread (``torch.set_num_threads(1)``; dpt_ir programs compiled with
``threads=1``). Values and gradients of ``dpt_ir order 1`` and torch, and of the warps and
scipy, are checked before any timing. Rounds interleave the contenders in rotating order
after a warm-up; each reports the median CPU time of the calling thread
(``time.thread_time``) and the median wall time; ratios are per round (this run's
contenders only), then the median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np
import scipy.ndimage as ndi
import torch

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: this checkout's dpt_ir and benchmarks package
    sys.path.insert(0, str(ROOT))

import dpt_ir as dp  # noqa: E402
from benchmarks import registration_problems as rp  # noqa: E402
from benchmarks.rounds import measure  # noqa: E402


def check(name: str, got: tuple[float, np.ndarray], ref: tuple[float, np.ndarray]) -> str:
    """Compare a step's loss and gradient with a reference step's; raise if they differ."""
    loss_rel = abs(got[0] - ref[0]) / abs(ref[0])
    diff = np.abs(got[1].astype(np.float64) - ref[1])
    grad_rel = float(np.linalg.norm(diff) / np.linalg.norm(ref[1]))
    if loss_rel > 1e-5 or grad_rel > 1e-4:
        raise SystemExit(f"{name}: loss rel. error {loss_rel:.2e}, gradient rel. L2 error {grad_rel:.2e}")
    return f"{name}: loss rel. error {loss_rel:.1e}, gradient rel. L2 error {grad_rel:.1e}, max abs {diff.max():.1e}"


def table(title: str, times: dict[str, dict[str, list[float]]], peer: str) -> None:
    print(title)
    print(f"| contender | CPU ms | wall ms | CPU / {peer} | wall / {peer} |")
    print("|---|---:|---:|---:|---:|")
    for name, t in times.items():
        ratios = [
            statistics.median(a / b for a, b in zip(t[kind], times[peer][kind], strict=True))
            for kind in ("cpu", "wall")
        ]
        print(
            f"| {name} | {statistics.median(t['cpu']) * 1e3:.2f} | {statistics.median(t['wall']) * 1e3:.2f} "
            f"| {ratios[0]:.2f} | {ratios[1]:.2f} |"
        )


def compiled(graph: dp.Graph, **kw: object) -> dp.Program:
    start = time.perf_counter()
    program = dp.compile(graph, threads=1, **kw)
    program.build_all()
    print(f"{graph.name}: compiled in {time.perf_counter() - start:.1f} s on {program.device}")
    return program


def steps_of(n: int, dims: int, smoothness: float, use_compile: bool, inputs: dict) -> dict[str, rp.Step]:
    steps: dict[str, rp.Step] = {}
    for order in (3, 1):
        program = compiled(rp.build(n, order, smoothness, dims), wrt=["u"])
        steps[f"dpt_ir order {order}"] = rp.dpt_step(program, inputs)
    loss = rp.torch_loss(inputs, smoothness)
    steps["torch grid_sample"] = rp.torch_step(inputs, loss)
    ref = steps["torch grid_sample"]()
    ref64 = (ref[0], ref[1].astype(np.float64))
    print(check("dpt_ir order 1 vs torch", steps["dpt_ir order 1"](), ref64))
    if use_compile:
        start = time.perf_counter()
        steps["torch grid_sample compiled"] = rp.torch_step(inputs, torch.compile(loss))
        print(check("torch compiled vs eager", steps["torch grid_sample compiled"](), ref64))
        print(f"torch.compile: first call {time.perf_counter() - start:.1f} s")
    return steps


def warps_of(n: int, dims: int, orders: tuple[int, ...], inputs: dict) -> dict[str, Callable[[], object]]:
    coords = inputs["grid"] + inputs["u"]
    moving = inputs["moving"]
    warps: dict[str, Callable[[], object]] = {}
    for order in orders:
        program = compiled(rp.build_warp(n, order, dims))
        warps[f"dpt_ir warp order {order}"] = lambda p=program: p.run(coords=coords, moving=moving)["warped"]
        warps[f"scipy order {order}"] = lambda o=order: ndi.map_coordinates(moving, coords, order=o, mode="nearest")
        got, want = warps[f"dpt_ir warp order {order}"](), warps[f"scipy order {order}"]()
        err = float(np.abs(got.astype(np.float64) - want).max() / np.abs(want).max())
        print(f"warp order {order} vs scipy: max abs error / max |value| {err:.1e}")
        if err > 1e-5:
            raise SystemExit(f"warp order {order} differs from scipy: {err:.2e}")
    return warps


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--dims", type=int, choices=(2, 3), default=2)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--smoothness", type=float, default=0.005)
    parser.add_argument("--no-compile", action="store_true", help="leave torch.compile out")
    args = parser.parse_args()
    torch.set_num_threads(1)
    n, dims = args.size, args.dims
    inputs = rp.problem(n, np.random.default_rng(0), dims)
    steps = steps_of(n, dims, args.smoothness, not args.no_compile, inputs)
    warps = warps_of(n, dims, (3,) if dims == 2 else (3, 1), inputs)
    shape = "x".join([str(n)] * dims)
    where = f"float32, one thread, torch {torch.__version__}, median of {args.reps} interleaved rounds"
    step_times = measure(steps, args.reps)
    table(f"registration step {shape} {where}", step_times, "torch grid_sample")
    o3, o1 = step_times["dpt_ir order 3"]["wall"], step_times["dpt_ir order 1"]["wall"]
    ratio = statistics.median(a / b for a, b in zip(o3, o1, strict=True))
    print(f"dpt_ir order 3 / order 1 (wall, median of per-round ratios): {ratio:.2f}")
    warp_times = measure(warps, args.reps)
    table(f"warp alone (prefilter included) {shape} {where}", warp_times, "scipy order 3")


if __name__ == "__main__":
    main()

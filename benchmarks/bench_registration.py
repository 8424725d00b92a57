"""Registration benchmark: one non-rigid registration step against PyTorch ``grid_sample``.

    python benchmarks/bench_registration.py [--size 256] [--reps 7] [--smoothness 0.005]

One step is the loss and its gradient wrt the displacement field ``u`` (2, N, N), float32,
of ``0.5 * ||warp(moving, grid + u) - fixed||² + smoothness * ||D u||²`` (``D``: forward
differences along both image axes), the objective of ``examples/registration.py``:

- ``dpt_ir order 3``: ``Program.value_and_grad`` with bicubic B-spline warping
  (``dp.map_coordinates(order=3, mode="nearest")`` at graph-tensor coordinates, the
  prefilter of the moving image included in the step);
- ``dpt_ir order 1``: the same with bilinear warping, the like-for-like comparison;
- ``torch grid_sample``: ``F.grid_sample(mode="bilinear", padding_mode="border",
  align_corners=True)`` with autograd (``torch.autograd.grad``), eager.

Geometry: scipy/dpt_ir coordinates are pixel indices ``(row, col)``; ``grid_sample`` takes
normalised ``(x, y) = (col, row)`` in ``[-1, 1]``. With ``align_corners=True``, -1 and 1
are the centres of the corner pixels, so ``x = 2 col / (W - 1) - 1`` maps the same point,
and ``padding_mode="border"`` (clamped coordinates) is what scipy's ``nearest`` extension
gives a linear interpolant. The values and gradients of ``dpt_ir order 1`` and torch are
checked against each other on the same displacement before any timing.

Both run one thread (``torch.set_num_threads(1)``; the dpt_ir CPU backend runs one).
Rounds interleave the contenders in rotating order after a warm-up; each reports the
median CPU time of the calling thread (``time.thread_time``) and the median wall time, and
the ratios are per round (this run's contenders only), then the median.
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
import torch.nn.functional as tf

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: this checkout's dpt_ir and benchmarks package
    sys.path.insert(0, str(ROOT))

import dpt_ir as dp  # noqa: E402
from benchmarks.rounds import measure  # noqa: E402

Step = Callable[[], tuple[float, np.ndarray]]


def blobs(n: int) -> np.ndarray:
    """A smooth test image: a few Gaussian blobs (as in examples/registration.py)."""
    y, x = np.mgrid[:n, :n] / n
    img = np.zeros((n, n))
    for cx, cy, s, a in ((0.35, 0.4, 0.12, 1.0), (0.65, 0.6, 0.09, 0.8), (0.55, 0.28, 0.06, 0.6)):
        img += a * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * s * s))
    return img


def problem(n: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """float32 inputs: a moving image warped by a smooth field, and a random smooth ``u``
    of a few pixels (some samples leave the image, exercising the border)."""
    fixed = blobs(n)
    grid = np.indices((n, n), dtype=np.float64)
    y, x = np.mgrid[:n, :n] / n
    truth = (n / 20) * np.stack([np.sin(2 * np.pi * x) * np.cos(np.pi * y), np.cos(np.pi * x) * np.sin(2 * np.pi * y)])
    moving = ndi.map_coordinates(fixed, grid - truth, order=3, mode="nearest")
    u = ndi.gaussian_filter(rng.normal(size=(2, n, n)), (0, 4, 4)) * n / 4
    return {k: v.astype(np.float32) for k, v in {"u": u, "grid": grid, "moving": moving, "fixed": fixed}.items()}


def build(n: int, order: int, smoothness: float) -> dp.Graph:
    g = dp.GraphBuilder(f"bench_registration_o{order}")
    u = g.input("u", (2, n, n), "float32")
    grid = g.input("grid", (2, n, n), "float32", requires_grad=False)
    moving = g.input("moving", (n, n), "float32", requires_grad=False)
    fixed = g.input("fixed", (n, n), "float32", requires_grad=False)
    warped = dp.map_coordinates(moving, grid + u, order=order, mode="nearest")
    ssd = 0.5 * dp.sum(dp.square(warped - fixed))
    smooth = dp.sum(dp.square(u[:, 1:, :] - u[:, :-1, :])) + dp.sum(dp.square(u[:, :, 1:] - u[:, :, :-1]))
    g.output("loss", ssd + smoothness * smooth)
    return g.build()


def dpt_step(program: dp.Program, inputs: dict[str, np.ndarray]) -> Step:
    def step() -> tuple[float, np.ndarray]:
        out, grads = program.value_and_grad(**inputs)
        return float(out["loss"]), grads["u"]

    return step


def torch_step(inputs: dict[str, np.ndarray], smoothness: float) -> Step:
    """grid_sample (bilinear, border, align_corners=True) at ``grid + u``, autograd."""
    n = inputs["moving"].shape[0]
    moving = torch.from_numpy(inputs["moving"])[None, None]
    fixed = torch.from_numpy(inputs["fixed"])
    grid = torch.from_numpy(inputs["grid"])
    u = torch.from_numpy(inputs["u"]).clone().requires_grad_(True)
    scale = 2.0 / (n - 1)

    def step() -> tuple[float, np.ndarray]:
        coords = grid + u
        xy = torch.stack([coords[1] * scale - 1.0, coords[0] * scale - 1.0], dim=-1)[None]
        warped = tf.grid_sample(moving, xy, mode="bilinear", padding_mode="border", align_corners=True)[0, 0]
        ssd = 0.5 * torch.sum(torch.square(warped - fixed))
        smooth = torch.sum(torch.square(u[:, 1:, :] - u[:, :-1, :]))
        smooth = smooth + torch.sum(torch.square(u[:, :, 1:] - u[:, :, :-1]))
        loss = ssd + smoothness * smooth
        (grad,) = torch.autograd.grad(loss, u)
        return float(loss.detach()), grad.numpy()

    return step


def check(name: str, got: tuple[float, np.ndarray], ref: tuple[float, np.ndarray]) -> str:
    """Compare a step's loss and gradient with a reference step's; raise if they differ."""
    loss_rel = abs(got[0] - ref[0]) / abs(ref[0])
    diff = np.abs(got[1].astype(np.float64) - ref[1])
    grad_rel = float(np.linalg.norm(diff) / np.linalg.norm(ref[1]))
    if loss_rel > 1e-5 or grad_rel > 1e-4:
        raise SystemExit(f"{name}: loss rel. error {loss_rel:.2e}, gradient rel. L2 error {grad_rel:.2e}")
    return f"{name}: loss rel. error {loss_rel:.1e}, gradient rel. L2 error {grad_rel:.1e}, max abs {diff.max():.1e}"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--reps", type=int, default=7)
    parser.add_argument("--smoothness", type=float, default=0.005)
    args = parser.parse_args()
    torch.set_num_threads(1)
    n = args.size
    inputs = problem(n, np.random.default_rng(0))
    steps: dict[str, Step] = {}
    for order in (3, 1):
        start = time.perf_counter()
        program = dp.compile(build(n, order, args.smoothness), wrt=["u"])
        print(f"dpt_ir order {order}: compiled in {time.perf_counter() - start:.1f} s on {program.device}")
        steps[f"dpt_ir order {order}"] = dpt_step(program, inputs)
    steps["torch grid_sample"] = torch_step(inputs, args.smoothness)

    ref = steps["torch grid_sample"]()
    ref64 = (ref[0], ref[1].astype(np.float64))
    print(check("dpt_ir order 1 vs torch", steps["dpt_ir order 1"](), ref64))
    times = measure(steps, args.reps)
    peer = times["torch grid_sample"]
    print(
        f"registration step {n}x{n} float32, one thread, torch {torch.__version__}, "
        f"median of {args.reps} interleaved rounds"
    )
    print("| contender | CPU ms | wall ms | CPU / torch | wall / torch |")
    print("|---|---:|---:|---:|---:|")
    for name, t in times.items():
        ratios = [
            statistics.median(a / b for a, b in zip(t[kind], peer[kind], strict=True)) for kind in ("cpu", "wall")
        ]
        print(
            f"| {name} | {statistics.median(t['cpu']) * 1e3:.2f} | {statistics.median(t['wall']) * 1e3:.2f} "
            f"| {ratios[0]:.2f} | {ratios[1]:.2f} |"
        )


if __name__ == "__main__":
    main()

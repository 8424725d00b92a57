"""Imaging benchmark: the transmission pipeline (examples/transmission_pipeline.py),
forward + backward, compiled against its peers in one run.

    python benchmarks/bench_imaging.py [--size 1024] [--reps 5] [--json PATH]

Contenders (each computes the loss and its gradient wrt the attenuation image):

- ``dpt_ir``: ``Program.value_and_grad`` with the default (CPU) fusion cost model;
- ``dpt_ir halo=160``: the GPU cost model, which recomputes more over stencil halos and
  takes fewer launches (on this single-threaded CPU backend, more work);
- ``numpy+scipy``: ``scipy.ndimage.gaussian_filter`` forward and a hand-written adjoint
  (zero-padded correlation with the flipped weights, boundary folded back), float32;
- ``unfused warp``: the same graph compiled with fusion off, one Warp kernel per op.

Every timing is the median of ``--reps`` rounds after a warm-up; each round runs every
contender once in rotating order. Gradients are checked against each other first.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np
import scipy.ndimage as ndi

ROOT = Path(__file__).resolve().parent.parent
sys.path[:0] = [str(ROOT), str(ROOT / "examples")]

import transmission_pipeline as tp  # noqa: E402

import dpt_ir as dp  # noqa: E402
from dpt_ir.api import imaging  # noqa: E402

GOALS = {"numpy+scipy": 2.0, "unfused warp": 3.0}


def gaussian_adjoint_1d(g: np.ndarray, weights: np.ndarray, axis: int) -> np.ndarray:
    """Adjoint of ``correlate1d(x, weights, axis, mode="reflect")`` (radius <= size)."""
    r = len(weights) // 2
    n = g.shape[axis]
    pad = [(0, 0)] * g.ndim
    pad[axis] = (r, r)
    ext = ndi.correlate1d(np.pad(g, pad), weights[::-1], axis=axis, mode="constant")
    take = lambda a, b: ext[(slice(None),) * axis + (slice(a, b),)]  # noqa: E731
    out = take(r, r + n).copy()
    left = [slice(None)] * g.ndim
    left[axis] = slice(0, r)
    out[tuple(left)] += np.flip(take(0, r), axis=axis)
    right = [slice(None)] * g.ndim
    right[axis] = slice(n - r, n)
    out[tuple(right)] += np.flip(take(n + r, n + 2 * r), axis=axis)
    return out


def numpy_value_and_grad(
    mu: np.ndarray, counts: np.ndarray, weights: np.ndarray, mask: np.ndarray
) -> tuple[float, np.ndarray]:
    """The pipeline's loss and gradient in NumPy/SciPy, backward written by hand."""
    transmission = tp.I0 * np.exp(-mu)
    expected = ndi.gaussian_filter(transmission, tp.SIGMA, mode="reflect")
    valid = mask != 0
    c = np.where(valid, counts, 0.0).astype(np.float32)
    m = np.where(valid, expected, 1.0).astype(np.float32)
    positive = c > 0
    ratio = np.where(positive, c, 1.0) / np.where(positive, m, 1.0)
    term = m - c + np.where(positive, c * np.log(ratio), 0.0)
    size = mu.size
    loss = float(np.sum(np.where(valid, weights * term, 0.0), dtype=np.float64) / size)
    d_expected = np.where(valid, weights * (1.0 - c / m), 0.0).astype(np.float32) / size
    kernel = imaging.gaussian_kernel1d(tp.SIGMA)
    d_t = gaussian_adjoint_1d(gaussian_adjoint_1d(d_expected, kernel, 1), kernel, 0)
    return loss, (-d_t * transmission).astype(np.float32)


def median_times(contenders: dict[str, Callable[[], Any]], reps: int) -> dict[str, float]:
    for fn in contenders.values():
        fn()  # warm-up
    times: dict[str, list[float]] = {k: [] for k in contenders}
    names = list(contenders)
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            start = time.perf_counter()
            contenders[name]()
            times[name].append(time.perf_counter() - start)
    return {k: statistics.median(v) for k, v in times.items()}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args()
    shape = (args.size, args.size)
    data = tp.simulate(shape, np.random.default_rng(0))
    mu = (0.5 * tp.phantom(shape)).astype(np.float32)
    graph = tp.build(shape)

    programs = {
        "dpt_ir": dp.compile(graph, wrt=["mu"]),
        "dpt_ir halo=160": dp.compile(graph, wrt=["mu"], halo_budget=160),
        "unfused warp": dp.compile(graph, wrt=["mu"], fuse=False),
    }
    reference_loss, reference_grad = numpy_value_and_grad(mu, **data)
    launches = {}
    for name, program in programs.items():
        out, grads = program.value_and_grad(mu=mu, **data)
        launches[name] = program.launch_count
        scale = np.abs(reference_grad).max()
        assert abs(float(out["loss"]) - reference_loss) <= 1e-4 * abs(reference_loss), name
        assert np.abs(grads["mu"] - reference_grad).max() <= 1e-3 * scale, name

    contenders: dict[str, Callable[[], Any]] = {
        name: (lambda p=program: p.value_and_grad(mu=mu, **data)) for name, program in programs.items()
    }
    contenders["numpy+scipy"] = lambda: numpy_value_and_grad(mu, **data)
    times = median_times(contenders, args.reps)

    base = times["dpt_ir"]
    print(f"transmission pipeline {args.size}x{args.size} float32, forward + backward, CPU, median of {args.reps}")
    print(f"{'contender':<18} {'ms':>9} {'launches':>9} {'dpt_ir is x faster':>19} {'goal':>6}")
    rows = []
    for name, t in times.items():
        ratio = t / base
        goal = GOALS.get(name)
        verdict = "" if goal is None else ("met" if ratio >= goal else "NOT met")
        print(
            f"{name:<18} {t * 1e3:9.1f} {launches.get(name, '-'):>9} {ratio:19.2f} "
            f"{'' if goal is None else f'>={goal:g}':>6} {verdict}"
        )
        rows.append({"contender": name, "seconds": t, "launches": launches.get(name), "ratio": ratio, "goal": goal})
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps({"size": args.size, "reps": args.reps, "rows": rows}, indent=2))


if __name__ == "__main__":
    main()

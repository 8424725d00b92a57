"""Prefilter benchmark (issue 29): the exact recursive B-spline prefilter and the order-3
registration forward, against scipy.ndimage in the same run, one thread.

    python benchmarks/bench_prefilter.py [--size 256] [--reps 15]

- ``spline_filter``: ``dp.spline_filter(x, order=3, mode="mirror")`` (float64 ``Program.run``)
  against ``scipy.ndimage.spline_filter`` (float64);
- ``registration forward``: ``Program.run`` of `bench_registration`'s order-3 objective
  (``dp.map_coordinates(order=3, mode="nearest")`` at graph-tensor coordinates ``grid + u``,
  prefilter included, then the loss), float32, against ``scipy.ndimage.map_coordinates``
  of the same image at the same coordinates (order 3, ``nearest``) plus the same loss in NumPy.

Values are checked against scipy before timing. Rounds interleave the contenders (rotating
order, `benchmarks.rounds.measure`); the table gives median CPU and wall milliseconds and
the median of per-round ratios scipy / dpt_ir (above 1: dpt_ir faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from pathlib import Path

import numpy as np
import scipy
import scipy.ndimage as ndi

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: this checkout's dpt_ir, not an installed one
    sys.path.insert(0, str(ROOT))

import dpt_ir as dp  # noqa: E402
from benchmarks.registration_problems import build, problem  # noqa: E402
from benchmarks.rounds import measure  # noqa: E402


def _loss(warped: np.ndarray, fixed: np.ndarray, u: np.ndarray, smoothness: float) -> float:
    smooth = np.sum(np.square(u[:, 1:, :] - u[:, :-1, :])) + np.sum(np.square(u[:, :, 1:] - u[:, :, :-1]))
    return float(0.5 * np.sum(np.square(warped - fixed)) + smoothness * smooth)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--reps", type=int, default=15)
    args = parser.parse_args()
    n, smoothness = args.size, 0.005
    rng = np.random.default_rng(0)
    image = rng.normal(size=(n, n))
    g = dp.GraphBuilder("bench_prefilter")
    g.output("y", dp.spline_filter(g.input("x", (n, n), "float64"), order=3, mode="mirror"))
    filt = dp.compile(g.build(), device="cpu", threads=1)
    err = np.abs(filt.run(x=image)["y"] - ndi.spline_filter(image, 3, mode="mirror")).max()
    print(f"spline_filter {n}x{n} float64: max |dpt_ir - scipy| = {err:.1e}")

    ins = problem(n, rng)
    forward = dp.compile(build(n, 3, smoothness), wrt=["u"], device="cpu", threads=1)
    coords = (ins["grid"] + ins["u"]).astype(np.float32)

    def scipy_forward() -> float:
        warped = ndi.map_coordinates(ins["moving"], coords, order=3, mode="nearest")
        return _loss(warped, ins["fixed"], ins["u"], smoothness)

    got, want = float(forward.run(**ins)["loss"]), scipy_forward()
    print(f"registration forward {n}x{n} float32: loss dpt_ir {got:.6g}, scipy {want:.6g}")
    steps = {
        "dpt_ir spline_filter": lambda: filt.run(x=image),
        "scipy spline_filter": lambda: ndi.spline_filter(image, 3, mode="mirror"),
        "dpt_ir forward": lambda: forward.run(**ins),
        "scipy forward": scipy_forward,
    }
    times = measure(steps, args.reps)
    where = Path(dp.__file__).parent
    print(f"one thread, dpt_ir from {where}, scipy {scipy.__version__}, median of {args.reps} rounds")
    print("| case | dpt_ir CPU ms | scipy CPU ms | scipy / dpt_ir (CPU) | scipy / dpt_ir (wall) |")
    print("|---|---:|---:|---:|---:|")
    for case in ("spline_filter", "forward"):
        ours, peer = times[f"dpt_ir {case}"], times[f"scipy {case}"]
        ratios = [statistics.median(b / a for a, b in zip(ours[k], peer[k], strict=True)) for k in ("cpu", "wall")]
        print(
            f"| {case} | {statistics.median(ours['cpu']) * 1e3:.2f} | {statistics.median(peer['cpu']) * 1e3:.2f} "
            f"| {ratios[0]:.2f} | {ratios[1]:.2f} |"
        )


if __name__ == "__main__":
    main()

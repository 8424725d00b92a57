"""Tomography benchmark: one least-squares step (radon forward + its adjoint) against peers.

    python benchmarks/bench_resample.py [--size 128] [--angles 180] [--reps 5]

In one process, for an N x N float64 image and ``--angles`` projection angles:

1. dpt_ir: ``Program.value_and_grad`` of ``0.5 * ||radon(x) - b||²`` (the forward
   projection and its exact adjoint, the compile-time transposed sparse map);
2. SciPy: the same operator as a ``scipy.sparse`` CSR matrix (built from the same taps),
   ``A @ x`` then ``A.T @ r``: a NumPy/SciPy implementation of the identical step;
3. scikit-image: ``skimage.transform.radon`` forward, then ``iradon(..., filter_name=None)``
   as the backprojection (skimage's own, not the exact adjoint of its projector).

Also reported: the time to build the sparse map, its size (taps, and the bytes of the
forward CSR and its transpose in the program) and the compile time. The gradients of
dpt_ir and SciPy are checked against each other first. Rounds interleave the contenders in
rotating order after one warm-up; each reports the median CPU time of the calling thread
(``time.thread_time``) and the median wall time; ratios are per round (contenders of the
same run only), then the median.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import numpy as np

import dpt_ir as dp
from dpt_ir.reference.radon_ref import radon_map
from dpt_ir.runtime.modules import cache_root

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repository root holds the benchmarks package
    sys.path.insert(0, str(ROOT))

from benchmarks.rounds import measure  # noqa: E402


def _tree_bytes(root: Path) -> int:
    """The bytes of the files under ``root`` (0 if it does not exist)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def _phantom(n: int) -> np.ndarray:
    y, x = np.mgrid[:n, :n]
    r = np.hypot(x - n // 2, y - n // 2)
    img = np.where(r < 0.4 * n, 1.0, 0.0) + np.where(np.hypot(x - 0.6 * n, y - 0.45 * n) < 0.1 * n, 0.5, 0.0)
    return np.where(r <= n // 2, img, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--angles", type=int, default=180)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    n, theta = args.size, np.linspace(0.0, 180.0, args.angles, endpoint=False)
    x0 = _phantom(n)
    rng = np.random.default_rng(0)

    start = time.perf_counter()
    taps = radon_map((n, n), list(theta), True)
    build_s = time.perf_counter() - start
    from scipy.sparse import csr_matrix

    a = csr_matrix((taps.vals, taps.cols, taps.rowptr), shape=(taps.n_out, taps.n_in))
    b = a @ x0.ravel() + 0.01 * rng.normal(size=taps.n_out)

    g = dp.GraphBuilder("bench_radon")
    x = g.input("x", (n, n), "float64")
    sino = g.input("b", (n, len(theta)), "float64", requires_grad=False)
    g.output("loss", 0.5 * dp.sum(dp.square(dp.radon(x, theta) - sino)))
    cache_before = _tree_bytes(cache_root())
    start = time.perf_counter()
    program = dp.compile(g.build(), wrt=["x"])
    compile_s = time.perf_counter() - start
    cache_growth = _tree_bytes(cache_root()) - cache_before
    b2 = b.reshape(n, len(theta))

    def scipy_step() -> np.ndarray:
        r = a @ x0.ravel() - b
        return a.T @ r

    from skimage.transform import iradon, radon

    def skimage_step() -> np.ndarray:
        r = radon(x0, theta, circle=True) - b2
        return iradon(r, theta, filter_name=None, circle=True)

    def dpt_step() -> np.ndarray:
        return program.value_and_grad(x=x0, b=b2)[1]["x"]

    grad = dpt_step()
    assert np.allclose(grad.ravel(), scipy_step(), rtol=1e-9, atol=1e-9 * np.abs(grad).max())
    steps = {"dpt_ir value_and_grad": dpt_step, "scipy.sparse A x, A.T r": scipy_step}
    steps["skimage radon + iradon(None)"] = skimage_step
    times = measure(steps, args.reps)
    map_bytes = taps.rowptr.nbytes + taps.cols.nbytes + taps.vals.nbytes
    print(f"radon {n}x{n}, {len(theta)} angles, float64, device {program.device}, median of {args.reps} rounds")
    print(f"  sparse map: {len(taps.vals)} taps, {map_bytes / 2**20:.1f} MiB as a NumPy CSR, built in {build_s:.2f} s")
    print(f"  compiled in {compile_s:.2f} s; the disk cache grew by {cache_growth / 2**20:.1f} MiB")
    print("| contender | CPU ms | wall ms | dpt_ir / it (CPU) | dpt_ir / it (wall) |")
    print("|---|---:|---:|---:|---:|")
    ours = times["dpt_ir value_and_grad"]
    for name, t in times.items():
        ratios = [statistics.median(a / b for a, b in zip(ours[k], t[k], strict=True)) for k in ("cpu", "wall")]
        print(
            f"| {name} | {statistics.median(t['cpu']) * 1e3:.2f} | {statistics.median(t['wall']) * 1e3:.2f} "
            f"| {ratios[0]:.2f} | {ratios[1]:.2f} |"
        )


if __name__ == "__main__":
    main()

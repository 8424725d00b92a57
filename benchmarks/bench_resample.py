"""Tomography benchmark: one least-squares step (radon forward + its adjoint) against peers.

    python benchmarks/bench_resample.py [--size 64] [--angles 180] [--reps 5]

In one process, for an N x N float64 image and ``--angles`` projection angles:

1. dpt_ir: ``Program.value_and_grad`` of ``0.5 * ||radon(x) - b||²`` (the forward
   projection and its exact adjoint, the compile-time transposed sparse map);
2. SciPy: the same operator as a ``scipy.sparse`` CSR matrix (built from the same taps),
   ``A @ x`` then ``A.T @ r``: a NumPy/SciPy implementation of the identical step;
3. scikit-image: ``skimage.transform.radon`` forward, then ``iradon(..., filter_name=None)``
   as the backprojection (skimage's own, not the exact adjoint of its projector).

Also reported: the time to build the sparse map and to compile. Every timing is the median
of ``--reps`` rounds after one warm-up; ratios are between contenders of the same run.
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import numpy as np

import dpt_ir as dp
from dpt_ir.radon_ref import radon_map


def _median(fn: Callable[[], object], reps: int) -> float:
    fn()
    times = []
    for _ in range(reps):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def _phantom(n: int) -> np.ndarray:
    y, x = np.mgrid[:n, :n]
    r = np.hypot(x - n // 2, y - n // 2)
    img = np.where(r < 0.4 * n, 1.0, 0.0) + np.where(np.hypot(x - 0.6 * n, y - 0.45 * n) < 0.1 * n, 0.5, 0.0)
    return np.where(r <= n // 2, img, 0.0)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=64)
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
    start = time.perf_counter()
    program = dp.compile(g.build(), wrt=["x"])
    compile_s = time.perf_counter() - start
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
    t_dp, t_sp, t_sk = (_median(f, args.reps) for f in (dpt_step, scipy_step, skimage_step))
    print(f"radon {n}x{n}, {len(theta)} angles, float64, device {program.device}; {len(taps.vals)} taps")
    print(f"  sparse map built in {build_s:.2f} s; compiled in {compile_s:.2f} s")
    print(f"  dpt_ir value_and_grad          {t_dp * 1e3:9.2f} ms")
    print(f"  scipy.sparse A x, A.T r        {t_sp * 1e3:9.2f} ms   dpt_ir / scipy   = {t_dp / t_sp:6.2f}")
    print(f"  skimage radon + iradon(None)   {t_sk * 1e3:9.2f} ms   dpt_ir / skimage = {t_dp / t_sk:6.2f}")


if __name__ == "__main__":
    main()

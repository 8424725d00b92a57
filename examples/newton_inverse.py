"""Deblur a transmission image with Newton's method: trust-ncg through ``.hessp`` against L-BFGS-B.

The forward model is Beer-Lambert transmission seen through a Gaussian blur: the image of an
attenuation field ``mu`` on an ``n x n`` grid is ``blur(exp(-mu))``. From a noisy observation
``obs`` (made here from a known phantom, noise of known level ``NOISE``), both solvers minimise
the same non-quadratic, first-order Tikhonov-regularised loss

    0.5 * sum((blur(exp(-mu)) - obs)^2) + 0.5 * alpha * sum(|D mu|^2)

where ``D`` is the forward difference along each axis (the discrete H1 seminorm: its Hessian
``alpha * (-laplacian)`` with Neumann ends damps every non-constant mode, and the data term sees
the constant one). The weight ``alpha`` is chosen as users of a calibrated detector choose it,
by Morozov's discrepancy principle: the largest ``alpha`` whose solution fits the data to the
noise, ``sum(r^2) = n^2 NOISE^2``, found by bisection on ``log10(alpha)`` (``choose_alpha``,
each solve a loose trust-ncg; ``alpha`` is a program input, so one program serves them all).

Both solvers run on one ``dpt_ir.scipy.objective`` of that program: L-BFGS-B with its gradient
(``value_and_grad``), and trust-ncg with its gradient and its Hessian-vector products
(``fun.hessp``, `Program.hvp`: forward over reverse, fused, docs/second_order.md). Each prints
its iterations, function evaluations, Hessian-vector products, wall time and final misfit;
trust-ncg is stopped at the misfit L-BFGS-B reached.

Run: ``python examples/newton_inverse.py`` (64 x 64); ``--size 8`` is the small run the tests
make; ``--alpha A`` skips the discrepancy search. Figures: docs/second_order.md, Measured.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
from scipy import ndimage, optimize

import dpt_ir as dp
import dpt_ir.scipy as dps

SIGMA = 1.5
NOISE = 0.01


def graph(n: int) -> dp.Graph:
    """``loss`` over attenuation ``mu`` given the observed image ``obs`` and the weight ``alpha`` (float64)."""
    g = dp.GraphBuilder("newton_deblur")
    mu = g.input("mu", (n, n), "float64")
    obs = g.input("obs", (n, n), "float64", requires_grad=False)
    alpha = g.input("alpha", (), "float64", requires_grad=False)
    image = dp.gaussian_filter(dp.exp(-mu), SIGMA, mode="reflect")
    dy, dx = mu[1:, :] - mu[:-1, :], mu[:, 1:] - mu[:, :-1]
    misfit = 0.5 * dp.sum(dp.square(image - obs))
    g.output("misfit", misfit)
    g.output("loss", misfit + 0.5 * alpha * (dp.sum(dp.square(dy)) + dp.sum(dp.square(dx))))
    return g.build()


def observation(n: int, rng: np.random.Generator) -> np.ndarray:
    """A blurred disc-and-square phantom's transmission, with noise of standard deviation ``NOISE``."""
    yy, xx = np.mgrid[0:n, 0:n] / n
    mu = 0.8 * ((yy - 0.4) ** 2 + (xx - 0.4) ** 2 < 0.05) + 0.5 * ((abs(yy - 0.7) < 0.1) & (abs(xx - 0.65) < 0.15))
    clean = ndimage.gaussian_filter(np.exp(-mu), SIGMA, mode="reflect")
    return clean + NOISE * rng.standard_normal((n, n))


def newton(fun: dps.Objective, x0: np.ndarray, **options: object) -> optimize.OptimizeResult:
    """trust-ncg through the program's Hessian-vector products."""
    return optimize.minimize(fun, x0, jac=True, hessp=fun.hessp, method="trust-ncg", **options)  # type: ignore[call-overload]


def choose_alpha(program: dp.Program, obs: np.ndarray, steps: int = 12) -> float:
    """Morozov's discrepancy principle: bisect ``log10(alpha)`` in [-6, 0] until the solution's
    ``sum(r^2)`` meets ``n^2 NOISE^2`` (it grows with ``alpha``); solves warm-start from the last."""
    target = 0.5 * obs.size * NOISE**2
    lo, hi, x = -6.0, 0.0, np.zeros(obs.size)
    for _ in range(steps):
        mid = 0.5 * (lo + hi)
        fun = dps.objective(program, obs=obs, alpha=np.float64(10.0**mid))
        x = newton(fun, x, options={"gtol": 1e-6}).x
        misfit = float(program.run(mu=x.reshape(obs.shape), obs=obs, alpha=np.float64(10.0**mid))["misfit"])
        lo, hi = (mid, hi) if misfit < target else (lo, mid)
    return float(10.0 ** (0.5 * (lo + hi)))


def main(argv: Sequence[str] | None = None) -> dict[str, optimize.OptimizeResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--alpha", type=float, default=None, help="skip the discrepancy-principle search")
    args = parser.parse_args(argv)
    n = args.size
    obs = observation(n, np.random.default_rng(0))
    program = dp.compile(graph(n), wrt=["mu"], loss="loss", device="cpu")
    x0 = np.zeros(n * n)
    # Build both plans first (each is built on its first call), so the timings are the solvers'.
    program.value_and_grad(mu=x0.reshape(n, n), obs=obs, alpha=np.float64(1.0))
    program.hvp({"mu": x0.reshape(n, n)}, mu=x0.reshape(n, n), obs=obs, alpha=np.float64(1.0))
    alpha = choose_alpha(program, obs) if args.alpha is None else args.alpha
    fixed = {"obs": obs, "alpha": np.float64(alpha)}
    results: dict[str, optimize.OptimizeResult] = {}

    fun = dps.objective(program, **fixed)
    start = time.perf_counter()
    results["L-BFGS-B"] = optimize.minimize(fun, x0, jac=True, method="L-BFGS-B",
                                            options={"maxiter": 5000, "ftol": 1e-13, "gtol": 1e-9})  # fmt: skip
    seconds = {"L-BFGS-B": time.perf_counter() - start}
    target = results["L-BFGS-B"].fun
    counts = {"L-BFGS-B": (fun.nfev, 0)}

    hessian = dps.objective(program, **fixed)

    def reached(intermediate_result: optimize.OptimizeResult) -> None:
        if intermediate_result.fun <= target:
            raise StopIteration  # SciPy stops and returns the current point

    start = time.perf_counter()
    results["trust-ncg"] = newton(hessian, x0, callback=reached, options={"gtol": 1e-9, "maxiter": 500})
    seconds["trust-ncg"] = time.perf_counter() - start
    counts["trust-ncg"] = (hessian.nfev, hessian.nhev)
    print(f"deblurring {n}x{n}, alpha {alpha:.3e} (discrepancy principle: {args.alpha is None}): "
          f"loss of L-BFGS-B {target:.6e}")  # fmt: skip
    for name, res in results.items():
        nfev, nhev = counts[name]
        print(f"  {name:9s} iterations {res.nit:4d}  function evaluations {nfev:4d}  Hessian-vector products "
              f"{nhev:4d}  wall {seconds[name]:.3f} s  loss {res.fun:.6e}")  # fmt: skip
    return results


if __name__ == "__main__":
    main()

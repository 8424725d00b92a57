"""Deblur a transmission image with Newton's method: trust-ncg through ``.hessp`` against L-BFGS-B.

The forward model is Beer-Lambert transmission seen through a Gaussian blur: the image of an
attenuation field ``mu`` on an ``n x n`` grid is ``blur(exp(-mu))``. From a noisy observation
``obs`` (made here from a known phantom), both solvers minimise the same non-quadratic loss

    0.5 * sum((blur(exp(-mu)) - obs)^2) + alpha * |grad mu|^2

through ``dpt_ir.scipy.objective`` of one compiled program: L-BFGS-B with its gradient
(``value_and_grad``), and trust-ncg with its gradient and its Hessian-vector products
(``fun.hessp``, `Program.hvp`: reverse over reverse, fused, docs/second_order.md). Each
prints its iterations, function evaluations, Hessian-vector products, wall time and final
misfit; trust-ncg is stopped at the misfit L-BFGS-B reached.

Run: ``python examples/newton_inverse.py`` (64 x 64); ``--size 8`` is the small run the tests
make. Measured on 2026-12-03 (shared 2-core machine, one program, both plans built first), at
64 x 64: L-BFGS-B 3427 iterations, 3522 function evaluations, 45.5 s; trust-ncg 130 iterations,
130 function evaluations and 8122 Hessian-vector products, 16.7 s, to the same misfit 0.18518.
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
ALPHA = 1e-3


def graph(n: int) -> dp.Graph:
    """``loss`` over attenuation ``mu`` given the observed image ``obs`` (float64)."""
    g = dp.GraphBuilder("newton_deblur")
    mu = g.input("mu", (n, n), "float64")
    obs = g.input("obs", (n, n), "float64", requires_grad=False)
    image = dp.gaussian_filter(dp.exp(-mu), SIGMA, mode="reflect")
    gy, gx = dp.gradient(mu)
    loss = 0.5 * dp.sum(dp.square(image - obs)) + ALPHA * (dp.sum(dp.square(gy)) + dp.sum(dp.square(gx)))
    g.output("loss", loss)
    return g.build()


def observation(n: int, rng: np.random.Generator) -> np.ndarray:
    """A blurred disc-and-square phantom's transmission, with 1% noise."""
    yy, xx = np.mgrid[0:n, 0:n] / n
    mu = 0.8 * ((yy - 0.4) ** 2 + (xx - 0.4) ** 2 < 0.05) + 0.5 * ((abs(yy - 0.7) < 0.1) & (abs(xx - 0.65) < 0.15))
    clean = ndimage.gaussian_filter(np.exp(-mu), SIGMA, mode="reflect")
    return clean + 0.01 * rng.standard_normal((n, n))


def main(argv: Sequence[str] | None = None) -> dict[str, optimize.OptimizeResult]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64)
    args = parser.parse_args(argv)
    n = args.size
    obs = observation(n, np.random.default_rng(0))
    program = dp.compile(graph(n), wrt=["mu"], device="cpu")
    x0 = np.zeros(n * n)
    # Build both plans first (each is built on its first call), so the timings are the solvers'.
    program.value_and_grad(mu=x0.reshape(n, n), obs=obs)
    program.hvp({"mu": x0.reshape(n, n)}, mu=x0.reshape(n, n), obs=obs)
    results: dict[str, optimize.OptimizeResult] = {}

    fun = dps.objective(program, obs=obs)
    start = time.perf_counter()
    results["L-BFGS-B"] = optimize.minimize(fun, x0, jac=True, method="L-BFGS-B",
                                            options={"maxiter": 5000, "ftol": 1e-13, "gtol": 1e-9})  # fmt: skip
    seconds = {"L-BFGS-B": time.perf_counter() - start}
    target = results["L-BFGS-B"].fun
    counts = {"L-BFGS-B": (fun.nfev, 0)}

    newton = dps.objective(program, obs=obs)

    def reached(intermediate_result: optimize.OptimizeResult) -> None:
        if intermediate_result.fun <= target:
            raise StopIteration  # SciPy stops and returns the current point

    start = time.perf_counter()
    results["trust-ncg"] = optimize.minimize(newton, x0, jac=True, hessp=newton.hessp, method="trust-ncg",
                                             callback=reached, options={"gtol": 1e-9, "maxiter": 500})  # fmt: skip
    seconds["trust-ncg"] = time.perf_counter() - start
    counts["trust-ncg"] = (newton.nfev, newton.nhev)
    print(f"deblurring {n}x{n}: misfit of L-BFGS-B {target:.6e}")
    for name, res in results.items():
        nfev, nhev = counts[name]
        print(f"  {name:9s} iterations {res.nit:4d}  function evaluations {nfev:4d}  Hessian-vector products "
              f"{nhev:4d}  wall {seconds[name]:.3f} s  misfit {res.fun:.6e}")  # fmt: skip
    return results


if __name__ == "__main__":
    main()

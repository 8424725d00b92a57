"""Recover a conductivity field from the temperature observed after many explicit heat steps.

The forward model is ``steps`` explicit heat steps on an ``n x n`` grid, written once as
the step of a `dp.scan` (the conductivity ``k`` is closed over, so its gradient flows
through every step):

    u_{t+1} = u_t + 0.2 * k * laplacian(u_t)      (nearest-value boundaries)

From a known initial field and the field observed at the end (made here with a known
``k_true``), L-BFGS-B (``scipy.optimize``) recovers ``k`` by minimising the misfit
``0.5 * sum((u_T(k) - obs)^2)`` plus a small smoothness penalty, through
``dpt_ir.scipy.objective`` of the compiled loop program (its ``value_and_grad``). The
misfit is printed at every iteration.

Run: ``python examples/heat_inverse.py`` (1,000 steps on 128 x 128);
``python examples/heat_inverse.py --steps 20 --size 16 --iterations 5`` is the small run
the tests make. ``--checkpoint K`` stores only K carries in the reverse sweep.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence

import numpy as np
from scipy import optimize

import dpt_ir as dp
import dpt_ir.scipy as dps

LAPLACIAN = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
SMOOTHNESS = 1e-3
K_BOUNDS = (0.05, 1.2)  # 0.2 * k * 4 <= 1: the explicit scheme stays stable


def heat_graph(n: int, steps: int, checkpoint: int | None, observed: bool) -> dp.Graph:
    """``steps`` heat steps from ``u0`` with conductivity ``k``. With ``observed``:
    ``loss = 0.5 * sum((u_T - obs)^2) + SMOOTHNESS * |grad k|^2`` (and the misfit alone);
    without: the final field ``u`` (to make the observations)."""
    g = dp.GraphBuilder("heat_inverse" if observed else "heat_forward")
    k = g.input("k", (n, n), "float64")
    u0 = g.input("u0", (n, n), "float64", requires_grad=False)

    def step(u: dp.Tensor, _: None) -> tuple[dp.Tensor, None]:
        return u + 0.2 * k * dp.correlate(u, LAPLACIAN, mode="nearest"), None

    u, _ = dp.scan(step, u0, length=steps, checkpoint=checkpoint)
    if not observed:
        g.output("u", u)
        return g.build()
    obs = g.input("obs", (n, n), "float64", requires_grad=False)
    dk0, dk1 = dp.gradient(k)
    misfit = 0.5 * dp.sum(dp.square(u - obs))
    g.output("loss", misfit + SMOOTHNESS * (dp.sum(dp.square(dk0)) + dp.sum(dp.square(dk1))))
    g.output("misfit", misfit)
    return g.build()


def problem(n: int) -> tuple[np.ndarray, np.ndarray]:
    """A known conductivity (a smooth bump on a background) and a striped initial field."""
    y, x = np.mgrid[0:n, 0:n] / max(n - 1, 1)
    k_true = 0.5 + 0.4 * np.exp(-((x - 0.6) ** 2 + (y - 0.4) ** 2) / 0.05)
    u0 = np.sin(6 * np.pi * x) * np.cos(4 * np.pi * y) + (x > 0.5)
    return k_true, u0


def main(argv: Sequence[str] | None = None) -> dict[str, float]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--size", type=int, default=128)
    parser.add_argument("--iterations", type=int, default=30)
    parser.add_argument("--checkpoint", type=int, default=None)
    args = parser.parse_args(argv)

    n = args.size
    start = time.perf_counter()
    program = dp.compile(heat_graph(n, args.steps, args.checkpoint, observed=True), wrt=["k"], loss="loss")
    print(f"compiled {args.steps} heat steps on {n}x{n} in {time.perf_counter() - start:.2f} s")
    k_true, u0 = problem(n)
    # The same step, so the same compiled body: this compile reuses it.
    observed = dp.compile(heat_graph(n, args.steps, None, observed=False)).run(k=k_true, u0=u0)["u"]
    k0 = np.full((n, n), 0.7)
    history: list[float] = []

    fun = dps.objective(program, u0=u0, obs=observed)  # value and gradient over the flat k

    def report(x: np.ndarray) -> None:
        misfit = float(program.run(k=x.reshape(n, n), u0=u0, obs=observed)["misfit"])
        history.append(misfit)
        error = np.linalg.norm(x - k_true.ravel()) / np.linalg.norm(k_true)
        print(f"iteration {len(history):3d}: misfit {misfit:.6e}, relative error of k {error:.4f}")

    first = float(program.run(k=k0, u0=u0, obs=observed)["misfit"])
    print(f"iteration   0: misfit {first:.6e}")
    start = time.perf_counter()
    result = optimize.minimize(
        fun,
        fun.x0(k=k0),
        jac=True,
        method="L-BFGS-B",
        bounds=[K_BOUNDS] * (n * n),
        callback=report,
        options={"maxiter": args.iterations},
    )
    seconds = time.perf_counter() - start
    print(f"L-BFGS-B: {result.nit} iterations, {result.nfev} evaluations in {seconds:.1f} s: {result.message}")
    return {"initial_misfit": first, "final_misfit": history[-1] if history else first}


if __name__ == "__main__":
    main()

"""Non-rigid 2-D image registration with dpt_ir: find the smooth displacement that warps a
moving image onto a fixed one.

Model: the displacement field u (2, H, W) moves the sampling grid; the moving image is
sampled there with bicubic B-spline interpolation (``dp.map_coordinates(order=3)``, at
coordinates that are graph tensors, so the gradient reaches u). Objective: the sum of
squared differences to the fixed image plus a smoothness penalty (squared finite
differences of u). SciPy's L-BFGS-B minimises it with the compiled gradient. The images
are made in code: the moving image is the fixed one warped by a known smooth field.

    python examples/registration.py [--size 64] [--iterations 100]
"""

from __future__ import annotations

import argparse
import time

import numpy as np
from scipy.ndimage import map_coordinates
from scipy.optimize import minimize

import dpt_ir as dp
import dpt_ir.scipy as dps


def blobs(n: int) -> np.ndarray:
    """A smooth test image: a few Gaussian blobs of different sizes."""
    y, x = np.mgrid[:n, :n] / n
    img = np.zeros((n, n))
    for cx, cy, s, a in (
        (0.35, 0.4, 0.12, 1.0),
        (0.65, 0.6, 0.09, 0.8),
        (0.55, 0.28, 0.06, 0.6),
        (0.3, 0.72, 0.07, 0.5),
    ):
        img += a * np.exp(-((x - cx) ** 2 + (y - cy) ** 2) / (2 * s * s))
    return img


def true_displacement(n: int) -> np.ndarray:
    """A smooth field of up to ~n/20 pixels."""
    y, x = np.mgrid[:n, :n] / n
    amp = n / 20
    return np.stack([amp * np.sin(2 * np.pi * x) * np.cos(np.pi * y), amp * np.cos(np.pi * x) * np.sin(2 * np.pi * y)])


def build(n: int, smoothness: float) -> dp.Graph:
    g = dp.GraphBuilder("registration")
    u = g.input("u", (2, n, n), dtype="float64")
    grid = g.input("grid", (2, n, n), dtype="float64", requires_grad=False)
    moving = g.input("moving", (n, n), dtype="float64", requires_grad=False)
    fixed = g.input("fixed", (n, n), dtype="float64", requires_grad=False)
    warped = dp.map_coordinates(moving, grid + u, order=3, mode="nearest")
    g.output("warped", warped)
    ssd = 0.5 * dp.sum(dp.square(warped - fixed))
    smooth = dp.sum(dp.square(u[:, 1:, :] - u[:, :-1, :])) + dp.sum(dp.square(u[:, :, 1:] - u[:, :, :-1]))
    g.output("loss", ssd + smoothness * smooth)
    return g.build()


def register(n: int = 64, iterations: int = 100, smoothness: float = 0.005, every: int = 20) -> dict[str, float]:
    """Run the registration; the SSD and the displacement error before and after."""
    fixed = blobs(n)
    grid = np.indices((n, n), dtype=np.float64)
    truth = true_displacement(n)
    # The moving image, sampled at grid - truth, is the fixed one moved by the field: warping
    # it back at grid + u matches the fixed image for u ~ truth (to first order).
    moving = map_coordinates(fixed, grid - truth, order=3, mode="nearest")
    start = time.perf_counter()
    program = dp.compile(build(n, smoothness), wrt=["u"], loss="loss")
    print(f"compiled in {time.perf_counter() - start:.1f} s on {program.device}")
    fun = dps.objective(program, grid=grid, moving=moving, fixed=fixed)
    u0 = np.zeros((2, n, n))

    def ssd(u: np.ndarray) -> float:
        warped = program.run(u=u, grid=grid, moving=moving, fixed=fixed)["warped"]
        return float(0.5 * np.sum((warped - fixed) ** 2))

    steps = [0]

    def report(xk: np.ndarray) -> None:
        steps[0] += 1
        if steps[0] % every == 0:
            print(f"iteration {steps[0]:4d}: SSD {ssd(fun.unflatten(xk)['u']):.5f}")

    print(f"before: SSD {ssd(u0):.5f}")
    result = minimize(fun, fun.x0(u=u0), jac=True, method="L-BFGS-B", callback=report, options={"maxiter": iterations})
    u = fun.unflatten(result.x)["u"]
    inner = (slice(None), slice(n // 8, -n // 8), slice(n // 8, -n // 8))  # away from the edges
    before, after = ssd(u0), ssd(u)
    err0 = float(np.sqrt(np.mean(truth[inner] ** 2)))
    err = float(np.sqrt(np.mean((u - truth)[inner] ** 2)))
    print(f"after {steps[0]} iterations: SSD {after:.5f}; displacement RMS error {err:.3f} px (was {err0:.3f})")
    return {"ssd_before": before, "ssd_after": after, "error_before": err0, "error_after": err}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=64)
    parser.add_argument("--iterations", type=int, default=100)
    parser.add_argument("--smoothness", type=float, default=0.005)
    args = parser.parse_args()
    register(args.size, args.iterations, args.smoothness)


if __name__ == "__main__":
    main()

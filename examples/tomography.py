"""Parallel-beam tomography with dpt_ir: reconstruct an image from a noisy sinogram.

Forward model: ``dp.radon`` (scikit-image's conventions: rotation about pixel N // 2,
bilinear sampling, a sum along each ray). Objective: least squares against the measured
sinogram plus a smoothed total-variation penalty. The gradient is the compiled exact
adjoint of the projector: matrix-free, like the forward (each sample computed on the fly,
the transpose an ordered gather), so set-up and memory do not grow with the number of taps.
SciPy's L-BFGS-B minimises it. The phantom is made in code; the script prints the relative
error against it every few iterations, the time per evaluation, and writes a picture of the
phantom, the sinogram and the reconstruction (``--out``: a PNG with matplotlib, else an
``.npz`` of the arrays).

    python examples/tomography.py [--size 512] [--angles 180] [--iterations 40] [--out tomography.png]
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import numpy as np
from scipy.optimize import minimize

import dpt_ir as dp
import dpt_ir.scipy as dps

TV_EPS = 1e-4  # smoothing of |grad x| so that the penalty is differentiable at 0


def phantom(n: int) -> np.ndarray:
    """Ellipses of different densities (a Shepp-Logan-like head), zero outside the circle."""
    y, x = np.mgrid[:n, :n]
    u, v = (x - n // 2) / (n / 2), (y - n // 2) / (n / 2)
    img = np.zeros((n, n))
    ellipses = [(0, 0, 0.69, 0.92, 1.0), (0, -0.02, 0.66, 0.87, -0.6), (0.22, 0, 0.11, 0.31, 0.3)]
    ellipses += [(-0.22, 0, 0.16, 0.41, 0.3), (0, 0.35, 0.21, 0.25, 0.2), (0.1, -0.6, 0.05, 0.05, 0.4)]
    for cx, cy, a, b, value in ellipses:
        img[((u - cx) / a) ** 2 + ((v - cy) / b) ** 2 <= 1] += value
    img[u**2 + v**2 > ((n // 2) / (n / 2)) ** 2] = 0.0
    return img


def build(n: int, theta: np.ndarray, tv_weight: float) -> dp.Graph:
    """Least squares against the sinogram plus ``tv_weight`` times the smoothed total variation."""
    g = dp.GraphBuilder("tomography")
    x = g.input("x", (n, n), dtype="float64")
    sino = g.input("sinogram", (n, len(theta)), dtype="float64", requires_grad=False)
    g.output("sinogram_of_x", dp.radon(x, theta))
    misfit = 0.5 * dp.sum(dp.square(dp.radon(x, theta) - sino))
    dx, dy = x[1:, :-1] - x[:-1, :-1], x[:-1, 1:] - x[:-1, :-1]
    tv = dp.sum(dp.sqrt(dp.square(dx) + dp.square(dy) + TV_EPS))
    g.output("loss", misfit + tv_weight * tv)
    return g.build()


def save_picture(path: Path, images: dict[str, np.ndarray]) -> Path:
    """The images side by side (a PNG with matplotlib, else an ``.npz`` of the arrays)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = path.with_suffix(".npz")
        np.savez(path, **images)
        return path
    fig, axes = plt.subplots(1, len(images), figsize=(4 * len(images), 3.8), constrained_layout=True)
    for ax, (title, image) in zip(axes, images.items(), strict=True):
        ax.imshow(image, cmap="gray", aspect="auto")
        ax.set_title(title)
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def default_tv_weight(n: int, angles: int) -> float:
    """0.5 at 64² and 60 angles, scaled like n² x angles: the noise's share of the misfit grows
    like n³ x angles (n x angles samples, the noise in each proportional to the largest ray sum,
    about n) and the phantom's total variation like n (the length of its edges). At 512² and 180
    angles it gives 96: the error against the phantom then falls to 0.098 in 40 iterations,
    where 0.5 lets it rise to 0.50 after 10 (the noise is fitted)."""
    return 0.5 * (n / 64) ** 2 * (angles / 60)


def reconstruct(
    n: int = 512,
    angles: int = 180,
    iterations: int = 40,
    noise: float = 0.02,
    tv_weight: float | None = None,
    every: int = 10,
    out: Path | None = None,
) -> list[tuple[int, float]]:
    """Run the reconstruction; the (iteration, relative error) pairs printed along the way.
    With ``out``, write the picture of phantom, sinogram and reconstruction there. ``tv_weight``
    None: `default_tv_weight`."""
    tv_weight = default_tv_weight(n, angles) if tv_weight is None else tv_weight
    rng = np.random.default_rng(0)
    truth = phantom(n)
    theta = np.linspace(0.0, 180.0, angles, endpoint=False)
    start = time.perf_counter()
    program = dp.compile(build(n, theta, tv_weight), wrt=["x"], loss="loss")
    print(f"compiled in {time.perf_counter() - start:.1f} s on {program.device}")
    clean = program.run(x=truth, sinogram=np.zeros((n, angles)))["sinogram_of_x"]
    sinogram = clean + noise * np.abs(clean).max() * rng.normal(size=clean.shape)
    fun = dps.objective(program, sinogram=sinogram)
    errors: list[tuple[int, float]] = []

    def report(xk: np.ndarray) -> None:
        k = len(errors) + 1
        err = float(np.linalg.norm(fun.unflatten(xk)["x"] - truth) / np.linalg.norm(truth))
        errors.append((k, err))
        if k % every == 0 or k == 1:
            print(f"iteration {k:4d}: relative error vs phantom {err:.4f}")

    x0 = fun.x0(x=np.zeros((n, n)))
    start = time.perf_counter()
    result = minimize(fun, x0, jac=True, method="L-BFGS-B", callback=report, options={"maxiter": iterations})
    wall = time.perf_counter() - start
    print(f"final relative error {errors[-1][1]:.4f} after {errors[-1][0]} iterations ({fun.nfev} evaluations)")
    print(f"{wall:.1f} s in the solver, {1e3 * wall / max(fun.nfev, 1):.0f} ms per evaluation (SciPy's work included)")
    if out is not None:
        images = {"phantom": truth, "sinogram": sinogram, "reconstruction": fun.unflatten(result.x)["x"]}
        print(f"picture written to {save_picture(out, images)}")
    return errors


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=512)
    parser.add_argument("--angles", type=int, default=180)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--noise", type=float, default=0.02)
    parser.add_argument("--tv-weight", type=float, default=None, help="default: scaled with size and angles")
    parser.add_argument("--out", type=Path, default=Path("tomography.png"), help="the picture")
    args = parser.parse_args()
    reconstruct(args.size, args.angles, args.iterations, args.noise, args.tv_weight, out=args.out)


if __name__ == "__main__":
    main()

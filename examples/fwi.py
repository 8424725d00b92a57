"""Full-waveform inversion: recover a 2-D velocity model from the seismograms of several shots.

The forward model is the 2-D acoustic wave equation, leapfrog in time with the 5-point laplacian,
written once as the step of a `dp.scan` whose carry holds every shot at once (a leading batch
axis of ``shots``):

    u_{t+1} = g * (2 u_t - g u_{t-1} + (v dt / h)^2 lap5(u_t)) + f_t delta_src      (per shot)
    d_t     = u_t[REC_ROW, :]                                   (receivers along the top)

``g`` is a sponge (Cerjan) damping profile, 1 inside and falling to ``1 - SPONGE_DECAY`` over the
``--sponge`` outer cells of every edge, so waves leave the grid instead of reflecting. Each shot's
Ricker wavelet ``f`` is injected with `dp.add_at` at its source cell (a constant position in the
flattened batch of fields); the receivers are a slice of each step's field. The true model has
three layers (1.5, 2.0 and 2.6 km/s) and a buried fast disc; the starting model is the layers
smoothed (no disc). L-BFGS-B (``scipy.optimize``) minimises ``0.5 * sum((d(v) - d_obs)^2)`` (the
data scaled so that the starting misfit is 1) over the velocity in km/s, through
``dpt_ir.scipy.objective`` of the compiled loop program (its ``value_and_grad``). The script
prints the misfit per iteration and writes a picture of the true, starting and recovered models
(``--out``, a PNG with matplotlib, else an ``.npz`` of the three models).

Run: ``python examples/fwi.py`` (a 64 x 64 grid, a 12-cell sponge, 8 shots, 500 steps, 40 iterations);
``python examples/fwi.py --size 24 --sponge 6 --shots 2 --steps 150 --iterations 6`` is the small
run the tests make. ``--checkpoint K`` stores only K carries in the reverse sweep.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np
from scipy import ndimage, optimize

import dpt_ir as dp
import dpt_ir.scipy as dps

LAP = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
H, DT, FREQ = 10.0, 0.001, 15.0  # 10 m cells, 1 ms steps, a 15 Hz Ricker wavelet
SPONGE_DECAY = 0.08  # the damping factor's drop at the outer edge of the sponge
V_BOUNDS = (1.3, 3.2)  # km/s: v dt / h <= 0.32, inside the 2-D CFL limit 1/sqrt(2)
LAYERS = (1.5, 2.0, 2.6)  # km/s, top to bottom


def ricker(steps: int) -> np.ndarray:
    t = np.arange(steps) * DT - 1.2 / FREQ
    a = (np.pi * FREQ * t) ** 2
    return (1 - 2 * a) * np.exp(-a)


def true_model(n: int) -> np.ndarray:
    """Three flat layers with a fast disc buried in the middle one (km/s, ``n x n``)."""
    z, x = np.mgrid[:n, :n]
    v = np.full((n, n), LAYERS[0])
    v[z >= n // 3] = LAYERS[1]
    v[z >= (2 * n) // 3] = LAYERS[2]
    v[(z - n // 2) ** 2 + (x - n // 2) ** 2 < (n // 8) ** 2] = 2.4
    return v


def starting_model(n: int) -> np.ndarray:
    """The layers without the disc, smoothed over a wavelength: what a tomography would give."""
    z = np.arange(n)[:, None]
    layers = np.where(z < n // 3, LAYERS[0], np.where(z < (2 * n) // 3, LAYERS[1], LAYERS[2]))
    return ndimage.gaussian_filter(np.repeat(layers.astype(float), n, axis=1), sigma=n / 10, mode="nearest")


def damping(n: int, sponge: int) -> np.ndarray:
    """The sponge profile over the ``n x n`` grid: 1 inside, a quadratic fall over ``sponge`` cells."""
    edge = np.minimum(np.arange(n), np.arange(n)[::-1])
    depth = np.clip((sponge - edge) / max(sponge, 1), 0.0, 1.0)
    g1 = 1.0 - SPONGE_DECAY * depth**2
    return np.outer(g1, g1)


def geometry(n: int, sponge: int, shots: int) -> tuple[int, list[int]]:
    """The source and receiver row (just inside the sponge) and one source column per shot."""
    row = sponge + 1
    cols = np.linspace(sponge + 2, n - 1 - sponge - 2, shots).round() if shots > 1 else [n // 2]
    return row, [int(c) for c in cols]


def wave_graph(n: int, sponge: int, shots: int, steps: int, checkpoint: int | None, observed: bool) -> dp.Graph:
    """``steps`` leapfrog steps of every shot on velocity ``v`` (km/s). With ``observed``: the
    misfit ``loss = 0.5 * sum((weight * d - obs)^2)``; without: the seismograms ``data``
    (``steps x shots x n``) to make the observations."""
    g = dp.GraphBuilder("fwi" if observed else "fwi_forward")
    v = g.input("v", (n, n), "float64")
    f = g.input("f", (steps,), "float64", requires_grad=False)
    row, cols = geometry(n, sponge, shots)
    sources = np.array([s * n * n + row * n + c for s, c in enumerate(cols)])  # flat, per shot
    gain = g.input("gain", (n, n), "float64", requires_grad=False)  # the sponge, `damping`
    c = v * v * (1000.0 * DT / H) ** 2

    def step(carry: Any, ft: dp.Tensor) -> tuple[Any, dp.Tensor]:
        u_prev, u = carry
        u_next = gain * (2.0 * u - gain * u_prev + c * dp.correlate(u, LAP, mode="constant"))
        u_next = dp.reshape(dp.add_at(dp.reshape(u_next, (-1,)), sources, ft), (shots, n, n))
        return (u, u_next), u[:, row, :]

    zero = dp.broadcast_to(0.0 * v, (shots, n, n))
    _, data = dp.scan(step, (zero, zero), f, checkpoint=checkpoint)
    if not observed:
        g.output("data", data)
        return g.build()
    obs = g.input("obs", (steps, shots, n), "float64", requires_grad=False)
    weight = g.input("weight", (), "float64", requires_grad=False)
    g.output("loss", 0.5 * dp.sum(dp.square(weight * data - obs)))
    return g.build()


def relative_error(v: np.ndarray, truth: np.ndarray, sponge: int) -> float:
    """The relative L2 distance to the truth inside the sponge."""
    inner = (slice(sponge, -sponge or None),) * 2
    return float(np.linalg.norm(v[inner] - truth[inner]) / np.linalg.norm(truth[inner]))


def save_picture(path: Path, models: dict[str, np.ndarray]) -> Path:
    """The models side by side (a PNG with matplotlib, else an ``.npz`` of the arrays)."""
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        path = path.with_suffix(".npz")
        np.savez(path, **models)
        return path
    fig, axes = plt.subplots(1, len(models), figsize=(4 * len(models), 3.6), constrained_layout=True)
    lo, hi = min(m.min() for m in models.values()), max(m.max() for m in models.values())
    for ax, (title, m) in zip(axes, models.items(), strict=True):
        image = ax.imshow(m, vmin=lo, vmax=hi, cmap="viridis", extent=(0, m.shape[1] * H, m.shape[0] * H, 0))
        ax.set_title(title)
        ax.set_xlabel("x (m)")
    axes[0].set_ylabel("depth (m)")
    fig.colorbar(image, ax=list(axes), label="velocity (km/s)")
    fig.savefig(path, dpi=100)
    plt.close(fig)
    return path


def main(argv: Sequence[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=64, help="grid cells per side, sponge included")
    parser.add_argument("--sponge", type=int, default=12, help="absorbing cells along every edge")
    parser.add_argument("--shots", type=int, default=8)
    parser.add_argument("--steps", type=int, default=500)
    parser.add_argument("--iterations", type=int, default=40)
    parser.add_argument("--checkpoint", type=int, default=None)
    parser.add_argument("--out", type=Path, default=Path("fwi.png"), help="the picture of the three models")
    args = parser.parse_args(argv)

    n, sponge, shots, steps = args.size, args.sponge, args.shots, args.steps
    start = time.perf_counter()
    program = dp.compile(wave_graph(n, sponge, shots, steps, args.checkpoint, True), wrt=["v"], loss="loss")
    print(f"compiled {steps} steps of {shots} shots on {n}x{n} in {time.perf_counter() - start:.2f} s")
    f, truth, v0 = ricker(steps), true_model(n), starting_model(n)
    forward = dp.compile(wave_graph(n, sponge, shots, steps, None, False))  # the same step: its body is reused
    gain = damping(n, sponge)
    observed = forward.run(v=truth, f=f, gain=gain)["data"]
    weight = 1.0 / np.linalg.norm(observed - forward.run(v=v0, f=f, gain=gain)["data"])  # starting misfit 0.5
    fixed = {"f": f, "gain": gain, "obs": weight * observed, "weight": np.float64(weight)}
    fun = dps.objective(program, **fixed)
    history: list[float] = []

    def report(x: np.ndarray) -> None:
        history.append(float(program.run(v=x.reshape(n, n), **fixed)["loss"]))
        error = relative_error(x.reshape(n, n), truth, sponge)
        print(f"iteration {len(history):3d}: misfit {history[-1]:.6e}, relative model error {error:.4f}")

    first = float(program.run(v=v0, **fixed)["loss"])
    print(f"iteration   0: misfit {first:.6e}, relative model error {relative_error(v0, truth, sponge):.4f}")
    start = time.perf_counter()
    result = optimize.minimize(
        fun, fun.x0(v=v0), jac=True, method="L-BFGS-B", bounds=[V_BOUNDS] * (n * n), callback=report,
        options={"maxiter": args.iterations},
    )  # fmt: skip
    seconds = time.perf_counter() - start
    print(f"L-BFGS-B: {result.nit} iterations, {result.nfev} evaluations in {seconds:.1f} s: {result.message}")
    recovered = result.x.reshape(n, n)
    inner = (slice(sponge, n - sponge),) * 2
    picture = save_picture(args.out, {"true": truth[inner], "starting": v0[inner], "recovered": recovered[inner]})
    print(f"wrote {picture}")
    return {
        "initial_misfit": first,
        "final_misfit": history[-1] if history else first,
        "initial_error": relative_error(v0, truth, sponge),
        "final_error": relative_error(recovered, truth, sponge),
        "iterations": int(result.nit),
        "seconds": seconds,
        "picture": picture,
    }


if __name__ == "__main__":
    main()

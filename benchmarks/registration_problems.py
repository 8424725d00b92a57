"""Registration benchmark problems in 2-D and 3-D: images, fields, the dpt_ir graphs and the
PyTorch ``grid_sample`` steps (`benchmarks/bench_registration.py` times them).

One step is the loss and its gradient wrt the displacement field ``u`` (d, *shape), float32,
of ``0.5 * ||warp(moving, grid + u) - fixed||² + smoothness * ||D u||²`` (``D``: forward
differences along every image axis). Geometry: scipy/dpt_ir coordinates are pixel indices
``(axis 0, axis 1, ...)``; ``grid_sample`` takes normalised ``(x, y[, z])`` = the axes in
reverse, in ``[-1, 1]``; with ``align_corners=True`` -1 and 1 are the corner pixels' centres
and ``padding_mode="border"`` is scipy's ``nearest`` for a linear interpolant.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import scipy.ndimage as ndi
import torch
import torch.nn.functional as tf

import dpt_ir as dp

Step = Callable[[], tuple[float, np.ndarray]]
BLOBS = ((0.35, 0.4, 0.5, 0.12, 1.0), (0.65, 0.6, 0.4, 0.09, 0.8), (0.55, 0.28, 0.6, 0.06, 0.6))


def blobs(n: int, dims: int) -> np.ndarray:
    """A smooth test image: a few Gaussian blobs (2-D: as in examples/registration.py)."""
    axes = np.mgrid[(slice(0, n),) * dims] / n  # axes[0]: rows (y), axes[1]: columns (x), ...
    img = np.zeros((n,) * dims)
    for cx, cy, cz, s, a in BLOBS:
        centre = (cy, cx, cz)[:dims]
        img += a * np.exp(-sum((axes[k] - centre[k]) ** 2 for k in range(dims)) / (2 * s * s))
    return img


def problem(n: int, rng: np.random.Generator, dims: int = 2) -> dict[str, np.ndarray]:
    """float32 inputs: a moving image warped by a smooth field, and a random smooth ``u``
    of a few pixels (some samples leave the image, exercising the border)."""
    fixed = blobs(n, dims)
    grid = np.indices((n,) * dims, dtype=np.float64)
    axes = np.mgrid[(slice(0, n),) * dims] / n
    y, x = axes[0], axes[1]
    truth = [np.sin(2 * np.pi * x) * np.cos(np.pi * y), np.cos(np.pi * x) * np.sin(2 * np.pi * y)]
    if dims == 3:
        truth.append(np.sin(np.pi * axes[2]) * np.cos(np.pi * x))
    moving = ndi.map_coordinates(fixed, grid - (n / 20) * np.stack(truth), order=3, mode="nearest")
    u = ndi.gaussian_filter(rng.normal(size=(dims,) + (n,) * dims), (0,) + (4,) * dims) * n / 4
    return {k: v.astype(np.float32) for k, v in {"u": u, "grid": grid, "moving": moving, "fixed": fixed}.items()}


def _differences(u: dp.Tensor, dims: int) -> dp.Tensor:
    total = None
    for a in range(1, dims + 1):
        hi = tuple(slice(1, None) if k == a else slice(None) for k in range(dims + 1))
        lo = tuple(slice(None, -1) if k == a else slice(None) for k in range(dims + 1))
        term = dp.sum(dp.square(u[hi] - u[lo]))
        total = term if total is None else total + term
    return total


def build(n: int, order: int, smoothness: float, dims: int = 2) -> dp.Graph:
    """The step's graph (the loss; compile it with ``wrt=["u"]``)."""
    shape = (n,) * dims
    g = dp.GraphBuilder(f"bench_registration_o{order}" + ("" if dims == 2 else f"_{dims}d"))
    u = g.input("u", (dims, *shape), "float32")
    grid = g.input("grid", (dims, *shape), "float32", requires_grad=False)
    moving = g.input("moving", shape, "float32", requires_grad=False)
    fixed = g.input("fixed", shape, "float32", requires_grad=False)
    warped = dp.map_coordinates(moving, grid + u, order=order, mode="nearest")
    ssd = 0.5 * dp.sum(dp.square(warped - fixed))
    g.output("loss", ssd + smoothness * _differences(u, dims))
    return g.build()


def build_warp(n: int, order: int, dims: int = 2) -> dp.Graph:
    """The forward warp alone, prefilter included: ``map_coordinates(moving, coords)``."""
    shape = (n,) * dims
    g = dp.GraphBuilder(f"bench_warp_o{order}_{dims}d")
    coords = g.input("coords", (dims, *shape), "float32", requires_grad=False)
    moving = g.input("moving", shape, "float32", requires_grad=False)
    g.output("warped", dp.map_coordinates(moving, coords, order=order, mode="nearest"))
    return g.build()


def dpt_step(program: dp.Program, inputs: dict[str, np.ndarray]) -> Step:
    def step() -> tuple[float, np.ndarray]:
        out, grads = program.value_and_grad(**inputs)
        return float(out["loss"]), grads["u"]

    return step


def torch_loss(inputs: dict[str, np.ndarray], smoothness: float) -> Callable[[torch.Tensor], torch.Tensor]:
    """The loss of ``u`` with ``grid_sample`` (bilinear/trilinear, border, align_corners=True)."""
    dims = inputs["u"].shape[0]
    n = inputs["moving"].shape[0]
    moving = torch.from_numpy(inputs["moving"])[None, None]
    fixed = torch.from_numpy(inputs["fixed"])
    grid = torch.from_numpy(inputs["grid"])
    scale = 2.0 / (n - 1)

    def loss(u: torch.Tensor) -> torch.Tensor:
        coords = grid + u
        xyz = torch.stack([coords[dims - 1 - k] * scale - 1.0 for k in range(dims)], dim=-1)[None]
        warped = tf.grid_sample(moving, xyz, mode="bilinear", padding_mode="border", align_corners=True)[0, 0]
        total = 0.5 * torch.sum(torch.square(warped - fixed))
        smooth = None
        for a in range(1, dims + 1):
            term = torch.sum(torch.square(torch.diff(u, dim=a)))
            smooth = term if smooth is None else smooth + term
        return total + smoothness * smooth

    return loss


def torch_step(inputs: dict[str, np.ndarray], loss: Callable[[torch.Tensor], torch.Tensor]) -> Step:
    """``loss`` and its gradient wrt ``u`` with ``torch.autograd.grad``."""
    u = torch.from_numpy(inputs["u"]).clone().requires_grad_(True)

    def step() -> tuple[float, np.ndarray]:
        value = loss(u)
        (grad,) = torch.autograd.grad(value, u)
        return float(value.detach()), grad.numpy()

    return step

"""Shared inputs of the resampling tests: a phantom made in code, coordinates reaching
beyond every edge, and graphs of one resampling function."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

import dpt_ir as dp


def phantom(n: int) -> np.ndarray:
    """A Shepp-Logan-like phantom (ellipses of different densities), zero outside the
    inscribed circle (what radon with circle=True expects)."""
    y, x = np.mgrid[:n, :n]
    u, v = (x - n // 2) / (n / 2), (y - n // 2) / (n / 2)
    img = np.zeros((n, n))
    for cx, cy, a, b, value in (
        (0, 0, 0.69, 0.92, 1.0),
        (0, -0.02, 0.66, 0.87, -0.6),
        (0.22, 0, 0.11, 0.31, 0.3),
        (-0.22, 0, 0.16, 0.41, 0.3),
        (0, 0.35, 0.21, 0.25, 0.2),
        (0.1, -0.6, 0.05, 0.05, 0.4),
    ):
        img[((u - cx) / a) ** 2 + ((v - cy) / b) ** 2 <= 1] += value
    img[u**2 + v**2 > ((n // 2) / (n / 2)) ** 2] = 0.0
    return img


def coordinates(rng: np.random.Generator, shape: tuple[int, ...], out: tuple[int, ...]) -> np.ndarray:
    """Coordinates inside, near and beyond every edge (but not on an integer or an edge,
    where a spline is not differentiable)."""
    return np.stack([rng.uniform(-0.6 * n - 1, 1.6 * n + 1, size=out) for n in shape]) + 1e-3


def unary(shape: tuple[int, ...], fn: Callable[[dp.Tensor], dp.Tensor], dtype: str = "float64") -> dp.Graph:
    g = dp.GraphBuilder("resample")
    x = g.input("x", shape, dtype)
    g.output("y", fn(x))
    return g.build()


def apply(fn: Callable[[dp.Tensor], dp.Tensor], x0: np.ndarray) -> np.ndarray:
    return dp.interpret(unary(x0.shape, fn, str(x0.dtype)), x=x0)["y"]

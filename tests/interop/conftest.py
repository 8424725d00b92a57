"""Shared fixtures of the interop tests: three small float64 graphs, each compiled once per
session, and their inputs.

- ``pair``: two differentiable inputs ``a``, ``b`` and a fixed one ``w``; a scalar loss,
  an array output and a bool output (so cotangents can fall on any subset).
- ``pipeline``: the transmission imaging pipeline of ``examples/transmission_pipeline.py``
  (Beer-Lambert, Gaussian blur, masked weighted Poisson deviance) at 8x8.
- ``deconv``: Gaussian deconvolution with a finite-difference smoothness term.

`require` imports an optional adapter or skips the test module with the adapter's own
ImportError message, which names the extra to install.
"""

from __future__ import annotations

import importlib
from types import ModuleType

import numpy as np
import pytest

import dpt_ir as dp

PAIR_SHAPE = (3, 4)
PIPELINE_SHAPE = (8, 8)
DECONV_SHAPE = (8, 8)
DECONV_SIGMA = 1.0
DECONV_SMOOTHNESS = 0.05


def require(module: str) -> ModuleType:
    """Import ``module`` (e.g. ``dpt_ir.torch``), or skip with its ImportError's message."""
    try:
        return importlib.import_module(module)
    except ImportError as exc:
        pytest.skip(str(exc), allow_module_level=True)


def pair_graph() -> dp.Graph:
    """``loss = sum(w exp(a) b) + sum(a^2)``, ``c = a sin(b)``, ``above = a > b``."""
    g = dp.GraphBuilder("interop_pair")
    a = g.input("a", PAIR_SHAPE, dtype="float64")
    b = g.input("b", PAIR_SHAPE, dtype="float64")
    w = g.input("w", PAIR_SHAPE, dtype="float64", requires_grad=False)
    g.output("loss", dp.sum(w * dp.exp(a) * b) + dp.sum(dp.square(a)))
    g.output("c", a * dp.sin(b))
    g.output("above", a > b)
    return g.build()


def pair_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {k: rng.uniform(-1.0, 1.0, PAIR_SHAPE) for k in ("a", "b", "w")}


def pipeline_graph() -> dp.Graph:
    """examples/transmission_pipeline.py's model, in float64 at 8x8."""
    g = dp.GraphBuilder("interop_pipeline")
    mu = g.input("mu", PIPELINE_SHAPE, dtype="float64")
    counts = g.input("counts", PIPELINE_SHAPE, dtype="float64", requires_grad=False)
    weights = g.input("weights", PIPELINE_SHAPE, dtype="float64", requires_grad=False)
    mask = g.input("mask", PIPELINE_SHAPE, dtype="uint8", requires_grad=False)
    expected = dp.gaussian_filter(400.0 * dp.exp(-mu), 1.5, mode="reflect")
    g.output("loss", dp.poisson_deviance(expected, counts, weights=weights, mask=mask, reduction="mean"))
    return g.build()


def pipeline_inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    mask = (rng.random(PIPELINE_SHAPE) > 0.1).astype(np.uint8)
    counts = rng.poisson(300.0, PIPELINE_SHAPE).astype(np.float64)
    counts[mask == 0] = np.nan  # dead pixels: the mask must keep them out
    return {
        "mu": rng.uniform(0.1, 0.8, PIPELINE_SHAPE),
        "counts": counts,
        "weights": rng.uniform(0.8, 1.2, PIPELINE_SHAPE),
        "mask": mask,
    }


def deconv_graph() -> dp.Graph:
    """``sum((gaussian_filter(x) - y)^2) + s * sum(|gradient(x)|^2)``; zero boundary (an
    object on a dark background; the constant mode also compiles in half the time of reflect)."""
    g = dp.GraphBuilder("interop_deconv")
    x = g.input("x", DECONV_SHAPE, dtype="float64")
    y = g.input("y", DECONV_SHAPE, dtype="float64", requires_grad=False)
    gy, gx = dp.gradient(x)
    smooth = dp.sum(dp.square(gy)) + dp.sum(dp.square(gx))
    fit = dp.sum(dp.square(dp.gaussian_filter(x, DECONV_SIGMA, mode="constant") - y))
    g.output("loss", fit + DECONV_SMOOTHNESS * smooth)
    return g.build()


@pytest.fixture(scope="session")
def pair_program() -> dp.Program:
    return dp.compile(pair_graph(), wrt=["a", "b"], loss="loss", device="cpu")


@pytest.fixture(scope="session")
def pipeline_program() -> dp.Program:
    return dp.compile(pipeline_graph(), wrt=["mu"], device="cpu")


@pytest.fixture(scope="session")
def deconv_program() -> dp.Program:
    return dp.compile(deconv_graph(), wrt=["x"], device="cpu")

"""The benchmark cases of `dpt-ir bench`: a graph, its inputs and the input to differentiate.

Each case builds a float32 `dp.Graph` with one scalar output ``loss`` at a 2-D ``shape``
and draws its inputs (float32 NumPy arrays, the imaging mask uint8) from a seeded
generator, so every contender of a run sees the same data. The peers (`peers_numpy`,
`peers_torch`, `peers_jax`) implement each case under the same name, taking the same
keyword inputs.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import dpt_ir as dp
from benchmarks import graphs

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.append(str(EXAMPLES))

import transmission_pipeline as pipeline  # noqa: E402

Shape = tuple[int, int]
Inputs = dict[str, np.ndarray]


@dataclass(frozen=True)
class Case:
    """One benchmark graph: ``build(shape)`` gives the graph, ``inputs(shape, rng)`` its
    inputs, ``wrt`` the input whose gradient every contender computes."""

    name: str
    title: str
    build: Callable[[Shape], dp.Graph]
    inputs: Callable[[Shape, np.random.Generator], Inputs]
    wrt: str


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def _beer_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    return {
        "x": _f32(rng.uniform(0.5, 2.0, shape)),
        "obs": _f32(rng.uniform(0.1, 0.6, shape)),
        "w": _f32(rng.uniform(0.5, 1.5, shape)),
    }


def _chain_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    return {"x": _f32(rng.uniform(-1.0, 1.0, shape))}


def _xent_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    t = rng.uniform(0.0, 1.0, shape)
    return {"z": _f32(rng.normal(0.0, 2.0, shape)), "t": _f32(t / t.sum(axis=1, keepdims=True))}


def _normalisation_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    return {"x": _f32(rng.normal(0.0, 1.0, shape)), "w": _f32(rng.uniform(0.5, 1.5, shape))}


def _imaging_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    return {"mu": _f32(0.5 * pipeline.phantom(shape)), **pipeline.simulate(shape, rng)}


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case("beer", "Beer-Lambert + weighted squared error", graphs.beer, _beer_inputs, "x"),
        Case("chain16", "16 elementwise ops + sum", graphs.chain16, _chain_inputs, "x"),
        Case("softmax_xent", "softmax cross-entropy over rows", graphs.softmax_xent, _xent_inputs, "z"),
        Case("normalisation", "row normalisation, two reductions", graphs.normalisation, _normalisation_inputs, "x"),
        Case("imaging", "transmission pipeline: blur, Poisson deviance", pipeline.build, _imaging_inputs, "mu"),
    )
}

# Constants of the imaging case, for the peers.
IMAGING_I0 = pipeline.I0
IMAGING_SIGMA = pipeline.SIGMA


def gaussian_weights(sigma: float = IMAGING_SIGMA) -> np.ndarray:
    """The 1-D Gaussian taps dpt_ir and scipy use (radius ``int(4 sigma + 0.5)``), float64."""
    return np.asarray(dp.imaging.gaussian_kernel1d(sigma), dtype=np.float64)


def symmetric_index(n: int, radius: int) -> np.ndarray:
    """Indices of scipy's ``reflect`` extension (NumPy's ``symmetric`` pad) of an axis of
    length ``n`` by ``radius`` on each side."""
    return np.pad(np.arange(n), radius, mode="symmetric")

"""The data of the benchmark cases that needs no dpt_ir: the imaging constants, the Gaussian
taps, scipy's ``reflect`` indices, and the seeded input generators of the four array cases.

Assumes NumPy only, so the peers (`peers_torch`, `peers_jax`) import it on a machine without
dpt_ir or warp-lang (`benchmarks/gpu_check.py --peers`). Guarantees: the values are the ones
dpt_ir uses (`benchmarks.cases` builds its cases from them, and tests/bench_suite checks the
constants and taps against `examples/transmission_pipeline.py` and `dp.imaging`).
"""

from __future__ import annotations

import numpy as np

Shape = tuple[int, int]
Inputs = dict[str, np.ndarray]

IMAGING_I0 = 400.0  # photons per pixel without attenuation (transmission_pipeline.I0)
IMAGING_SIGMA = 1.5  # the blur's sigma (transmission_pipeline.SIGMA)


def gaussian_weights(sigma: float = IMAGING_SIGMA, truncate: float = 4.0) -> np.ndarray:
    """The normalised 1-D Gaussian taps dpt_ir and scipy use (radius ``int(truncate sigma + 0.5)``),
    float64."""
    radius = int(truncate * float(sigma) + 0.5)
    t = np.arange(-radius, radius + 1, dtype=np.float64)
    phi = np.exp(-0.5 / (float(sigma) ** 2) * t * t)
    return phi / phi.sum()


def symmetric_index(n: int, radius: int) -> np.ndarray:
    """Indices of scipy's ``reflect`` extension (NumPy's ``symmetric`` pad) of an axis of
    length ``n`` by ``radius`` on each side."""
    return np.pad(np.arange(n), radius, mode="symmetric")


def _f32(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a, dtype=np.float32)


def beer_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    return {
        "x": _f32(rng.uniform(0.5, 2.0, shape)),
        "obs": _f32(rng.uniform(0.1, 0.6, shape)),
        "w": _f32(rng.uniform(0.5, 1.5, shape)),
    }


def chain_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    return {"x": _f32(rng.uniform(-1.0, 1.0, shape))}


def xent_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    t = rng.uniform(0.0, 1.0, shape)
    return {"z": _f32(rng.normal(0.0, 2.0, shape)), "t": _f32(t / t.sum(axis=1, keepdims=True))}


def normalisation_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    return {"x": _f32(rng.normal(0.0, 1.0, shape)), "w": _f32(rng.uniform(0.5, 1.5, shape))}

"""The benchmark cases of `dpt-ir bench`: a graph, its inputs and the input to differentiate.

Each case builds a float32 `dp.Graph` with one scalar output ``loss`` at a 2-D ``shape``
and draws its inputs (float32 NumPy arrays, the imaging mask uint8) from a seeded
generator, so every contender of a run sees the same data. The peers (`peers_numpy`,
`peers_torch`, `peers_jax`) implement each case under the same name, taking the same
keyword inputs. The data that needs no dpt_ir (imaging constants, taps, the array cases'
input generators) lives in `benchmarks.case_data` and is re-exported here.
"""

from __future__ import annotations

import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import numpy as np

import dpt_ir as dp
from benchmarks import graphs
from benchmarks.case_data import (  # noqa: F401 (re-exported: the imaging constants and helpers)
    IMAGING_I0,
    IMAGING_SIGMA,
    Inputs,
    Shape,
    beer_inputs,
    chain_inputs,
    gaussian_weights,
    normalisation_inputs,
    symmetric_index,
    xent_inputs,
)

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.append(str(EXAMPLES))

import transmission_pipeline as pipeline  # noqa: E402


@dataclass(frozen=True)
class Case:
    """One benchmark graph: ``build(shape)`` gives the graph, ``inputs(shape, rng)`` its
    inputs, ``wrt`` the input whose gradient every contender computes."""

    name: str
    title: str
    build: Callable[[Shape], dp.Graph]
    inputs: Callable[[Shape, np.random.Generator], Inputs]
    wrt: str


def _imaging_inputs(shape: Shape, rng: np.random.Generator) -> Inputs:
    mu = np.ascontiguousarray(0.5 * pipeline.phantom(shape), dtype=np.float32)
    return {"mu": mu, **pipeline.simulate(shape, rng)}


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case("beer", "Beer-Lambert + weighted squared error", graphs.beer, beer_inputs, "x"),
        Case("chain16", "16 elementwise ops + sum", graphs.chain16, chain_inputs, "x"),
        Case("softmax_xent", "softmax cross-entropy over rows", graphs.softmax_xent, xent_inputs, "z"),
        Case("normalisation", "row normalisation, two reductions", graphs.normalisation, normalisation_inputs, "x"),
        Case("imaging", "transmission pipeline: blur, Poisson deviance", pipeline.build, _imaging_inputs, "mu"),
    )
}

"""Hand-written test graphs for the pass tests, each with an input generator and the
inputs to differentiate.

`CASES` maps a name to a `Case`; every graph is small (8x6 and friends), float64 (so
gradients compare to 1e-10) and has a scalar float output ``loss``. The four benchmark
graphs come from `benchmarks.graphs` at a small shape.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import cached_property

import numpy as np

import dpt_ir as dp
from benchmarks import graphs as bench

SHAPE = (8, 6)
F64 = "float64"
Inputs = dict[str, np.ndarray]


@dataclass(frozen=True)
class Case:
    """A named graph, how to draw inputs for it, and the inputs to differentiate."""

    name: str
    build: Callable[[], dp.Graph]
    make_inputs: Callable[[np.random.Generator], Inputs]
    wrt: tuple[str, ...]

    @cached_property
    def graph(self) -> dp.Graph:
        return self.build()

    def inputs(self, seed: int = 0) -> Inputs:
        return self.make_inputs(np.random.default_rng(seed))


def _uniform(rng: np.random.Generator, lo: float, hi: float, shape: tuple[int, ...] = SHAPE) -> np.ndarray:
    return rng.uniform(lo, hi, shape)


# -- graphs --------------------------------------------------------------------------------
def mean_count() -> dp.Graph:
    """A mean whose backward needs only the element count: nothing else to save."""
    g = dp.GraphBuilder("mean_count")
    x = g.input("x", SHAPE, F64)
    obs = g.input("obs", SHAPE, F64, requires_grad=False)
    g.output("loss", dp.mean(dp.square(x - obs)))
    return g.build()


def exp_minus_max() -> dp.Graph:
    """``exp(x - max(x))``: recomputing the exp in the backward would need the reduction."""
    g = dp.GraphBuilder("exp_minus_max")
    x = g.input("x", SHAPE, F64)
    w = g.input("w", SHAPE, F64, requires_grad=False)
    y = dp.exp(x - dp.max(x, axis=1, keepdims=True))
    g.output("loss", dp.sum(y * w))
    return g.build()


def broadcasting() -> dp.Graph:
    """A matrix combined with a row vector and a column vector."""
    g = dp.GraphBuilder("broadcasting")
    x = g.input("x", SHAPE, F64)
    row = g.input("row", (SHAPE[1],), F64)
    col = g.input("col", (SHAPE[0], 1), F64)
    g.output("loss", dp.sum(dp.square(x * row + col) - col))
    return g.build()


def shape_ops() -> dp.Graph:
    """Transpose, a slice with a negative step, concatenation and reshape."""
    g = dp.GraphBuilder("shape_ops")
    x = g.input("x", SHAPE, F64)
    y = g.input("y", (SHAPE[0], 2), F64)
    flipped = x[::-1, 1:5]
    joined = dp.concatenate([flipped, y], axis=1)
    g.output("loss", dp.sum(dp.transpose(x) * dp.reshape(joined, (SHAPE[1], SHAPE[0]))))
    return g.build()


def where_clamp() -> dp.Graph:
    """Piecewise ops: where, clamp and maximum."""
    g = dp.GraphBuilder("where_clamp")
    x = g.input("x", SHAPE, F64)
    y = g.input("y", SHAPE, F64)
    leaky = dp.where(x > 0, x, 0.1 * x)
    g.output("loss", dp.sum(dp.maximum(leaky, dp.clamp(y, -0.5, 0.5)) * x))
    return g.build()


def two_outputs() -> dp.Graph:
    """A prediction image and a scalar loss on it, both outputs."""
    g = dp.GraphBuilder("two_outputs")
    x = g.input("x", SHAPE, F64)
    obs = g.input("obs", SHAPE, F64, requires_grad=False)
    pred = 2.0 * dp.tanh(x)
    g.output("pred", pred)
    g.output("loss", dp.sum(dp.square(pred - obs)))
    return g.build()


def identities() -> dp.Graph:
    """Algebraic identities and constant arithmetic for canonicalize to remove."""
    g = dp.GraphBuilder("identities")
    x = g.input("x", SHAPE, F64)
    six = g.constant(2.0, F64) * g.constant(3.0, F64)
    a = dp.negative(-((1.0 * (x * 1.0) + 0.0) - 0.0))
    g.output("loss", dp.sum(dp.square(a / 1.0) * six))
    return g.build()


def row_divide() -> dp.Graph:
    """Divisions by per-row values, implicitly broadcast and through a view chain (for
    `reciprocal`), beside a same-shape division (left as it is)."""
    g = dp.GraphBuilder("row_divide")
    x = g.input("x", SHAPE, F64)
    s = g.input("s", (SHAPE[0],), F64)
    w = g.input("w", SHAPE, F64, requires_grad=False)
    col = dp.reshape(s, (SHAPE[0], 1))
    viewed = x / dp.broadcast_to(col, SHAPE)
    g.output("loss", dp.sum(dp.square(viewed) + x / col + x / w))
    return g.build()


# -- inputs --------------------------------------------------------------------------------
def _beer_inputs(rng: np.random.Generator) -> Inputs:
    return {"x": _uniform(rng, 0.5, 2.0), "obs": _uniform(rng, 0.1, 0.6), "w": _uniform(rng, 0.5, 1.5)}


def _xent_inputs(rng: np.random.Generator) -> Inputs:
    t = rng.uniform(0.0, 1.0, SHAPE)
    return {"z": rng.normal(0.0, 2.0, SHAPE), "t": t / t.sum(axis=1, keepdims=True)}


def _x_w(rng: np.random.Generator) -> Inputs:
    return {"x": rng.normal(0.0, 1.0, SHAPE), "w": _uniform(rng, 0.5, 1.5)}


def _x_obs(rng: np.random.Generator) -> Inputs:
    return {"x": rng.normal(0.0, 1.0, SHAPE), "obs": rng.normal(0.0, 1.0, SHAPE)}


def _x_only(rng: np.random.Generator) -> Inputs:
    return {"x": _uniform(rng, -1.0, 1.0)}


def _broadcast_inputs(rng: np.random.Generator) -> Inputs:
    return {
        "x": rng.normal(0.0, 1.0, SHAPE),
        "row": rng.normal(0.0, 1.0, (SHAPE[1],)),
        "col": rng.normal(0.0, 1.0, (SHAPE[0], 1)),
    }


def _row_divide_inputs(rng: np.random.Generator) -> Inputs:
    return {"x": rng.normal(0.0, 1.0, SHAPE), "s": _uniform(rng, 0.5, 2.0, (SHAPE[0],)), "w": _uniform(rng, 0.5, 2.0)}


def _shape_inputs(rng: np.random.Generator) -> Inputs:
    return {"x": rng.normal(0.0, 1.0, SHAPE), "y": rng.normal(0.0, 1.0, (SHAPE[0], 2))}


def _where_inputs(rng: np.random.Generator) -> Inputs:
    return {"x": rng.normal(0.0, 1.0, SHAPE), "y": rng.normal(0.0, 1.0, SHAPE)}


CASES: dict[str, Case] = {
    c.name: c
    for c in (
        Case("beer", lambda: bench.beer(SHAPE, F64), _beer_inputs, ("x",)),
        Case("chain16", lambda: bench.chain16(SHAPE, F64), _x_only, ("x",)),
        Case("softmax_xent", lambda: bench.softmax_xent(SHAPE, F64), _xent_inputs, ("z",)),
        Case("normalisation", lambda: bench.normalisation(SHAPE, F64), _x_w, ("x",)),
        Case("mean_count", mean_count, _x_obs, ("x",)),
        Case("exp_minus_max", exp_minus_max, _x_w, ("x",)),
        Case("broadcasting", broadcasting, _broadcast_inputs, ("x", "row", "col")),
        Case("shape_ops", shape_ops, _shape_inputs, ("x", "y")),
        Case("where_clamp", where_clamp, _where_inputs, ("x", "y")),
        Case("two_outputs", two_outputs, _x_obs, ("x",)),
        Case("identities", identities, _x_only, ("x",)),
        Case("row_divide", row_divide, _row_divide_inputs, ("x", "s")),
    )
}

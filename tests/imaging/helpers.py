"""Shared helpers of the imaging tests: one-input graphs evaluated by the interpreter,
scipy-compatible weights and origins, and tolerance-aware comparisons."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

import dpt_ir as dp

MODES: tuple[str, ...] = ("reflect", "constant", "nearest", "mirror", "wrap")
ALIASES: dict[str, str] = {"grid-mirror": "reflect", "grid-constant": "constant", "grid-wrap": "wrap"}


def unary_graph(shape: tuple[int, ...], fn: Callable[[dp.Tensor], dp.Tensor], dtype: str = "float64") -> dp.Graph:
    """A graph with one input ``x`` of ``shape`` and one output ``y = fn(x)``."""
    g = dp.GraphBuilder("imaging")
    x = g.input("x", shape, dtype)
    g.output("y", fn(x))
    return g.build()


def interpret_unary(fn: Callable[[dp.Tensor], dp.Tensor], x0: np.ndarray) -> np.ndarray:
    """``fn`` applied to ``x0`` by the reference interpreter."""
    graph = unary_graph(x0.shape, fn, str(x0.dtype))
    return dp.interpret(graph, x=x0)["y"]


def full_rank(weights: np.ndarray, ndim: int) -> np.ndarray:
    """``weights`` with leading axes of size 1 added up to ``ndim`` (what scipy needs for
    weights that apply to the trailing axes of the input)."""
    return weights.reshape((1,) * (ndim - weights.ndim) + weights.shape)


def full_origin(origin: Sequence[int], ndim: int) -> tuple[int, ...]:
    """A per-axis origin of the weights' rank, padded with 0 for the leading axes."""
    return (0,) * (ndim - len(origin)) + tuple(origin)


def assert_close(actual: np.ndarray, expected: np.ndarray, rtol: float = 1e-10) -> None:
    """``actual`` equals ``expected`` to ``rtol``, with an absolute floor of ``rtol`` times
    the magnitude of ``expected`` (so entries near zero are not compared to themselves)."""
    expected = np.asarray(expected)
    assert np.shape(actual) == expected.shape, (np.shape(actual), expected.shape)
    scale = float(np.max(np.abs(expected))) if expected.size else 0.0
    np.testing.assert_allclose(actual, expected, rtol=rtol, atol=rtol * max(scale, 1e-300))

"""Gradients of the resampling family in the interpreter: the adjoint ops are the exact
transposes (dot tests ``<A x, y> = <x, Aᵀ y>`` to 1e-11 in float64) and interpreter
gradients agree with central finite differences."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.reference.resample_ref import MODES
from tests.resample.cases import coordinates, phantom

Fn = Callable[[dp.Tensor], dp.Tensor]


def _weighted(shape: tuple[int, ...], fn: Fn, w0: np.ndarray) -> dp.Graph:
    g = dp.GraphBuilder("adjoint")
    x = g.input("x", shape, "float64")
    w = g.input("w", w0.shape, "float64", requires_grad=False)
    y = fn(x)
    g.output("y", y)
    g.output("loss", dp.sum(w * y))
    return g.build()


def dot_test(fn: Fn, x0: np.ndarray, rng: np.random.Generator) -> None:
    """``<A x, w> == <x, Aᵀ w>`` with ``Aᵀ w`` the interpreter's gradient of ``sum(w * A x)``."""
    y_shape = dp.interpret(_weighted(x0.shape, fn, np.zeros(1)), x=x0, w=np.zeros(1))["y"].shape
    w0 = rng.normal(size=y_shape)
    graph = _weighted(x0.shape, fn, w0)
    ax = dp.interpret(graph, x=x0, w=w0)["y"]
    atw = dp.interpret_grad(graph, ["x"], x=x0, w=w0)["x"]
    lhs, rhs = float(np.sum(ax * w0)), float(np.sum(x0 * atw))
    assert abs(lhs - rhs) <= 1e-11 * max(abs(lhs), np.linalg.norm(ax) * np.linalg.norm(w0) * 1e-3), (lhs, rhs)


@pytest.mark.parametrize("mode", MODES)
def test_spline_filter_ops_are_transposes(mode: str) -> None:
    rng = np.random.default_rng(MODES.index(mode))
    x0 = rng.normal(size=(9, 10))
    dot_test(lambda x: dp.spline_filter(x, mode=mode), x0, rng)
    npad = 12 if mode in ("nearest", "grid-constant") else 0
    dot_test(lambda x: x.builder.emit("spline_filter1d", [x], {"axis": 1, "mode": mode, "npad": npad}), x0, rng)


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", [1, 3])
def test_map_coordinates_dot_test(order: int, mode: str) -> None:
    rng = np.random.default_rng(order + 7 * MODES.index(mode))
    x0 = rng.normal(size=(8, 9))
    c = coordinates(rng, x0.shape, (6, 7))
    dot_test(lambda x: dp.map_coordinates(x, c, order=order, mode=mode), x0, rng)


def test_radon_and_transforms_dot_test() -> None:
    rng = np.random.default_rng(11)
    img = phantom(16) + 0.1 * rng.normal(size=(16, 16))
    for circle in (True, False):
        dot_test(lambda x, circle=circle: dp.radon(x, np.linspace(0, 180, 9, endpoint=False), circle=circle), img, rng)
    dot_test(lambda x: dp.rotate(x, 21.0, mode="mirror"), img, rng)
    dot_test(lambda x: dp.zoom(x, 0.7, order=1, mode="grid-wrap", grid_mode=True), img, rng)
    dot_test(lambda x: dp.shift(x, (0.3, -1.7), order=0, mode="wrap"), img, rng)


def fd_check(fn: Fn, x0: np.ndarray, rng: np.random.Generator, eps: float = 1e-6) -> None:
    """The interpreter gradient of a nonlinear loss of ``fn(x)`` against central differences."""
    g = dp.GraphBuilder("fd")
    x = g.input("x", x0.shape, "float64")
    y = fn(x)
    g.output("loss", dp.sum(dp.sin(y) * y))
    graph = g.build()
    grad = dp.interpret_grad(graph, ["x"], x=x0)["x"]
    for flat in rng.choice(x0.size, size=6, replace=False):
        e = np.zeros(x0.size)
        e[flat] = eps
        e = e.reshape(x0.shape)
        up, down = dp.interpret(graph, x=x0 + e)["loss"], dp.interpret(graph, x=x0 - e)["loss"]
        fd = (up - down) / (2 * eps)
        assert abs(fd - grad.flat[flat]) <= 1e-6 * max(1.0, abs(fd)), (flat, fd, grad.flat[flat])


def test_interpreter_gradients_match_finite_differences() -> None:
    rng = np.random.default_rng(2)
    x0 = rng.normal(size=(7, 8))
    c = coordinates(rng, x0.shape, (5, 6))
    fd_check(lambda x: dp.map_coordinates(x, c, order=3, mode="grid-constant", cval=0.4), x0, rng)
    fd_check(lambda x: dp.map_coordinates(x, c, order=1, mode="reflect"), x0, rng)
    fd_check(lambda x: dp.affine_transform(x, [[1.1, 0.2], [0.1, 0.9]], [0.5, -0.5], mode="nearest"), x0, rng)
    fd_check(lambda x: dp.radon(x, [0.0, 30.0, 95.0], circle=False), x0, rng)

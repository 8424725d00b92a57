"""Stencils and pads on the C++ path (issue 11): ``correlate_valid`` with constant weights
over ``pad`` in every boundary mode (reflect, constant with a fill, nearest, mirror, wrap),
1-D along each axis and 2-D, with elementwise producers inlined at the taps, and their
adjoints (``pad_adjoint``) in the backward; rows split into an interior (vectorised) and edges
(through the images' tables). Values and gradients against the interpreter, and bit-identical
results for ``threads=1`` and ``threads=2``.

Cost: one graph of 200 x 330 (66,000 elements: two CPU tasks) compiled once per module; the
2-thread program reuses its module.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

from .harness import assert_gradient_close, assert_same_bits, off_cxx

SHAPE = (200, 330)


def stencils() -> dp.Graph:
    g = dp.GraphBuilder("cxx_stencils")
    x = g.input("x", SHAPE, "float32")
    y = dp.exp(-x * 0.5)
    blur = dp.gaussian_filter(y, 1.5, mode="reflect")
    w2 = np.array([[0.0, 1.0, 0.5], [2.0, -1.0, 0.25], [0.5, 0.0, 1.5]])
    b = dp.correlate(x, w2, mode="wrap")
    c = dp.correlate1d(blur, [1.0, -2.0, 0.5], axis=0, mode="nearest")
    d = dp.correlate1d(x * x, [0.25, 0.5, 0.25], axis=1, mode="mirror")
    e = dp.correlate(y, np.ones((2, 3)) / 6.0, mode="constant", cval=0.5)
    g.output("blur", blur)
    g.output("loss", dp.sum(dp.square(b)) + dp.sum(c * d) + dp.mean(e))
    return g.build()


@pytest.fixture(scope="module")
def programs() -> tuple[dp.Program, dp.Program]:
    graph = stencils()
    return dp.compile(graph, wrt=["x"], loss="loss", threads=1), dp.compile(graph, wrt=["x"], loss="loss", threads=2)


def inputs(seed: int) -> dict[str, np.ndarray]:
    return {"x": np.random.default_rng(seed).uniform(-1.0, 1.0, SHAPE).astype(np.float32)}


def test_every_launch_takes_the_cxx_path(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    for name in ("run", "value_and_grad", "tape"):
        plan = one.plans[name]
        off = off_cxx(plan.kernels, plan.module.text)
        assert plan.kernels and not off, (name, off)


def test_values_and_gradients_match_the_interpreter(programs: tuple[dp.Program, dp.Program]) -> None:
    one, _ = programs
    ins = inputs(4)
    got, want = one.run(**ins), dp.interpret(one.graph, **ins)
    np.testing.assert_allclose(got["blur"], want["blur"], rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got["loss"], want["loss"], rtol=1e-5)
    assert_gradient_close(one, ins)


def test_one_and_two_threads_are_bit_identical(programs: tuple[dp.Program, dp.Program]) -> None:
    one, two = programs
    assert two.plans["run"].threads == 2
    ins = inputs(5)
    assert_same_bits(one, two, ins)

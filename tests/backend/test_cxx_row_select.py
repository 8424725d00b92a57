"""A per-axis view that reads one input row and the fill elsewhere (the gradient of
``u[:, r, :]``, an ``embed_slice``) is a select in the element function, not a guard
(`backends.cxx.sites.selected`): its kernel has no edge function, and its values equal the
interpreter's at every row, the selected one and the others."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

LAP = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])


def _graph(mode: str) -> dp.Graph:
    g = dp.GraphBuilder(f"row_select_{mode}")
    u = g.input("u", (2, 9, 11), dtype="float64")
    t = g.input("t", (2, 11), dtype="float64", requires_grad=False)
    w = g.input("w", (2, 9, 11), dtype="float64", requires_grad=False)
    base = u * w if mode == "pointwise" else dp.correlate(u * w, LAP[None], mode="constant")
    g.output("loss", dp.sum(dp.square(base)) + dp.sum(u[:, 3, :] * t))
    return g.build()


@pytest.mark.parametrize("mode", ["pointwise", "stencil"])
def test_one_row_embed_is_a_select(mode: str) -> None:
    graph = _graph(mode)
    program = dp.compile(graph, wrt=["u"], device="cpu", threads=1)
    rng = np.random.default_rng(3)
    x = {"u": rng.normal(size=(2, 9, 11)), "t": rng.normal(size=(2, 11)), "w": rng.normal(size=(2, 9, 11))}
    _, grads = program.value_and_grad(**x)
    np.testing.assert_allclose(grads["u"], dp.interpret_grad(graph, ["u"], **x)["u"], rtol=1e-12, atol=1e-12)
    text = program.plans["value_and_grad"].module.text
    assert "<= 3) ?" in text  # the embed's row, selected in the element function
    if mode == "pointwise":  # no other bounded view: no edge function at all
        assert "_edge" not in text

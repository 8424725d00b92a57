"""A padded axis that is constant along each row is read at a per-row input index (a row image,
`backends.cxx.row_images`), not split by a guard: the first and last rows of a 2-D stencil run the
vectorised element function like every other row. The values equal the interpreter's in every mode
(the fill of a constant pad, the mapped rows of the others), and the rows that fall outside the
interior are the ones checked. Along the row, a constant pad's few elements outside its interior run
an inlined copy of the element function with each read clamped into its row (`row_ends`); the other
modes read mapped columns there and keep the edge function."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

K = np.array([[0.5, 1.0, -0.25], [1.0, -4.0, 2.0], [0.0, 1.5, 0.75]])
MODES = ["constant", "reflect", "nearest", "mirror", "wrap"]


def _graph(mode: str, shape: tuple[int, ...] = (2, 9, 11)) -> dp.Graph:
    g = dp.GraphBuilder(f"row_images_{mode}")
    u = g.input("u", shape, dtype="float64")
    w = g.input("w", shape, dtype="float64", requires_grad=False)
    y = dp.correlate(u * w + 1.0, K[None], mode=mode, cval=0.5)
    g.output("y", y)
    g.output("loss", dp.sum(dp.square(y)))
    return g.build()


@pytest.mark.parametrize("mode", MODES)
def test_rows_outside_the_interior_are_row_images(mode: str) -> None:
    graph = _graph(mode)
    program = dp.compile(graph, wrt=["u"], loss="loss", device="cpu", threads=1)
    rng = np.random.default_rng(5)
    x = {"u": rng.normal(size=(2, 9, 11)), "w": rng.normal(size=(2, 9, 11))}
    out, grads = program.value_and_grad(**x)
    ref = dp.interpret(graph, **x)["y"]
    np.testing.assert_allclose(out["y"], ref, rtol=1e-13, atol=1e-13)
    for row in (0, 8):  # the rows a guard on the row axis sent whole through the edge function
        np.testing.assert_allclose(out["y"][:, row], ref[:, row], rtol=1e-13, atol=1e-13)
    for col in (0, 10):  # the row ends
        np.testing.assert_allclose(out["y"][..., col], ref[..., col], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(grads["u"], dp.interpret_grad(graph, ["u"], **x)["u"], rtol=1e-12, atol=1e-12)
    text = program.plans["run"].module.text
    assert "_ri0[" in text  # the forward's row images
    assert "ok &= (int)(" not in text  # no guard decides a whole row of the forward
    assert ("_ends<" in text) == (mode == "constant")  # the row ends' inlined function, constant pads only


def test_row_ends_are_bit_identical_for_one_and_two_threads() -> None:
    shape = (2, 300, 260)  # several tasks of the fixed partition
    graph = _graph("constant", shape)
    rng = np.random.default_rng(6)
    x = {"u": rng.normal(size=shape), "w": rng.normal(size=shape)}
    results = [dp.compile(graph, wrt=["u"], loss="loss", device="cpu", threads=t).value_and_grad(**x) for t in (1, 2)]
    (o1, g1), (o2, g2) = results
    assert o1["y"].tobytes() == o2["y"].tobytes() and g1["u"].tobytes() == g2["u"].tobytes()

"""A padded axis that is constant along each row is read at a per-row input index (a row image,
`backends.cxx.row_images`), not split by a guard: the first and last rows of a 2-D stencil run the
vectorised element function like every other row. The values equal the interpreter's in every mode
(the fill of a constant pad, the mapped rows of the others), and the rows that fall outside the
interior are the ones checked. Along the row, a constant pad's few elements outside its interior run
an inlined copy of the element function with each read clamped into its row (`row_ends`); the other
modes' ends read their mapped columns through the image tables in an inlined function of their own,
with the rows still row images. An adjoint's rows that sum several
images (the first and last rows of a mapped pad's adjoint, a heat step's reverse) are row images
too, one slot per image, summed in the edge function's order; a row without a second image takes the
element function's instance without the sums (its row class)."""

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
    assert "_ends<" in text  # the row ends' inlined function
    assert ("dp_clampi(j," in text) == (mode == "constant")  # clamped reads (constant), else the columns' tables


def test_row_ends_are_bit_identical_for_one_and_two_threads() -> None:
    shape = (2, 300, 260)  # several tasks of the fixed partition
    graph = _graph("constant", shape)
    rng = np.random.default_rng(6)
    x = {"u": rng.normal(size=shape), "w": rng.normal(size=shape)}
    results = [dp.compile(graph, wrt=["u"], loss="loss", device="cpu", threads=t).value_and_grad(**x) for t in (1, 2)]
    (o1, g1), (o2, g2) = results
    assert o1["y"].tobytes() == o2["y"].tobytes() and g1["u"].tobytes() == g2["u"].tobytes()


def _adjoint_graph(mode: str, before: tuple[int, int], after: tuple[int, int]) -> dp.Graph:
    """A heat step's reverse shape: the adjoint of a mapped pad (summed images at its edges)
    of a constant-padded stencil of a product, as the forward graph itself."""
    g = dp.GraphBuilder(f"row_image_sums_{mode}")
    z = g.input("z", (9, 11), dtype="float64")
    k = g.input("k", (9, 11), dtype="float64", requires_grad=False)
    padded = tuple(n + b + e for n, b, e in zip((9, 11), before, after, strict=True))
    inner = dp.correlate(z * k + 0.25, K, mode="constant")
    c = g.input("c", padded, dtype="float64", requires_grad=False)
    wide = dp.correlate(c * c, K, mode="constant")
    attrs = {"before": list(before), "after": list(after), "mode": mode, "cval": 0.0}
    y = wide.builder.emit("pad_adjoint", [wide], attrs) + inner
    g.output("y", y)
    g.output("loss", dp.sum(dp.square(y)))
    return g.build()


@pytest.mark.parametrize("mode", ["nearest", "reflect", "mirror", "wrap"])
def test_summed_rows_of_an_adjoint_are_row_images(mode: str) -> None:
    graph = _adjoint_graph(mode, (2, 1), (1, 3))
    program = dp.compile(graph, wrt=["z"], loss="loss", device="cpu", threads=1)
    rng = np.random.default_rng(7)
    x = {"z": rng.normal(size=(9, 11)), "k": rng.normal(size=(9, 11)), "c": rng.normal(size=(12, 15))}
    out, grads = program.value_and_grad(**x)
    ref = dp.interpret(graph, **x)["y"]
    for row in (0, 1, 7, 8):  # rows that sum two or more images
        np.testing.assert_allclose(out["y"][row], ref[row], rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(out["y"], ref, rtol=1e-13, atol=1e-13)
    np.testing.assert_allclose(grads["z"], dp.interpret_grad(graph, ["z"], **x)["z"], rtol=1e-12, atol=1e-12)
    text = program.plans["run"].module.text
    assert "rs = rb[" in text and ", false>(" in text  # the row classes
    assert "ok &= (int)(" not in text and "ok = 0;" not in text  # no guard decides a whole row


def _heat_reverse_text(name: str, seed: int) -> str:
    """A heat step's loss on 12 x 10 rows: its gradient checked against the interpreter, and
    the text of its ``value_and_grad`` module (the reverse's nest)."""
    lap = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
    g = dp.GraphBuilder(name)
    u, k = g.input("u", (12, 10)), g.input("k", (12, 10), requires_grad=False)
    g.output("loss", dp.sum(dp.square(u + 0.2 * k * dp.correlate(u, lap, mode="nearest"))))
    graph = g.build()
    program = dp.compile(graph, wrt=["u"], device="cpu", threads=1)
    rng = np.random.default_rng(seed)
    x = {"u": rng.normal(size=(12, 10)).astype(np.float32), "k": rng.uniform(0.5, 1, (12, 10)).astype(np.float32)}
    _, grads = program.value_and_grad(**x)
    np.testing.assert_allclose(grads["u"], dp.interpret_grad(graph, ["u"], **x)["u"], rtol=2e-5, atol=2e-5)
    return program.plans["value_and_grad"].module.text


def test_a_heat_steps_reverse_has_no_whole_row_edges() -> None:
    text = _heat_reverse_text("heat_reverse_rows", 8)
    assert "rs = rb[" in text and "ok &= (int)(" not in text


def test_summed_row_images_are_bit_identical_for_one_and_two_threads() -> None:
    graph = _adjoint_graph("nearest", (1, 1), (1, 1))
    rng = np.random.default_rng(9)
    x = {"z": rng.normal(size=(9, 11)), "k": rng.normal(size=(9, 11)), "c": rng.normal(size=(11, 13))}
    (o1, g1), (o2, g2) = (
        dp.compile(graph, wrt=["z"], loss="loss", device="cpu", threads=t).value_and_grad(**x) for t in (1, 2)
    )
    assert o1["y"].tobytes() == o2["y"].tobytes() and g1["z"].tobytes() == g2["z"].tobytes()


def test_a_guard_below_a_row_image_falls_back_to_guards(monkeypatch: pytest.MonkeyPatch) -> None:
    """A heat step's reverse where the adjoint's table fits `row_images.TABLE_MAX` and the pad
    below it does not (at 4096² with the shipped limit; here the limit is lowered to 12 rows):
    that pad's guard would read the adjoint's per-row index, which no driver can bound, so the
    nest is walked with guards only, as when neither table fits. Before, every row of the
    reverse ran the scalar edge function (``ok = 0;``: 0.70-0.80 s a step at 4096², 0.042 s
    after). The gradient equals the interpreter's either way."""
    from dpt_ir.backends.cxx import row_images

    monkeypatch.setattr(row_images, "TABLE_MAX", 12)
    text = _heat_reverse_text("heat_reverse_rows_past_the_table", 10)
    assert "ok = 0;" not in text  # no row is sent whole to the edge function
    assert "_ri0[" not in text and "ok &= (int)(" in text  # guards only: the border rows decided per row

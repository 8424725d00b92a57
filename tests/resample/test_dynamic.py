"""Data-dependent resampling (registration): map_coordinates at graph-tensor coordinates
and affine_transform with a graph-tensor matrix / offset. Values equal scipy, interpreter
gradients wrt the image, the coordinates, the matrix and the offset agree with central
finite differences (float64), and compiled equals the interpreter."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi

import dpt_ir as dp
from dpt_ir.reference.resample_ref import MODES
from tests.resample.cases import coordinates

SHAPE, OUT = (10, 11), (5, 6)  # lines of >= 10: scipy < 1.18's reflect init error (gh-24550) stays < 1e-11
CASES = [(1, "constant"), (1, "grid-wrap"), (3, "reflect"), (3, "grid-constant"), (3, "nearest"), (0, "mirror")]
CASES += [(2, "mirror"), (4, "wrap"), (5, "grid-constant")]  # the even orders' footprint, every weight formula
# (order, mode, with an affine_transform too): each map adds ~3-6 s of -O0 build
COMPILED = [(0, "wrap", False), (1, "constant", True), (3, "grid-constant", False)]


def _graph(order: int, mode: str) -> dp.Graph:
    g = dp.GraphBuilder("dynamic")
    x = g.input("x", SHAPE, "float64")
    c = g.input("c", (2, *OUT), "float64")
    m = g.input("m", (2, 2), "float64")
    off = g.input("off", (2,), "float64")
    y = dp.map_coordinates(x, c, order=order, mode=mode, cval=0.4)
    z = dp.affine_transform(x, m, off, output_shape=OUT, order=order, mode=mode, cval=0.4)
    g.output("y", y)
    g.output("z", z)
    g.output("loss", dp.sum(dp.sin(y) * y) + dp.sum(z * z))
    return g.build()


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {
        "x": rng.normal(size=SHAPE),
        "c": coordinates(rng, SHAPE, OUT),
        "m": np.array([[1.1037, 0.2313], [-0.1711, 0.9427]]),  # no sample within 1e-3 of an integer (a kink)
        "off": np.array([0.6129, -0.3741]),
    }


@pytest.mark.parametrize("mode", MODES)
def test_values_equal_scipy(mode: str) -> None:
    v = _inputs(MODES.index(mode))
    for order in (0, 1, 3):
        out = dp.interpret(_graph(order, mode), **v)
        kw = {"order": order, "mode": mode, "cval": 0.4}
        np.testing.assert_allclose(out["y"], ndi.map_coordinates(v["x"], v["c"], **kw), rtol=1e-9, atol=1e-12)
        want = ndi.affine_transform(v["x"], v["m"], v["off"], output_shape=OUT, **kw)
        np.testing.assert_allclose(out["z"], want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize(("order", "mode"), [c for c in CASES if c[0] > 0])
def test_gradients_match_finite_differences(order: int, mode: str) -> None:
    v = _inputs(3)
    graph = _graph(order, mode)
    grads = dp.interpret_grad(graph, ["x", "c", "m", "off"], **v)
    rng = np.random.default_rng(order)
    eps = 1e-6
    for name in ("x", "c", "m", "off"):
        for flat in rng.choice(v[name].size, size=min(4, v[name].size), replace=False):
            e = np.zeros(v[name].size)
            e[flat] = eps
            up = dp.interpret(graph, **{**v, name: v[name] + e.reshape(v[name].shape)})["loss"]
            down = dp.interpret(graph, **{**v, name: v[name] - e.reshape(v[name].shape)})["loss"]
            fd, got = (up - down) / (2 * eps), grads[name].flat[flat]
            assert abs(fd - got) <= 1e-5 * max(1.0, abs(fd)), (name, flat, fd, got)


@pytest.fixture(scope="module")
def batch() -> tuple[dp.Program, dp.Graph]:
    g = dp.GraphBuilder("dynamic_batch")
    x = g.input("x", SHAPE, "float64")
    c = g.input("c", (2, *OUT), "float64")
    m = g.input("m", (2, 2), "float64")
    off = g.input("off", (2,), "float64")
    loss = None
    for order, mode, affine in COMPILED:
        y = dp.map_coordinates(x, c, order=order, mode=mode, cval=0.4)
        tag = f"{mode.replace('-', '_')}{order}"
        g.output(f"y_{tag}", y)
        term = dp.sum(dp.sin(y) * y)
        if affine:
            z = dp.affine_transform(x, m, off, output_shape=OUT, order=order, mode=mode, cval=0.4)
            g.output(f"z_{tag}", z)
            term = term + dp.sum(z * z)
        loss = term if loss is None else loss + term
    g.output("loss", loss)
    graph = g.build()
    return dp.compile(graph, wrt=["x", "c", "m", "off"], loss="loss", device="cpu"), graph


def test_compiled_equals_interpreter(batch: tuple[dp.Program, dp.Graph]) -> None:
    program, graph = batch
    v = _inputs(9)
    out, grads = program.value_and_grad(**v)
    want = dp.interpret(graph, **v)
    want_grads = dp.interpret_grad(graph, ["x", "c", "m", "off"], **v)
    for k, val in want.items():
        np.testing.assert_allclose(out[k], val, rtol=1e-11, atol=1e-12, err_msg=k)
    for k, val in want_grads.items():
        np.testing.assert_allclose(grads[k], val, rtol=1e-10, atol=1e-11, err_msg=k)
    again = program.value_and_grad(**v)[1]
    assert all(np.array_equal(again[k], grads[k]) for k in grads)  # bit-identical

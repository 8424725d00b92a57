"""dp.map_coordinates / affine_transform / shift / zoom / rotate / spline_filter / radon,
evaluated by the interpreter, against scipy.ndimage and skimage.transform.radon; and the
ContractErrors of bad arguments."""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi

import dpt_ir as dp
from dpt_ir.reference.resample_ref import MODES
from tests.resample.cases import apply, coordinates, phantom

ORDERS = (0, 1, 3)
TOL = {"rtol": 1e-9, "atol": 1e-12}


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_functions_equal_scipy(order: int, mode: str) -> None:
    rng = np.random.default_rng(order * 17 + MODES.index(mode))
    x0 = rng.normal(size=(10, 12))
    kw = {"order": order, "mode": mode, "cval": 0.25}
    c = coordinates(rng, x0.shape, (4, 5))
    np.testing.assert_allclose(
        apply(lambda x: dp.map_coordinates(x, c, **kw), x0), ndi.map_coordinates(x0, c, **kw), **TOL
    )
    m, off = np.array([[0.9, 0.2], [-0.15, 1.1]]), [1.5, -2.0]
    np.testing.assert_allclose(
        apply(lambda x: dp.affine_transform(x, m, off, output_shape=(8, 9), **kw), x0),
        ndi.affine_transform(x0, m, off, output_shape=(8, 9), **kw),
        **TOL,
    )
    np.testing.assert_allclose(
        apply(lambda x: dp.affine_transform(x, [1.2, 0.8], 0.5, **kw), x0),
        ndi.affine_transform(x0, [1.2, 0.8], 0.5, **kw),
        **TOL,
    )
    np.testing.assert_allclose(
        apply(lambda x: dp.shift(x, (1.3, -2.6), **kw), x0), ndi.shift(x0, (1.3, -2.6), **kw), **TOL
    )
    np.testing.assert_allclose(
        apply(lambda x: dp.zoom(x, (1.4, 0.75), **kw), x0), ndi.zoom(x0, (1.4, 0.75), **kw), **TOL
    )
    np.testing.assert_allclose(apply(lambda x: dp.rotate(x, 33.0, **kw), x0), ndi.rotate(x0, 33.0, **kw), **TOL)


def test_3d_and_grid_mode_and_filters() -> None:
    rng = np.random.default_rng(3)
    x0 = rng.normal(size=(6, 7, 8))
    c = coordinates(rng, x0.shape, (9,))
    for mode in ("grid-constant", "nearest", "mirror"):
        want = ndi.map_coordinates(x0, c, mode=mode, cval=-1.0)
        got = apply(lambda x, mode=mode: dp.map_coordinates(x, c, mode=mode, cval=-1.0), x0)
        np.testing.assert_allclose(got, want, **TOL)
    y0 = rng.normal(size=(11, 12))
    got = apply(lambda x: dp.zoom(x, 1.5, mode="grid-wrap", grid_mode=True), y0)
    np.testing.assert_allclose(got, ndi.zoom(y0, 1.5, mode="grid-wrap", grid_mode=True), **TOL)
    np.testing.assert_allclose(
        apply(lambda x: dp.spline_filter(x, mode="wrap"), y0), ndi.spline_filter(y0, mode="wrap"), **TOL
    )
    got = apply(lambda x: dp.spline_filter1d(x, axis=0, mode="grid-wrap"), y0)
    np.testing.assert_allclose(got, ndi.spline_filter1d(y0, axis=0, mode="grid-wrap"), **TOL)
    np.testing.assert_allclose(
        apply(lambda x: dp.rotate(x, 90.0, reshape=False), y0), ndi.rotate(y0, 90.0, reshape=False), **TOL
    )


@pytest.mark.parametrize("circle", [True, False])
def test_radon_equals_skimage(circle: bool) -> None:
    from skimage.transform import radon

    img = phantom(24)
    theta = np.linspace(0.0, 180.0, 17, endpoint=False)
    want = radon(img, theta, circle=circle)
    got = apply(lambda x: dp.radon(x, theta, circle=circle), img)
    assert got.shape == want.shape
    assert np.linalg.norm(got - want) <= 1e-6 * np.linalg.norm(want)
    rect = img[:, 2:21]  # a non-square image: skimage crops (circle) or pads it
    rect = np.where(np.hypot(*np.mgrid[:24, :19] - np.array([12, 9])[:, None, None]) <= 9, rect, 0.0)
    want = radon(rect, circle=circle)
    got = apply(lambda x: dp.radon(x, circle=circle), rect)
    assert got.shape == want.shape
    assert np.linalg.norm(got - want) <= 1e-6 * np.linalg.norm(want)


def _error(fn) -> str:
    g = dp.GraphBuilder("bad")
    x = g.input("img", (5, 6), "float64")
    with pytest.raises(dp.ContractError) as err:
        fn(x, g)
    return str(err.value)


def test_bad_arguments_are_contract_errors() -> None:
    c = np.zeros((2, 3))
    msg = _error(lambda x, g: dp.map_coordinates(x, c, order=6))
    assert "dp.map_coordinates on %img" in msg and "order must be one of 0, 1, 2, 3, 4, 5, found 6" in msg
    msg = _error(lambda x, g: dp.map_coordinates(x, np.zeros((3, 4))))
    assert "%img" in msg and "coordinates of shape (2, *output_shape)" in msg and "found shape [3, 4]" in msg
    msg = _error(lambda x, g: dp.shift(x, 1.0, mode="bogus"))
    assert "dp.shift on %img" in msg and "unknown mode 'bogus'" in msg and "grid-wrap" in msg
    msg = _error(lambda x, g: dp.map_coordinates(x, g.input("c", (3, 4), "float64")))
    assert "float coordinates of shape (2, *output_shape)" in msg and "%c of shape [3, 4]" in msg
    msg = _error(lambda x, g: dp.zoom(x, g.input("z", (2,), "float64")))
    assert "constant array" in msg and "%z" in msg
    msg = _error(lambda x, g: dp.affine_transform(x, np.ones((3, 2))))
    assert "dp.affine_transform on %img" in msg and "found shape [3, 2]" in msg
    # stacks (..., H, W) project slice by slice (issue 29): a rank-1 input has no (H, W) slice
    assert "rank >= 2 (..., H, W), found rank 1" in _error(lambda x, g: dp.radon(dp.sum(x, axis=0)))


def test_resampling_graphs_round_trip_text_and_json() -> None:
    g = dp.GraphBuilder("round_trip")
    x = g.input("x", (6, 7), "float64")
    c = g.input("c", (2, 3), "float64")
    y = dp.shift(x, (0.5, -1.25), mode="nearest") + dp.zoom(x, 1.0) + dp.rotate(x, 20.0, reshape=False)
    g.output("y", y)
    g.output("r", dp.radon(x, [0.0, 45.5]))
    g.output("m", dp.map_coordinates(x, np.full((2, 3), 1.5)) + dp.map_coordinates(x, c))
    graph = g.build()
    assert dp.Graph.from_text(graph.to_text()) == graph
    assert dp.Graph.model_validate_json(graph.model_dump_json()) == graph

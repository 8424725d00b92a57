"""The NumPy reference of the interpolation maths (`dpt_ir.reference.resample_ref`, `dpt_ir.reference.spline_ref`)
against scipy.ndimage itself: orders 0, 1 and 3 in every mode, float64 rtol 1e-9, 1-D, 2-D
and 3-D; and the spline filter's adjoint against the transposed filter matrix."""

from __future__ import annotations

import warnings

import numpy as np
import pytest
import scipy.ndimage as ndi

from dpt_ir.reference import resample_ref as R
from dpt_ir.reference import spline_ref as S

MODES = R.MODES
ORDERS = (0, 1, 3)


def reference_interp(x: np.ndarray, coords: np.ndarray, order: int, mode: str, cval: float) -> np.ndarray:
    """map_coordinates composed from the reference pieces, as scipy composes it."""
    npad = 0
    if order > 1:
        if mode in ("nearest", "grid-constant"):
            npad = R.PREPAD
            x = np.pad(x, npad, mode="edge") if mode == "nearest" else np.pad(x, npad, constant_values=cval)
        x = S.spline_filter(x, mode)
    m = R.coordinate_map(coords, x.shape, order, mode, npad)
    return m.apply(x, cval).reshape(coords.shape[1:])


def _coords(rng: np.random.Generator, shape: tuple[int, ...], out: tuple[int, ...]) -> np.ndarray:
    """Coordinates inside, near and well beyond every edge, plus exact integers and edges."""
    c = np.stack([rng.uniform(-1.7 * n - 2, 2.7 * n + 2, size=out) for n in shape])
    flat = c.reshape(len(shape), -1)
    for h, n in enumerate(shape):
        flat[h, :6] = [0.0, n - 1.0, -0.5, n - 0.5, 2.0, -1.0][:6]
    return c


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_map_coordinates_1d_2d_3d(order: int, mode: str) -> None:
    rng = np.random.default_rng(order * 31 + MODES.index(mode))
    for shape, out in (((11,), (40,)), ((10, 12), (9, 7)), ((10, 10, 11), (4, 5))):
        x = rng.normal(size=shape)
        coords = _coords(rng, shape, out)
        want = ndi.map_coordinates(x, coords, order=order, mode=mode, cval=0.75)
        np.testing.assert_allclose(reference_interp(x, coords, order, mode, 0.75), want, rtol=1e-9, atol=1e-12)


@pytest.mark.parametrize("mode", MODES)
def test_spline_filter_and_its_adjoint(mode: str) -> None:
    rng = np.random.default_rng(MODES.index(mode))
    x = rng.normal(size=(12, 13))
    np.testing.assert_allclose(S.spline_filter(x, mode), ndi.spline_filter(x, 3, mode=mode), rtol=1e-9, atol=1e-12)
    for n in (2, 3, 12):
        forward, adjoint = S.filter_matrix(n, mode), S.filter_matrix(n, mode, adjoint=True)
        np.testing.assert_allclose(adjoint, forward.T, rtol=1e-12, atol=1e-14)


def test_reflect_initialisation_is_the_fixed_formula() -> None:
    """scipy < 1.18 aliases c[0] in ``_init_causal_reflect`` (scipy gh-24550, fixed by #24615);
    the reference follows the fixed formula: on a short line it equals the exact filter of the
    half-sample symmetric extension (the long-line limit of the extended signal)."""
    x = np.random.default_rng(5).normal(size=3)
    long = np.concatenate([x, x[::-1]] * 20)  # period 2n: the reflect extension itself
    exact = ndi.spline_filter1d(long, 3, mode="grid-wrap")[: len(x)]
    np.testing.assert_allclose(S.spline_filter1d(x, 0, "reflect"), exact, rtol=1e-12)


def _affine_cases(ndim: int, rng: np.random.Generator) -> list[tuple[np.ndarray, np.ndarray]]:
    m = np.eye(ndim) + rng.normal(scale=0.3, size=(ndim, ndim))
    return [(m, rng.normal(scale=2.0, size=ndim)), (np.eye(ndim), np.full(ndim, 1.5))]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("order", ORDERS)
def test_affine_shift_zoom_rotate(order: int, mode: str) -> None:
    rng = np.random.default_rng(100 + order * 31 + MODES.index(mode))
    x = rng.normal(size=(10, 11))
    kw = {"order": order, "mode": mode, "cval": -0.5}
    for matrix, offset in _affine_cases(2, rng):
        coords = R.affine_coordinates(matrix, offset, (9, 12))
        want = ndi.affine_transform(x, matrix, offset, output_shape=(9, 12), **kw)
        np.testing.assert_allclose(reference_interp(x, coords, order, mode, -0.5), want, rtol=1e-9, atol=1e-12)
    shift = [1.25, -2.5]
    coords = R.zoom_shift_coordinates(x.shape, None, [-s for s in shift], False)
    np.testing.assert_allclose(
        reference_interp(x, coords, order, mode, -0.5), ndi.shift(x, shift, **kw), rtol=1e-9, atol=1e-12
    )
    for grid_mode in (False, True):
        out_shape = (15, 7)
        zoom = R.zoom_factors(x.shape, out_shape, grid_mode)
        coords = R.zoom_shift_coordinates(out_shape, zoom, None, grid_mode)
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", UserWarning)  # scipy's advice to use grid-* modes with grid_mode
            want = ndi.zoom(x, (1.5, 7 / 11), grid_mode=grid_mode, **kw)
        np.testing.assert_allclose(reference_interp(x, coords, order, mode, -0.5), want, rtol=1e-9, atol=1e-12)
    for angle, reshape in ((30.0, True), (90.0, False), (-47.5, True)):
        matrix, offset, plane = R.rotate_geometry(x.shape, angle, reshape)
        coords = R.affine_coordinates(matrix, offset, plane)
        want = ndi.rotate(x, angle, reshape=reshape, **kw)
        np.testing.assert_allclose(reference_interp(x, coords, order, mode, -0.5), want, rtol=1e-9, atol=1e-12)


def test_sparse_map_transpose_is_the_adjoint() -> None:
    rng = np.random.default_rng(9)
    m = R.coordinate_map(_coords(rng, (7, 8), (5, 6)), (7, 8), 3, "reflect")
    x, y = rng.normal(size=56), rng.normal(size=30)
    lhs, rhs = m.apply(x) @ y, x @ m.transpose().apply(y)
    assert abs(lhs - rhs) <= 1e-13 * abs(lhs)

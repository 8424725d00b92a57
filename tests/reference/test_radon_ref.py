"""The matrix-free radon references (`radon_apply`, `radon_adjoint_apply`) against
skimage.transform.radon and the sparse map the C++ path lowers, and the adjoint's dot test
at float64; odd, rectangular and cropped/padded frames, angles past 180."""

from __future__ import annotations

import numpy as np
import pytest

from dpt_ir.reference import radon_ref

THETA = [*np.linspace(0.0, 180.0, 7, endpoint=False), 33.3, 90.0, 271.7]


@pytest.mark.parametrize(("shape", "circle"), [((9, 9), True), ((11, 15), True), ((11, 15), False), ((10, 10), False)])
def test_matrix_free_equals_map_and_skimage(shape: tuple[int, int], circle: bool) -> None:
    from skimage.transform import radon

    rng = np.random.default_rng(3)
    img = rng.standard_normal(shape)
    got = radon_ref.radon_apply(img, THETA, circle)
    m = radon_ref.radon_map(shape, THETA, circle)
    np.testing.assert_allclose(got, m.apply(img.ravel()).reshape(got.shape), rtol=1e-12, atol=1e-12)
    if not circle:  # skimage warns (and is only defined) for circle=True on images zero outside the circle
        want = radon(img, THETA, circle=False)
        np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-10 * np.abs(want).max())
    g = rng.standard_normal(got.shape)
    adj = radon_ref.radon_adjoint_apply(g, shape, THETA, circle)
    np.testing.assert_allclose(adj, m.transpose().apply(g.ravel()).reshape(shape), rtol=1e-12, atol=1e-12)
    lhs, rhs = float(np.sum(got * g)), float(np.sum(img * adj))
    assert abs(lhs - rhs) <= 1e-12 * abs(lhs)

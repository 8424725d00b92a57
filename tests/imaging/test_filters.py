"""Interpreter values of the imaging filters against ``scipy.ndimage`` (float64, rtol
1e-10) for every boundary mode, and of `dp.gradient` against ``numpy.gradient``; bad
arguments raise `dp.ContractError`."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest
import scipy.ndimage as ndi

import dpt_ir as dp

from .helpers import ALIASES, MODES, assert_close, full_origin, full_rank, interpret_unary

CVAL = 0.37
SHAPES: dict[str, tuple[int, ...]] = {"1d": (11,), "2d": (7, 9), "3d": (3, 7, 9)}
# Kernel shapes per input rank: odd, even, and (for 2-D/3-D inputs) lower-rank weights
# that apply to the trailing axes.
KERNELS: dict[str, tuple[tuple[int, ...], ...]] = {
    "1d": ((3,), (4,), (1,)),
    "2d": ((3, 3), (2, 4), (4,), (1, 3)),
    "3d": ((3, 3), (2, 3, 2), (5,)),
}
FILTERS = {"correlate": (dp.correlate, ndi.correlate), "convolve": (dp.convolve, ndi.convolve)}
FILTERS1D = {"correlate1d": (dp.correlate1d, ndi.correlate1d), "convolve1d": (dp.convolve1d, ndi.convolve1d)}


def image(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    """A float64 test image with values of both signs."""
    return np.random.default_rng(seed).normal(size=shape)


def kernel(shape: tuple[int, ...], seed: int = 1) -> np.ndarray:
    """Asymmetric weights of ``shape`` (so correlation and convolution differ)."""
    return np.random.default_rng(seed).uniform(-1.0, 2.0, shape)


def origins(wshape: tuple[int, ...]) -> dict[str, tuple[int, ...]]:
    """The zero origin and the extreme ones scipy allows per axis of ``wshape``."""
    return {
        "zero": (0,) * len(wshape),
        "low": tuple(-(n // 2) for n in wshape),
        "high": tuple((n - 1) // 2 for n in wshape),
    }


# -- correlate / convolve -----------------------------------------------------------------
@pytest.mark.parametrize("which", sorted(FILTERS))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(("rank", "wshape"), [(rank, wshape) for rank, shapes in KERNELS.items() for wshape in shapes])
@pytest.mark.parametrize("origin_kind", ["zero", "low", "high"])
def test_nd_filter_matches_scipy(which: str, mode: str, rank: str, wshape: tuple[int, ...], origin_kind: str) -> None:
    """correlate/convolve with odd, even and lower-rank weights and every origin."""
    fn, ref = FILTERS[which]
    x0 = image(SHAPES[rank])
    w = kernel(wshape)
    origin = origins(wshape)[origin_kind]
    y = interpret_unary(lambda x: fn(x, w, mode=mode, cval=CVAL, origin=origin), x0)
    expected = ref(x0, full_rank(w, x0.ndim), mode=mode, cval=CVAL, origin=full_origin(origin, x0.ndim))
    assert_close(y, expected)


@pytest.mark.parametrize("which", sorted(FILTERS))
@pytest.mark.parametrize("origin", [-1, 1])
def test_scalar_origin_applies_to_the_weights_axes(which: str, origin: int) -> None:
    """A scalar origin with lower-rank weights shifts only the weights' (trailing) axes."""
    fn, ref = FILTERS[which]
    x0 = image((2, 7, 9))
    w = kernel((3, 4))
    y = interpret_unary(lambda x: fn(x, w, mode="wrap", origin=origin), x0)
    assert_close(y, ref(x0, full_rank(w, 3), mode="wrap", origin=(0, origin, origin)))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("which", sorted(FILTERS))
@pytest.mark.parametrize("shape", [(3, 4), (1, 2)])
def test_weights_larger_than_the_image(mode: str, which: str, shape: tuple[int, ...]) -> None:
    """Weights longer than an axis extend it further than its length (reflect/mirror/wrap
    repeat), axes of length 1 and 2 included."""
    fn, ref = FILTERS[which]
    x0 = image(shape)
    w = kernel((8, 11))
    y = interpret_unary(lambda x: fn(x, w, mode=mode, cval=CVAL, origin=(1, -2)), x0)
    assert_close(y, ref(x0, w, mode=mode, cval=CVAL, origin=(1, -2)))


def test_nested_list_weights() -> None:
    """Weights given as nested Python lists behave like the array."""
    x0 = image((7, 9))
    w = [[0.0, 1.0, 0.5], [2.0, -1.0, 0.25]]
    y = interpret_unary(lambda x: dp.convolve(x, w, mode="mirror"), x0)
    assert_close(y, ndi.convolve(x0, np.array(w), mode="mirror"))


# -- correlate1d / convolve1d ---------------------------------------------------------------
@pytest.mark.parametrize("which", sorted(FILTERS1D))
@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize(
    ("rank", "axis"), [(rank, axis) for rank, shape in SHAPES.items() for axis in range(-len(shape), len(shape))]
)
@pytest.mark.parametrize("taps", [3, 4])
def test_1d_filter_matches_scipy(which: str, mode: str, rank: str, axis: int, taps: int) -> None:
    """Along every axis (negative ones included), odd and even weights, every origin."""
    fn, ref = FILTERS1D[which]
    x0 = image(SHAPES[rank])
    w = kernel((taps,))
    for origin in sorted(set(origins((taps,)).values())):
        y = interpret_unary(lambda x, o=origin[0]: fn(x, w, axis=axis, mode=mode, cval=CVAL, origin=o), x0)
        assert_close(y, ref(x0, w, axis=axis, mode=mode, cval=CVAL, origin=origin[0]))


# -- gaussian_filter ------------------------------------------------------------------------
def sigmas(ndim: int) -> list[float | tuple[float, ...]]:
    """Scalar sigmas (3.0 gives a kernel wider than the image), per-axis ones and a 0."""
    per_axis = tuple(0.6 + 0.5 * k for k in range(ndim))
    with_zero = (0.0,) + per_axis[1:] if ndim > 1 else (0.0,)
    return [0.7, 1.5, 3.0, per_axis, with_zero]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("rank", sorted(SHAPES))
@pytest.mark.parametrize("truncate", [4.0, 2.0, 1.3])
def test_gaussian_filter_matches_scipy(mode: str, rank: str, truncate: float) -> None:
    x0 = image(SHAPES[rank])
    for sigma in sigmas(x0.ndim):
        y = interpret_unary(lambda x, s=sigma: dp.gaussian_filter(x, s, mode=mode, cval=CVAL, truncate=truncate), x0)
        expected = ndi.gaussian_filter(x0, sigma, mode=mode, cval=CVAL, truncate=truncate)
        assert_close(y, expected)


def test_gaussian_filter_zero_sigma_is_identity() -> None:
    x0 = image((7, 9))
    np.testing.assert_array_equal(interpret_unary(lambda x: dp.gaussian_filter(x, 0.0), x0), x0)


def test_gaussian_kernel_matches_scipy_weights() -> None:
    """The weights `dp.gaussian_filter` uses are scipy's (impulse response of gaussian_filter1d)."""
    from dpt_ir.api.imaging import gaussian_kernel1d

    for sigma, truncate in ((0.5, 4.0), (1.2, 4.0), (2.5, 3.0)):
        w = gaussian_kernel1d(sigma, truncate)
        impulse = np.zeros(2 * w.size + 1)
        impulse[w.size] = 1.0
        response = ndi.gaussian_filter1d(impulse, sigma, mode="constant", truncate=truncate)
        r = w.size // 2
        assert_close(w, response[w.size - r : w.size + r + 1])


# -- mode aliases -----------------------------------------------------------------------------
ALIAS_FILTERS: dict[str, tuple[Callable[..., dp.Tensor], Callable[..., np.ndarray]]] = {
    "correlate": (lambda x, m: dp.correlate(x, kernel((2, 3)), mode=m, cval=CVAL),
                  lambda x, m: ndi.correlate(x, kernel((2, 3)), mode=m, cval=CVAL)),
    "convolve": (lambda x, m: dp.convolve(x, kernel((3, 2)), mode=m, cval=CVAL),
                 lambda x, m: ndi.convolve(x, kernel((3, 2)), mode=m, cval=CVAL)),
    "correlate1d": (lambda x, m: dp.correlate1d(x, [1.0, -2.0, 0.5, 3.0], axis=0, mode=m, cval=CVAL),
                    lambda x, m: ndi.correlate1d(x, [1.0, -2.0, 0.5, 3.0], axis=0, mode=m, cval=CVAL)),
    "convolve1d": (lambda x, m: dp.convolve1d(x, [1.0, -2.0, 0.5], axis=-1, mode=m, cval=CVAL),
                   lambda x, m: ndi.convolve1d(x, [1.0, -2.0, 0.5], axis=-1, mode=m, cval=CVAL)),
    "gaussian_filter": (lambda x, m: dp.gaussian_filter(x, 1.7, mode=m, cval=CVAL),
                        lambda x, m: ndi.gaussian_filter(x, 1.7, mode=m, cval=CVAL)),
}  # fmt: skip


@pytest.mark.parametrize("alias", sorted(ALIASES))
@pytest.mark.parametrize("which", sorted(ALIAS_FILTERS))
def test_mode_aliases(alias: str, which: str) -> None:
    """grid-mirror, grid-wrap and grid-constant are reflect, wrap and constant."""
    fn, ref = ALIAS_FILTERS[which]
    x0 = image((7, 9))
    y = interpret_unary(lambda x: fn(x, alias), x0)
    np.testing.assert_array_equal(y, interpret_unary(lambda x: fn(x, ALIASES[alias]), x0))
    assert_close(y, ref(x0, alias))


# -- gradient -------------------------------------------------------------------------------------
@pytest.mark.parametrize("shape", [(2,), (3,), (8,)])
def test_gradient_1d(shape: tuple[int, ...]) -> None:
    x0 = image(shape)
    assert_close(interpret_unary(dp.gradient, x0), np.gradient(x0))


@pytest.mark.parametrize("shape", [(2, 2), (3, 5), (7, 9)])
def test_gradient_all_axes(shape: tuple[int, ...]) -> None:
    """With no axis, one array per axis (like numpy.gradient)."""
    x0 = image(shape)
    g = dp.GraphBuilder("gradient")
    x = g.input("x", shape, "float64")
    parts = dp.gradient(x)
    assert isinstance(parts, list) and len(parts) == len(shape)
    for k, p in enumerate(parts):
        g.output(f"d{k}", p)
    out = dp.interpret(g.build(), x=x0)
    for k, expected in enumerate(np.gradient(x0)):
        assert_close(out[f"d{k}"], expected)


@pytest.mark.parametrize("axis", [0, 1, -1, -3])
def test_gradient_single_axis(axis: int) -> None:
    x0 = image((3, 4, 5))
    assert_close(interpret_unary(lambda x: dp.gradient(x, axis=axis), x0), np.gradient(x0, axis=axis))


@pytest.mark.parametrize("axes", [(0, 2), (-1, 1), (2,)])
def test_gradient_tuple_of_axes(axes: tuple[int, ...]) -> None:
    x0 = image((3, 4, 5))
    g = dp.GraphBuilder("gradient")
    x = g.input("x", x0.shape, "float64")
    parts = dp.gradient(x, axis=axes)
    expected = np.gradient(x0, axis=axes)
    if len(axes) == 1:  # numpy gives one array for one axis
        assert isinstance(parts, dp.Tensor)
        parts, expected = [parts], [expected]
    assert isinstance(parts, list) and len(parts) == len(axes)
    for k, p in enumerate(parts):
        g.output(f"d{k}", p)
    out = dp.interpret(g.build(), x=x0)
    for k, e in enumerate(expected):
        assert_close(out[f"d{k}"], e)


@pytest.mark.parametrize("dtype", ["uint8", "int32"])
def test_gradient_of_integers_is_float64_like_numpy(dtype: str) -> None:
    """NumPy differentiates integers in float64: a decreasing uint8 ramp gives -1, not 255."""
    x0 = np.array([[5, 4, 3, 2, 1], [0, 2, 7, 1, 9]], dtype=dtype)
    for axis in (0, 1):
        y = interpret_unary(lambda x, ax=axis: dp.gradient(x, axis=ax), x0)
        assert y.dtype == np.gradient(x0, axis=axis).dtype == np.float64
        np.testing.assert_array_equal(y, np.gradient(x0, axis=axis))


@pytest.mark.parametrize(
    ("spacing", "axis", "edge_order"),
    [((0.5,), None, 1), ((2.0, 0.25), None, 1), ((3,), 1, 1), ((), None, 2), ((0.5, 4.0), (1, 0), 2), ((1.5,), 0, 2)],
)
def test_gradient_spacings_and_edge_order_like_numpy(spacing: tuple[float, ...], axis: object, edge_order: int) -> None:
    """Positional arguments are sample distances (numpy.gradient's *varargs), not an axis."""
    x0 = image((4, 5))
    g = dp.GraphBuilder("gradient")
    x = g.input("x", x0.shape, "float64")
    parts = dp.gradient(x, *spacing, axis=axis, edge_order=edge_order)
    expected = np.gradient(x0, *spacing, axis=axis, edge_order=edge_order)
    parts, expected = (parts, expected) if isinstance(parts, list) else ([parts], [expected])
    assert len(parts) == len(expected)
    for k, p in enumerate(parts):
        g.output(f"d{k}", p)
    out = dp.interpret(g.build(), x=x0)
    for k, e in enumerate(expected):
        assert_close(out[f"d{k}"], e, rtol=1e-13)


def test_gaussian_filter_per_axis_modes_and_numpy_sigmas() -> None:
    """A sequence of modes is one per axis (as scipy.ndimage); NumPy scalars and arrays of
    sigmas are read like Python numbers."""
    x0 = image((7, 9))
    for sigma, mode in [
        (np.int32(1), "reflect"),
        (np.float64(0.8), ["wrap", "nearest"]),
        (np.array([1.5, 0.7]), ("mirror", "constant")),
        ([0, 2], ["constant", "reflect"]),
    ]:
        y = interpret_unary(lambda x, s=sigma, m=mode: dp.gaussian_filter(x, s, mode=m, cval=CVAL), x0)
        assert_close(y, ndi.gaussian_filter(x0, sigma, mode=mode, cval=CVAL))


def test_float32_gaussian_filter_is_as_accurate_as_scipy() -> None:
    """Taps accumulate in float64 and round once, as scipy.ndimage does: the float32 result
    is within one float32 ulp of scipy's (float32 accumulation was several ulps off)."""
    x0 = np.random.default_rng(0).uniform(0.0, 1.0, (32, 32)).astype(np.float32)
    y = interpret_unary(lambda x: dp.gaussian_filter(x, 2.0), x0)
    expected = ndi.gaussian_filter(x0, 2.0)
    assert y.dtype == np.float32
    ulp = np.spacing(np.float32(np.max(np.abs(expected))))
    assert np.max(np.abs(y.astype(np.float64) - expected)) <= ulp


@pytest.mark.parametrize("dtype", ["float32", "float64"])
@pytest.mark.parametrize("mode", MODES)
def test_mirrored_lines_sum_as_scipy_bit_for_bit(dtype: str, mode: str) -> None:
    """Symmetric and antisymmetric 1-D weights (a Gaussian, a derivative) sum in scipy's order
    (`dpt_ir.ir.mirror`: the centre, then the pairs from the outermost in), so the interpreter's
    gaussian_filter and correlate1d are scipy's bits, not only close to them (the row-major sum
    differed from scipy's in the last bit of most float64 elements). The fill value is exact in
    float32: a float32 constant pad holds ``cval`` rounded to float32, where scipy's line buffer
    holds it in double (0.37 gives other bits at the edges)."""
    x0, cval = image((40, 30)).astype(dtype), 0.375
    y = interpret_unary(lambda x: dp.gaussian_filter(x, (1.5, 2.2), mode=mode, cval=cval), x0)
    np.testing.assert_array_equal(y, ndi.gaussian_filter(x0, (1.5, 2.2), mode=mode, cval=cval))
    d = [-0.25, 1.5, 0.0, -1.5, 0.25]
    y = interpret_unary(lambda x: dp.correlate1d(x, d, axis=0, mode=mode, cval=cval), x0)
    np.testing.assert_array_equal(y, ndi.correlate1d(x0, d, axis=0, mode=mode, cval=cval))


# -- bad arguments ---------------------------------------------------------------------------------
def _build(shape: tuple[int, ...], fn: Callable[[dp.Tensor], object]) -> None:
    g = dp.GraphBuilder("bad")
    x = g.input("x", shape, "float64")
    fn(x)


BAD: dict[str, tuple[tuple[int, ...], Callable[[dp.Tensor], object], str]] = {
    "unknown_mode": ((7, 9), lambda x: dp.correlate(x, np.ones((3, 3)), mode="periodic"), "mode"),
    "unknown_mode_1d": ((7, 9), lambda x: dp.correlate1d(x, [1.0, 2.0], mode="zero"), "mode"),
    "unknown_mode_gaussian": ((7, 9), lambda x: dp.gaussian_filter(x, 1.0, mode="clamp"), "mode"),
    "weights_rank_too_high": ((7,), lambda x: dp.correlate(x, np.ones((3, 3))), "weights"),
    "weights_rank_too_high_conv": ((2, 3), lambda x: dp.convolve(x, np.ones((1, 1, 2))), "weights"),
    "weights_empty": ((7, 9), lambda x: dp.correlate(x, np.ones((0, 3))), "weights"),
    "weights_1d_not_1d": ((7, 9), lambda x: dp.correlate1d(x, np.ones((2, 2))), "weights"),
    "origin_too_high": ((7, 9), lambda x: dp.correlate(x, np.ones((3, 3)), origin=2), "origin"),
    "origin_too_low": ((7, 9), lambda x: dp.convolve(x, np.ones((4, 4)), origin=(0, -3)), "origin"),
    "origin_even_high": ((7, 9), lambda x: dp.correlate(x, np.ones((2, 4)), origin=(1, 0)), "origin"),
    "origin_1d": ((7, 9), lambda x: dp.convolve1d(x, [1.0, 2.0, 3.0], origin=-2), "origin"),
    "origin_too_many": ((7, 9), lambda x: dp.correlate(x, np.ones((3, 3)), origin=(0, 0, 0)), "origin"),
    "sigma_negative": ((7, 9), lambda x: dp.gaussian_filter(x, -1.0), "sigma"),
    "sigma_negative_axis": ((7, 9), lambda x: dp.gaussian_filter(x, (1.0, -0.5)), "sigma"),
    "sigma_wrong_count": ((7, 9), lambda x: dp.gaussian_filter(x, (1.0, 1.0, 1.0)), "sigma"),
    "sigma_nan": ((7, 9), lambda x: dp.gaussian_filter(x, float("nan")), "sigma"),
    "axis_out_of_range": ((7, 9), lambda x: dp.correlate1d(x, [1.0, 2.0], axis=2), "axis"),
    "gradient_axis_size_1": ((1, 5), lambda x: dp.gradient(x, axis=0), "axis"),
    "gradient_all_axes_size_1": ((4, 1), lambda x: dp.gradient(x), "axis"),
    "gradient_axis_out_of_range": ((4, 5), lambda x: dp.gradient(x, axis=2), "axis"),
    "gradient_too_few_spacings": ((4, 5, 3), lambda x: dp.gradient(x, 1.0, 2.0), "spacings"),
    "gradient_coordinate_array": ((4, 5), lambda x: dp.gradient(x, np.arange(4.0), axis=0), "scalars"),
    "gradient_zero_spacing": ((4, 5), lambda x: dp.gradient(x, 0.0), "spacing"),
    "gradient_edge_order_3": ((4, 5), lambda x: dp.gradient(x, edge_order=3), "edge_order"),
    "gradient_edge_order_2_short": ((2, 5), lambda x: dp.gradient(x, axis=0, edge_order=2), "edge_order=2"),
    "mode_not_a_string": ((7, 9), lambda x: dp.correlate(x, np.ones((3, 3)), mode=["reflect", "wrap"]), "mode"),
    "modes_wrong_count": ((7, 9), lambda x: dp.gaussian_filter(x, 1.0, mode=["reflect"]), "mode"),
    "sigma_not_a_number": ((7, 9), lambda x: dp.gaussian_filter(x, "1"), "sigma"),
}


@pytest.mark.parametrize("case", sorted(BAD))
def test_bad_arguments_raise_contract_error(case: str) -> None:
    shape, fn, word = BAD[case]
    with pytest.raises(dp.ContractError, match=word):
        _build(shape, fn)

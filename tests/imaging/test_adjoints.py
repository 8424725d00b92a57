"""Interpreter gradients of the stencils against the exact adjoint.

Each linear operator's matrix ``A`` is built column by column from scipy (``A[:, k]`` is
the operator applied to the k-th basis image, with ``cval = 0``: the constant only shifts
the output), and ``dp.interpret_grad`` seeded with ``g`` must equal ``A.T @ g``
(float64, rtol 1e-10). The primitive ops ``pad``, ``pad_adjoint`` and ``correlate_valid``
are checked the same way, ``pad`` with widths larger than the image.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import numpy as np
import pytest
import scipy.ndimage as ndi
from scipy import signal

import dpt_ir as dp

from .helpers import MODES, assert_close, unary_graph

CVAL = -0.8  # used by the dp graphs; gradients must not depend on it
K33 = np.array([[0.5, -1.0, 2.0], [1.5, 0.25, -0.75], [0.0, 3.0, 1.0]])
K24 = np.array([[1.0, -2.0, 0.5, 0.75], [-0.25, 1.25, 2.0, -1.5]])
K78 = np.random.default_rng(7).uniform(-1.0, 1.0, (7, 8))  # larger than the 5 x 6 image
W4 = [0.5, -1.0, 2.0, 0.25]
W5 = [1.0, 0.0, -2.0, 0.5, 3.0]

DpFn = Callable[[dp.Tensor, str], dp.Tensor]
RefFn = Callable[[np.ndarray, str], np.ndarray]
# name -> (image shape, dp filter(x, mode), scipy filter(array, mode) with cval 0)
FILTERS: dict[str, tuple[tuple[int, ...], DpFn, RefFn]] = {
    "correlate_3x3": ((5, 6),
                      lambda x, m: dp.correlate(x, K33, mode=m, cval=CVAL),
                      lambda a, m: ndi.correlate(a, K33, mode=m)),
    "correlate_2x4_origin": ((5, 6),
                             lambda x, m: dp.correlate(x, K24, mode=m, cval=CVAL, origin=(-1, 1)),
                             lambda a, m: ndi.correlate(a, K24, mode=m, origin=(-1, 1))),
    "correlate_7x8": ((5, 6),
                      lambda x, m: dp.correlate(x, K78, mode=m, cval=CVAL, origin=(2, -3)),
                      lambda a, m: ndi.correlate(a, K78, mode=m, origin=(2, -3))),
    "convolve_3x3": ((5, 6),
                     lambda x, m: dp.convolve(x, K33, mode=m, cval=CVAL),
                     lambda a, m: ndi.convolve(a, K33, mode=m)),
    "convolve_2x4_origin": ((5, 6),
                            lambda x, m: dp.convolve(x, K24, mode=m, cval=CVAL, origin=(0, -2)),
                            lambda a, m: ndi.convolve(a, K24, mode=m, origin=(0, -2))),
    "correlate1d_axis0": ((5, 6),
                          lambda x, m: dp.correlate1d(x, W4, axis=0, mode=m, cval=CVAL, origin=1),
                          lambda a, m: ndi.correlate1d(a, W4, axis=0, mode=m, origin=1)),
    "correlate1d_axis-1": ((5, 6),
                           lambda x, m: dp.correlate1d(x, W5, axis=-1, mode=m, cval=CVAL),
                           lambda a, m: ndi.correlate1d(a, W5, axis=-1, mode=m)),
    "convolve1d_axis-2": ((5, 6),
                          lambda x, m: dp.convolve1d(x, W4, axis=-2, mode=m, cval=CVAL, origin=-2),
                          lambda a, m: ndi.convolve1d(a, W4, axis=-2, mode=m, origin=-2)),
    "convolve1d_axis1": ((5, 6),
                         lambda x, m: dp.convolve1d(x, W5, axis=1, mode=m, cval=CVAL, origin=2),
                         lambda a, m: ndi.convolve1d(a, W5, axis=1, mode=m, origin=2)),
    "gaussian_1.0": ((5, 6),
                     lambda x, m: dp.gaussian_filter(x, 1.0, mode=m, cval=CVAL),
                     lambda a, m: ndi.gaussian_filter(a, 1.0, mode=m)),
    "gaussian_0_2.5": ((5, 6),  # radius 10: wider than the image
                       lambda x, m: dp.gaussian_filter(x, (0.0, 2.5), mode=m, cval=CVAL),
                       lambda a, m: ndi.gaussian_filter(a, (0.0, 2.5), mode=m)),
    "gaussian_truncate": ((5, 6),
                          lambda x, m: dp.gaussian_filter(x, (1.5, 0.6), mode=m, cval=CVAL, truncate=2.0),
                          lambda a, m: ndi.gaussian_filter(a, (1.5, 0.6), mode=m, truncate=2.0)),
    "correlate_batched": ((2, 3, 4),  # 2-D weights on the trailing axes
                          lambda x, m: dp.correlate(x, K33, mode=m, cval=CVAL, origin=1),
                          lambda a, m: ndi.correlate(a, K33[None], mode=m, origin=(0, 1, 1))),
    "gaussian_batched": ((2, 3, 4),
                         lambda x, m: dp.gaussian_filter(x, (0.0, 0.8, 1.3), mode=m, cval=CVAL),
                         lambda a, m: ndi.gaussian_filter(a, (0.0, 0.8, 1.3), mode=m)),
    "line_1d": ((7,),
                lambda x, m: dp.correlate(x, W5, mode=m, cval=CVAL, origin=-1),
                lambda a, m: ndi.correlate(a, np.asarray(W5), mode=m, origin=-1)),
}  # fmt: skip


def operator_matrix(shape: tuple[int, ...], apply: Callable[[np.ndarray], np.ndarray]) -> np.ndarray:
    """The matrix of the linear map ``apply`` on arrays of ``shape``, one column per basis array."""
    n = math.prod(shape)
    columns = [np.asarray(apply(np.eye(n)[k].reshape(shape)), dtype=np.float64).ravel() for k in range(n)]
    return np.stack(columns, axis=1)


def grad_with_seed(graph: dp.Graph, seed: np.ndarray, x0: np.ndarray) -> np.ndarray:
    """``dp.interpret_grad`` of output ``y`` wrt ``x`` with cotangent ``seed``."""
    return dp.interpret_grad(graph, ["x"], seed={"y": seed}, x=x0)["x"]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("name", sorted(FILTERS))
def test_filter_gradient_is_the_exact_adjoint(name: str, mode: str) -> None:
    shape, fn, ref = FILTERS[name]
    rng = np.random.default_rng(3)
    x0 = rng.normal(size=shape)
    graph = unary_graph(shape, lambda x: fn(x, mode))
    a = operator_matrix(shape, lambda e: ref(e, mode))
    y = dp.interpret(graph, x=x0)["y"]
    offset = ref(np.zeros(shape), mode) if mode != "constant" else dp.interpret(graph, x=np.zeros(shape))["y"]
    assert_close(y, (a @ x0.ravel()).reshape(y.shape) + offset)  # dp is the affine map scipy's matrix describes
    g = rng.normal(size=y.shape)
    assert_close(grad_with_seed(graph, g, x0), (a.T @ g.ravel()).reshape(shape))


@pytest.mark.parametrize("axis", [None, 0, 1, (1, 0)])
def test_gradient_op_adjoint(axis: int | tuple[int, int] | None) -> None:
    """dp.gradient's backward is the transpose of numpy.gradient's matrix (per axis)."""
    shape = (5, 6)
    rng = np.random.default_rng(4)
    x0 = rng.normal(size=shape)
    g = dp.GraphBuilder("gradient")
    x = g.input("x", shape, "float64")
    parts = dp.gradient(x, axis=axis)
    parts = parts if isinstance(parts, list) else [parts]
    axes = [0, 1] if axis is None else [axis] if isinstance(axis, int) else list(axis)
    for k, p in enumerate(parts):
        g.output(f"d{k}", p)
    graph = g.build()
    seeds = {f"d{k}": rng.normal(size=shape) for k in range(len(parts))}
    got = dp.interpret_grad(graph, ["x"], seed=seeds, x=x0)["x"]
    expected = sum(
        operator_matrix(shape, lambda e, ax=ax: np.gradient(e, axis=ax)).T @ seeds[f"d{k}"].ravel()
        for k, ax in enumerate(axes)
    )
    assert_close(got, np.reshape(expected, shape))


# -- pad / pad_adjoint --------------------------------------------------------------------------
# map_coordinates at integer coordinates (order 0) is an independent oracle of the extension.
SCIPY_POINT_MODES = {
    "reflect": "reflect",
    "mirror": "mirror",
    "nearest": "nearest",
    "wrap": "grid-wrap",
    "constant": "grid-constant",
}
# (shape, before, after): widths larger than the image, so reflect/mirror/wrap repeat;
# axes of length 1 and 2 exercise the degenerate periods.
PADS: dict[str, tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...]]] = {
    "3x4_wide": ((3, 4), (7, 2), (5, 9)),
    "1x2_wide": ((1, 2), (3, 4), (2, 5)),
    "5_none_after": ((5,), (11,), (0,)),
    "2x2x3": ((2, 2, 3), (0, 3, 1), (4, 0, 7)),
}


def extend(a: np.ndarray, before: tuple[int, ...], after: tuple[int, ...], mode: str, cval: float) -> np.ndarray:
    """``a`` extended by before/after elements per axis in ``mode``, with scipy."""
    axes = [np.arange(-b, n + e, dtype=np.float64) for n, b, e in zip(a.shape, before, after, strict=True)]
    coords = np.stack(np.meshgrid(*axes, indexing="ij"))
    return ndi.map_coordinates(a, coords, order=0, mode=SCIPY_POINT_MODES[mode], cval=cval)


def pad_graph(op: str, shape: tuple[int, ...], before: tuple[int, ...], after: tuple[int, ...], mode: str) -> dp.Graph:
    """``y = op(x)`` for the primitive ``pad`` or ``pad_adjoint`` (cval CVAL)."""
    attrs = {"before": list(before), "after": list(after), "mode": mode, "cval": CVAL}
    return unary_graph(shape, lambda x: x.builder.emit(op, [x], attrs))


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("case", sorted(PADS))
def test_pad_and_its_adjoint(case: str, mode: str) -> None:
    shape, before, after = PADS[case]
    padded = tuple(n + b + e for n, b, e in zip(shape, before, after, strict=True))
    p = operator_matrix(shape, lambda e: extend(e, before, after, mode, 0.0))
    rng = np.random.default_rng(5)
    x0 = rng.normal(size=shape)
    g = rng.normal(size=padded)

    pad = pad_graph("pad", shape, before, after, mode)
    assert_close(dp.interpret(pad, x=x0)["y"], extend(x0, before, after, mode, CVAL))
    assert_close(grad_with_seed(pad, g, x0), (p.T @ g.ravel()).reshape(shape))

    adjoint = pad_graph("pad_adjoint", padded, before, after, mode)
    assert_close(dp.interpret(adjoint, x=g)["y"], (p.T @ g.ravel()).reshape(shape))
    h = rng.normal(size=shape)
    assert_close(grad_with_seed(adjoint, h, g), (p @ h.ravel()).reshape(padded))


# -- correlate_valid ------------------------------------------------------------------------------
VALID: dict[str, tuple[tuple[int, ...], np.ndarray]] = {
    "3x2": ((5, 6), np.arange(1.0, 7.0).reshape(3, 2) / 7.0 - 0.3),
    "1x4": ((5, 6), np.array([[0.0, 1.5, -2.0, 0.25]])),
    "5x6_full": ((5, 6), np.random.default_rng(8).normal(size=(5, 6))),
    "1": ((7,), np.array([2.5])),
    "batched_1x2x3": ((2, 4, 5), np.array([[[0.5, -1.0, 0.25], [1.0, 2.0, -0.5]]])),
}


@pytest.mark.parametrize("case", sorted(VALID))
def test_correlate_valid_adjoint(case: str) -> None:
    shape, w = VALID[case]
    graph = unary_graph(shape, lambda x: x.builder.emit("correlate_valid", [x], {"weights": w.tolist()}))
    c = operator_matrix(shape, lambda e: signal.correlate(e, w, mode="valid"))
    rng = np.random.default_rng(6)
    x0 = rng.normal(size=shape)
    y = dp.interpret(graph, x=x0)["y"]
    assert_close(y, signal.correlate(x0, w, mode="valid"))
    g = rng.normal(size=y.shape)
    assert_close(grad_with_seed(graph, g, x0), (c.T @ g.ravel()).reshape(shape))

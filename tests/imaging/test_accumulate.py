"""``accumulate="dtype"``: float32 stencil taps summed as an ordered float32 ``fmaf`` chain.

The reference's chain (`dpt_ir.ops.stencil._fma_chain`) is checked against the C library's
``fmaf`` step by step (an oracle from outside), over magnitudes from 1e-30 to 1e30 and the
special values. The compiled stencils of every boundary mode equal the reference bit for bit,
values and gradients (the adjoint is a correlation with the same accumulation), with ±0, ±inf
and NaN in the input, for one and two threads, through a `dp.scan` too. Against the exact sum
the error stays inside ``(taps + 1) * 2^-24 * sum |w x|``. The default stays SciPy's (float64
accumulation: the pinned hashes of every other stencil program are unchanged), and a bad value
is a ContractError naming the function.
"""

from __future__ import annotations

import ctypes
import ctypes.util

import numpy as np
import pytest
import scipy.ndimage as ndi

import dpt_ir as dp
from dpt_ir.ops.stencil import _fma_chain

MODES = ("reflect", "constant", "nearest", "mirror", "wrap")
K = np.array([[0.3, -1.7, 0.0], [2.2, 0.1, -0.45], [1.0 / 3.0, 0.0, 0.7]])  # 7 non-zero taps


def _libm_fmaf() -> ctypes._CFuncPtr:
    libm = ctypes.CDLL(ctypes.util.find_library("m") or "libm.so.6")
    libm.fmaf.restype = ctypes.c_float
    libm.fmaf.argtypes = [ctypes.c_float] * 3
    return libm.fmaf


def _bits(a: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(a).view(np.int32)


def test_the_reference_chain_is_the_c_librarys_fmaf_step_by_step() -> None:
    fmaf = _libm_fmaf()
    rng = np.random.default_rng(3)
    weights = [0.3, -1.7, 2.2, 0.1, 1.0 / 3.0]
    n = 1500
    xs = [(rng.standard_normal(n) * 10.0 ** rng.integers(-30, 30, n)).astype(np.float32) for _ in weights]
    xs[1][:6] = [np.inf, -np.inf, np.nan, 0.0, -0.0, 1e-45]  # 1e-45: the least float32 denormal
    xs[2][6:9] = [3e38, -3e38, 1e-40]  # overflow to inf, a denormal
    got = _fma_chain(list(zip(weights, xs, strict=True)), (n,))
    for i in range(n):
        s = np.float32(np.float32(weights[0]) * xs[0][i])
        for w, x in zip(weights[1:], xs[1:], strict=True):
            s = np.float32(fmaf(float(np.float32(w)), float(x[i]), float(s)))
        assert _bits(np.array([s]))[0] == _bits(got[i : i + 1])[0] or (np.isnan(s) and np.isnan(got[i])), i


def _graph(shape: tuple[int, int]) -> dp.Graph:
    g = dp.GraphBuilder("accumulate_dtype")
    x = g.input("x", shape)
    total = None
    for mode in MODES:
        y = dp.correlate(x, K, mode=mode, cval=0.25, accumulate="dtype")
        g.output(mode, y)
        term = dp.sum(y * y)
        total = term if total is None else total + term
    g.output("loss", total)
    return g.build()


@pytest.fixture(scope="module")
def program() -> dp.Program:
    return dp.compile(_graph((23, 19)), wrt=["x"], threads=1, checks=False)


def test_every_mode_equals_the_reference_bit_for_bit_with_special_values(program: dp.Program) -> None:
    x = np.random.default_rng(5).standard_normal((23, 19)).astype(np.float32)
    x[3, 4], x[10, 0], x[0, 7], x[22, 18], x[11, 11] = np.inf, np.nan, -0.0, -np.inf, 0.0
    out = program.run(x=x)
    ref = dp.interpret(program.graph, x=x)
    for mode in MODES:
        np.testing.assert_array_equal(_bits(out[mode]), _bits(ref[mode]), err_msg=mode)


def test_gradients_equal_the_reference_bit_for_bit_for_one_and_two_threads(program: dp.Program) -> None:
    x = np.random.default_rng(6).standard_normal((23, 19)).astype(np.float32)
    _, grads = program.value_and_grad(x=x)
    ref = dp.interpret_grad(program.graph, ["x"], x=x)["x"]
    np.testing.assert_array_equal(_bits(grads["x"]), _bits(ref))
    two = dp.compile(program.graph, wrt=["x"], threads=2, checks=False)
    np.testing.assert_array_equal(_bits(two.value_and_grad(x=x)[1]["x"]), _bits(grads["x"]))


def test_the_error_against_the_exact_sum_is_inside_the_bound(program: dp.Program) -> None:
    x = (np.random.default_rng(8).standard_normal((23, 19)) * 1e3).astype(np.float32)
    out = program.run(x=x)
    taps = int(np.count_nonzero(K))
    for mode in MODES:
        exact = ndi.correlate(x.astype(np.float64), K, mode=mode, cval=0.25)
        scale = ndi.correlate(np.abs(x.astype(np.float64)), np.abs(K), mode=mode, cval=0.25)
        err = np.abs(out[mode].astype(np.float64) - exact)
        assert np.all(err <= (taps + 1) * 2.0**-24 * scale), (mode, float(np.max(err / scale)))
        assert np.any(out[mode] != ndi.correlate(x, K, mode=mode, cval=0.25)), mode  # not SciPy's rounding


def test_a_scan_of_heat_steps_equals_the_reference_bit_for_bit() -> None:
    lap = [[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]]
    g = dp.GraphBuilder("heat_dtype")
    u0, k = g.input("u0", (12, 10)), g.input("k", (12, 10))
    u, _ = dp.scan(
        lambda u, _: (u + 0.2 * k * dp.correlate(u, lap, mode="nearest", accumulate="dtype"), None), u0, length=7
    )
    g.output("loss", dp.sum(u * u))
    graph = g.build()
    rng = np.random.default_rng(9)
    x = {"u0": rng.standard_normal((12, 10)), "k": rng.uniform(0.5, 1.0, (12, 10))}
    x = {name: v.astype(np.float32) for name, v in x.items()}
    out, grads = dp.compile(graph, wrt=["u0", "k"], threads=1).value_and_grad(**x)
    ref = dp.interpret_grad(graph, ["u0", "k"], **x)
    np.testing.assert_array_equal(out["loss"], dp.interpret(graph, **x)["loss"])
    for name in ("u0", "k"):
        np.testing.assert_array_equal(_bits(grads[name]), _bits(ref[name]), err_msg=name)


def test_the_attribute_is_in_the_ir_and_float64_is_the_default() -> None:
    g = dp.GraphBuilder("accumulate_text")
    x = g.input("x", (6, 5))
    g.output("a", dp.correlate(x, K, accumulate="dtype"))
    g.output("b", dp.gaussian_filter(x, 1.0))
    text = g.build().to_text()
    assert text.count('"accumulate": "dtype"') == 1 and text.count('"accumulate": "float64"') == 2, text
    assert dp.Graph.from_text(text) == g.build()


@pytest.mark.parametrize(
    ("build", "name"),
    [
        (lambda x: dp.correlate(x, K, accumulate="float32"), "dp.correlate"),
        (lambda x: dp.convolve1d(x, [1.0, 2.0], accumulate="half"), "dp.convolve1d"),
        (lambda x: dp.gaussian_filter(x, 1.0, accumulate=None), "dp.gaussian_filter"),
    ],
)
def test_a_bad_accumulation_is_a_contract_error_naming_the_function(build, name) -> None:  # type: ignore[no-untyped-def]
    g = dp.GraphBuilder("bad_accumulate")
    x = g.input("x", (6, 5))
    with pytest.raises(dp.ContractError, match=rf"{name}: accumulate must be 'float64' or 'dtype', found"):
        build(x)

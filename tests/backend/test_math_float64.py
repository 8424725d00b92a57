"""Accuracy of the math header's own float64 `exp`, `expm1`, `tanh`, `log`, `log1p`, `sin`,
`cos`, `atan2` and `erf` (`dp_math.h`, docs/math.md): the other float64 functions call libm; these are plain
arithmetic so their element loops vectorise (sin and cos past 2^20 rerun the block with libm).
Compiled through `dp.compile` (the generated element loop), on float64 values evenly spaced in
bit order over the whole domain (subnormals included) plus uniform samples of the central range,
against NumPy's 80-bit `longdouble` (x86 extended precision: 11 more bits than double), in
float64 ulps of the reference. Special values (+-0, +-inf, NaN, the overflow and underflow
thresholds, the fast trig range's end) give NumPy's float64 result exactly."""

from __future__ import annotations

import mpmath
import numpy as np
import pytest
import scipy.special as sp

import dpt_ir as dp

F64 = np.float64
N_ORDERED = 1 << 18
N_UNIFORM = 1 << 17
# The documented bounds (max ulp), docs/math.md: the measured maximum with a margin.
BOUNDS = {"exp": 1.5, "expm1": 1.5, "tanh": 2.0, "log": 1.5, "log1p": 2.0, "sin": 2.0, "cos": 2.0, "erf": 3.5}
ATAN2_BOUND = 2.0
ERF_EVERY = 8  # erf's sweep takes every 8th point (49 K): its mpmath reference costs ~40 us a point
DOMAINS = {
    "exp": (-746.0, 710.0),
    "expm1": (-60.0, 710.0),
    "tanh": (-40.0, 40.0),
    "log": (5e-324, 1.7976931348623157e308),
    "log1p": (-0.9999999999999999, 1.7976931348623157e308),
    "sin": (-1.7976931348623157e308, 1.7976931348623157e308),  # past 2^20: libm, by the rerun
    "cos": (-1.7976931348623157e308, 1.7976931348623157e308),
    "erf": (-10.0, 10.0),
}
CENTRAL = {"exp": (-5.0, 5.0), "expm1": (-2.0, 2.0), "tanh": (-1.5, 1.5), "log": (0.5, 2.0), "log1p": (-0.5, 1.0),
           "sin": (-1.1e6, 1.1e6), "cos": (-1.1e6, 1.1e6), "erf": (-3.0, 3.0)}  # fmt: skip
SPECIAL = [0.0, -0.0, np.inf, -np.inf, np.nan, 5e-324, -5e-324, 2.2250738585072014e-308,
           709.782712893384, 709.7827128933841, -745.1332191019411, -745.1332191019412, -708.4, 0.625,
           -0.625, 19.999999999999996, 20.0, 1e-300, -1e-300, 1e-8, 1e300, -1e300, 1.0, -1.0,
           1.7976931348623157e308, 0.7071067811865476, 1.4142135623730951, -2.0, -0.9999999999999999,
           1e-20, -1e-20, -40.0, -41.0, 1048575.9999999999, 1048576.0, 1.5707963267948966,
           3.141592653589793, 1e22]  # fmt: skip


def _key(v: float) -> int:
    i = int(np.array(v, F64).view(np.int64))
    return i if i >= 0 else -(i & 0x7FFFFFFFFFFFFFFF)


def _ordered(lo: float, hi: float, n: int) -> np.ndarray:
    """``n`` float64 values evenly spaced in bit order from ``lo`` to ``hi``."""
    k0, k1 = _key(lo), _key(hi)
    step = (k1 - k0) // (n - 1)  # a Python int: the span itself may pass 2^63
    keys = k0 + np.arange(n, dtype=np.int64) * step
    bits = np.where(keys >= 0, keys, (-keys) | np.int64(-0x8000000000000000))
    return bits.view(F64)


def _points(name: str) -> np.ndarray:
    rng = np.random.default_rng(7)
    lo, hi = CENTRAL[name]
    return np.concatenate([_ordered(*DOMAINS[name], N_ORDERED), rng.uniform(lo, hi, N_UNIFORM)])


@pytest.fixture(scope="module")
def compiled() -> dp.Program:
    n = N_ORDERED + N_UNIFORM
    g = dp.GraphBuilder("math_float64")
    x = {name: g.input(f"x_{name}", (n,), dtype="float64", requires_grad=False) for name in BOUNDS}
    s = g.input("s", (len(SPECIAL),), dtype="float64", requires_grad=False)
    ya, xa = (g.input(k, (n,), dtype="float64", requires_grad=False) for k in ("ya", "xa"))
    sy, sx = (g.input(k, (len(SPECIAL) ** 2,), dtype="float64", requires_grad=False) for k in ("sy", "sx"))
    g.output("atan2", dp.arctan2(ya, xa))
    g.output("atan2_s", dp.arctan2(sy, sx))
    for name in BOUNDS:
        g.output(name, getattr(dp, name)(x[name]))
        g.output(f"{name}_s", getattr(dp, name)(s))
    return dp.compile(g.build(), device="cpu", threads=1, checks=False)


def _pairs() -> tuple[np.ndarray, np.ndarray]:
    """atan2's (y, x): y over the whole range in bit order, x a shuffle of it (every ratio and
    quadrant), then uniform pairs near the origin."""
    rng = np.random.default_rng(8)
    big = np.finfo(F64).max
    y = _ordered(-big, big, N_ORDERED)
    x = rng.permutation(y)
    near = rng.uniform(-3.0, 3.0, (2, N_UNIFORM))
    return np.concatenate([y, near[0]]), np.concatenate([x, near[1]])


def _run(program: dp.Program) -> dict[str, np.ndarray]:
    inputs = {f"x_{name}": _points(name) for name in BOUNDS}
    ya, xa = _pairs()
    sy, sx = (v.ravel() for v in np.meshgrid(SPECIAL, SPECIAL, indexing="ij"))
    return program.run(**inputs, s=np.array(SPECIAL, dtype=F64), ya=ya, xa=xa, sy=sy, sx=sx)


def _mp_erf(x: np.ndarray) -> np.ndarray:
    """erf at 80 bits (mpmath), as longdouble: the double nearest, plus the rest."""
    out = np.empty(x.shape, dtype=np.longdouble)
    with mpmath.workprec(80):
        for k, v in enumerate(x.tolist()):
            r = mpmath.erf(mpmath.mpf(v))
            hi = float(r)
            out[k] = np.longdouble(hi) + np.longdouble(float(r - hi))
    return out


def _ulps(got: np.ndarray, x: np.ndarray, name: str, x2: np.ndarray | None = None) -> np.ndarray:
    """|got - ref| in float64 ulps of ``ref`` (``name``'s NumPy function of ``x`` (and ``x2``)
    in longdouble); a non-finite reference must be met exactly."""
    args = (x,) if x2 is None else (x, x2)
    with np.errstate(over="ignore", under="ignore"):
        if name == "erf":  # NumPy has none, SciPy's is float64
            ref = _mp_erf(x)
        else:
            ref = getattr(np, name)(*(a.astype(np.longdouble) for a in args))
        near = ref.astype(F64)  # past the float64 range: inf
    finite = np.isfinite(near)
    ulp = np.spacing(np.abs(near[finite])).astype(np.longdouble)
    err = np.zeros(got.shape)
    err[finite] = np.abs(got[finite].astype(np.longdouble) - ref[finite]) / ulp
    err[~finite] = np.where(got[~finite] == near[~finite], 0.0, np.inf)
    return err


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63, reason="needs x86 80-bit longdouble")
@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_float64_max_ulp_within_documented_bound(name: str, compiled: dp.Program) -> None:
    every = ERF_EVERY if name == "erf" else 1  # erf's reference is mpmath, point by point
    x = _points(name)[::every]
    err = _ulps(_run(compiled)[name][::every], x, name)
    worst = int(np.argmax(err))
    assert err[worst] <= BOUNDS[name], f"{name}({x[worst]!r}): {err[worst]:.3f} ulp > {BOUNDS[name]}"


@pytest.mark.skipif(np.finfo(np.longdouble).nmant < 63, reason="needs x86 80-bit longdouble")
def test_float64_atan2_max_ulp_within_documented_bound(compiled: dp.Program) -> None:
    y, x = _pairs()
    err = _ulps(_run(compiled)["atan2"], y, "arctan2", x)
    worst = int(np.argmax(err))
    assert err[worst] <= ATAN2_BOUND, f"atan2({y[worst]!r}, {x[worst]!r}): {err[worst]:.3f} ulp > {ATAN2_BOUND}"


def test_float64_atan2_special_values_match_numpy(compiled: dp.Program) -> None:
    """Every pair of special values (signed zeros, infinities, NaN): NumPy's result, the sign
    of a zero included, and within rounding elsewhere."""
    sy, sx = (v.ravel() for v in np.meshgrid(SPECIAL, SPECIAL, indexing="ij"))
    got, want = _run(compiled)["atan2_s"], np.arctan2(sy, sx)
    same = (np.isnan(got) & np.isnan(want)) | ((got == want) & (np.signbit(got) == np.signbit(want)))
    close = np.isclose(got, want, rtol=4.5e-16, atol=0.0) & (np.signbit(got) == np.signbit(want))
    bad = np.flatnonzero(~(same | close))
    assert bad.size == 0, [f"atan2({sy[k]!r}, {sx[k]!r}) = {got[k]!r}, NumPy {want[k]!r}" for k in bad[:5]]


@pytest.mark.parametrize("name", sorted(BOUNDS))
def test_float64_special_values_match_numpy(name: str, compiled: dp.Program) -> None:
    s = np.array(SPECIAL, dtype=F64)
    got = _run(compiled)[f"{name}_s"]
    with np.errstate(over="ignore", under="ignore", divide="ignore", invalid="ignore"):
        want = sp.erf(s) if name == "erf" else getattr(np, name)(s)  # SciPy's keeps erf(-0) = -0
    for k, v in enumerate(s):
        if not np.isfinite(want[k]) or want[k] == 0.0 or abs(want[k]) == 1.0:  # exact cases
            same = (np.isnan(got[k]) and np.isnan(want[k])) or (
                got[k] == want[k] and np.signbit(got[k]) == np.signbit(want[k])
            )
            assert same, f"{name}({v!r}) = {got[k]!r}, NumPy {want[k]!r}"
    finite = np.isfinite(want)
    np.testing.assert_allclose(got[finite], want[finite], rtol=2.3e-16 * (BOUNDS[name] + 1.0), atol=0.0)

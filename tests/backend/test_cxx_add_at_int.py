"""Integer ``add_at`` on the C++ path equals ``np.add.at``: int32 and uint8, positions read
from memory (the sort form) or constant (the transpose form), along an axis and along every
axis, repeated and negative positions, fused producers, and wrap-around on overflow as
NumPy's. One program holds every case, so the module compiles once."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

RNG = np.random.default_rng(27)
CONST = np.array([3, 0, 3, -1, 3, 4])


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("add_at_int")
    a = g.input("a", (8,), "int32")
    i = g.input("i", (40,), "int32")
    v = g.input("v", (40,), "int32")
    m = g.input("m", (6, 5), "int32")
    u = g.input("u", (9,), "uint8")
    j = g.input("j", (30,), "int32")
    w = g.input("w", (30,), "uint8")
    k = g.input("k", (6, 5), "int32")
    c = g.input("c", (6, 6), "int32")
    r = g.input("r", (6,), "int32")
    g.output("sorted", dp.add_at(a, i, v))
    g.output("fused", dp.add_at(a * 3, i, v - 7))
    g.output("constant", dp.add_at(m, (slice(None), CONST), c * 2 + 1))
    g.output("rows", dp.add_at(m, r, k * 2))
    g.output("uint8", dp.add_at(u, j, w))
    return g.build()


def _values() -> dict[str, np.ndarray]:
    big = np.iinfo(np.int32).max
    return {
        "a": RNG.integers(-50, 50, 8).astype(np.int32),
        "i": RNG.integers(-8, 8, 40).astype(np.int32),
        "v": np.concatenate([[big, big, big], RNG.integers(-1000, 1000, 37)]).astype(np.int32),
        "m": RNG.integers(-9, 9, (6, 5)).astype(np.int32),
        "u": RNG.integers(0, 256, 9).astype(np.uint8),
        "j": RNG.integers(0, 9, 30).astype(np.int32),
        "w": RNG.integers(0, 256, 30).astype(np.uint8),
        "k": RNG.integers(-9, 9, (6, 5)).astype(np.int32),
        "c": RNG.integers(-9, 9, (6, 6)).astype(np.int32),
        "r": np.array([1, -1, 1, 0, 5, 1], np.int32),
    }


def _want(x: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    def add_at(base: np.ndarray, where: object, values: np.ndarray) -> np.ndarray:
        out = base.copy()
        np.add.at(out, where, values)
        return out

    a, i, v, m, k = x["a"], x["i"], x["v"], x["m"], x["k"]
    with np.errstate(over="ignore"):
        return {
            "sorted": add_at(a, i, v),
            "fused": add_at(a * 3, i, v - 7),
            "constant": add_at(m, (slice(None), CONST), x["c"] * 2 + 1),
            "rows": add_at(m, x["r"], k * 2),
            "uint8": add_at(x["u"], x["j"], x["w"]),
        }


@pytest.fixture(scope="module")
def program() -> dp.Program:
    return dp.compile(_graph(), device="cpu")


def test_integer_add_at_equals_numpy(program: dp.Program) -> None:
    values = _values()
    got = program.run(**values)
    want = _want(values)
    interpreted = dp.interpret(_graph(), **values)
    for name, expected in want.items():
        assert got[name].dtype == expected.dtype, name
        np.testing.assert_array_equal(got[name], expected, err_msg=name)
        np.testing.assert_array_equal(interpreted[name], expected, err_msg=name)

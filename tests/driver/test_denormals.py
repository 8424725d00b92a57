"""``dp.compile(..., denormals=...)``: ``keep`` computes IEEE denormals, ``flush`` makes the CPU
kernels flush denormal results to zero and read denormal inputs as zero (MXCSR FTZ | DAZ around
each kernel call, restored after), deterministically; anything else is a ContractError."""

from __future__ import annotations

import platform

import numpy as np
import pytest

import dpt_ir as dp

pytestmark = pytest.mark.skipif(platform.machine() not in ("x86_64", "AMD64"), reason="MXCSR is x86-64's")

TINY = np.float32(1e-30)  # times 1e-10: 1e-40, a float32 denormal


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("denormals")
    x = g.input("x", (4, 33))
    g.output("y", x * 1e-10)
    g.output("loss", dp.sum(x * x))
    return g.build()


def test_keep_computes_denormals_and_flush_flushes_them() -> None:
    x = np.full((4, 33), TINY, np.float32)
    keep = dp.compile(_graph(), device="cpu", checks=False).run(x=x)["y"]
    flush = dp.compile(_graph(), device="cpu", checks=False, denormals="flush").run(x=x)["y"]
    np.testing.assert_array_equal(keep, x * np.float32(1e-10))  # NumPy's IEEE result
    assert np.all(keep != 0)
    assert np.all(flush == 0)
    denormal_in = np.full((4, 33), np.float32(1e-39), np.float32)  # read as zero
    assert np.all(dp.compile(_graph(), device="cpu", denormals="flush").run(x=denormal_in)["y"] == 0)


def test_the_caller_keeps_its_mode_and_results_stay_deterministic() -> None:
    x = np.random.default_rng(0).normal(size=(4, 33)).astype(np.float32)
    p1 = dp.compile(_graph(), wrt=["x"], loss="loss", device="cpu", threads=1, denormals="flush")
    p2 = dp.compile(_graph(), wrt=["x"], loss="loss", device="cpu", threads=2, denormals="flush")
    (o1, g1), (o2, g2) = p1.value_and_grad(x=x), p2.value_and_grad(x=x)
    assert o1["loss"].tobytes() == o2["loss"].tobytes() and g1["x"].tobytes() == g2["x"].tobytes()
    # NumPy in this thread still computes denormals: the kernels restored the caller's mode.
    assert np.float32(1e-30) * np.float32(1e-10) != 0


@pytest.mark.parametrize("bad", ["ftz", None, True])
def test_another_value_is_refused(bad: object) -> None:
    with pytest.raises(dp.ContractError, match="denormals must be 'keep' or 'flush'"):
        dp.compile(_graph(), device="cpu", denormals=bad)  # type: ignore[arg-type]


def test_loop_programs_take_the_option() -> None:
    g = dp.GraphBuilder("denormals_scan")
    u0 = g.input("u0", (8, 16))
    final, _ = dp.scan(lambda u, _: (u * 0.25, u), u0, length=12)
    g.output("u", final)
    graph = g.build()
    u0 = np.full((8, 16), np.float32(1e-31), np.float32)  # 1e-31 / 4**12: about 6e-39, a denormal
    keep = dp.compile(graph, device="cpu", checks=False).run(u0=u0)["u"]
    flush = dp.compile(graph, device="cpu", checks=False, denormals="flush").run(u0=u0)["u"]
    np.testing.assert_array_equal(keep, dp.interpret(graph, u0=u0)["u"])
    assert np.all(keep != 0) and np.all(flush == 0)

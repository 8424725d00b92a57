"""Epilogues on the C++ path: elementwise consumers of a finished reduction, computed once
per output (in the reduction's unit when a row is one partial, in the ordered final
combine when it is several). Trig there takes the precise path: an epilogue is outside the
element loop, so no huge-argument rerun exists for it (it once referenced the loop's ``P``
and ``big`` and did not compile).

Cost: one graph (float32 and float64, one and several partials per output), one module.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

from .harness import off_cxx

ROWS = (4, 8)  # each row is one partial
LONG = (200_000,)  # several 64 K-element tasks: partials and an ordered final combine


def epilogues() -> dp.Graph:
    g = dp.GraphBuilder("cxx_epilogue")
    for dtype in ("float32", "float64"):
        a = g.input(f"a_{dtype}", ROWS, dtype)
        b = g.input(f"b_{dtype}", LONG, dtype)
        g.output(f"rows_{dtype}", dp.cos(dp.sum(a, axis=1)) * 2.0 + dp.tanh(dp.max(a, axis=1)))
        g.output(f"long_{dtype}", dp.sin(dp.sum(b)) * dp.cos(dp.mean(b)))
        g.output(f"huge_{dtype}", dp.sin(dp.sum(a, axis=1) * 1.0e6))  # past the fast trig range
    return g.build()


@pytest.fixture(scope="module")
def program() -> dp.Program:
    return dp.compile(epilogues(), device="cpu")


def test_trig_epilogues_compile_and_match_the_interpreter(program: dp.Program) -> None:
    rng = np.random.default_rng(3)
    feed = {}
    for dtype in ("float32", "float64"):
        feed[f"a_{dtype}"] = rng.uniform(-1.0, 1.0, ROWS).astype(dtype)
        feed[f"b_{dtype}"] = rng.uniform(-1.0, 1.0, LONG).astype(dtype)
    out = program.run(**feed)
    ref = dp.interpret(program.graph, **feed)
    for name, want in ref.items():
        rtol, atol = (1e-5, 1e-5) if name.endswith("float32") else (1e-9, 1e-9)
        if name.startswith("huge_float32"):  # sin of a float32 near 1e6: the argument's own rounding
            atol = 2e-3
        np.testing.assert_allclose(out[name], want, rtol=rtol, atol=atol, err_msg=name)
    off = off_cxx(program.plans["run"].kernels, program.plans["run"].module.text)
    assert not off, off
    assert any(k.name.endswith("_final") for k in program.plans["run"].kernels)  # the several-partials case

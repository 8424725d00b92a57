"""Golden generated modules: the full text (C++ element code, CPU and CUDA drivers, Warp
glue) of one small program per group kind, kept readable under ``golden/cxx/<case>.py``.

`test_generated_hashes` proves a refactoring leaves the code alone; these files show what
changed when the code is meant to change: a reviewer reads the diff. Regenerate with
``python -m pytest tests/backend/test_golden_cxx.py --regen-golden``. Only the passes and code
generation run: nothing is built with clang.
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp

GOLDEN = Path(__file__).parent / "golden" / "cxx"
SHAPE = (5, 7)  # odd: every driver's tail is generated


def _pointwise(g: dp.GraphBuilder) -> None:
    x = g.input("x", shape=SHAPE, dtype="float32")
    g.output("y", dp.exp(x) * x + 1.0)


def _reduction(g: dp.GraphBuilder) -> None:
    x = g.input("x", shape=SHAPE, dtype="float32")
    g.output("y", dp.sum(dp.square(x), axis=1))


def _rows(g: dp.GraphBuilder) -> None:  # a row set: the shift, sum and normalisation of a softmax
    x = g.input("x", shape=SHAPE, dtype="float32")
    g.output("y", x - dp.logsumexp(x, axis=1, keepdims=True))


def _stencil(g: dp.GraphBuilder) -> None:
    x = g.input("x", shape=SHAPE, dtype="float32")
    k = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]], dtype=np.float32)
    g.output("y", dp.convolve(x, k, mode="reflect"))


def _gather(g: dp.GraphBuilder) -> None:
    x = g.input("x", shape=SHAPE, dtype="float32")
    idx = g.input("idx", shape=(4,), dtype="int32", requires_grad=False)
    g.output("y", dp.take(x, idx, axis=1))


def _scatter(g: dp.GraphBuilder) -> None:
    a = g.input("a", shape=(6,), dtype="float32")
    idx = g.input("idx", shape=(9,), dtype="int32", requires_grad=False)
    v = g.input("v", shape=(9,), dtype="float32")
    g.output("y", dp.add_at(a, idx, v))


def _matmul(g: dp.GraphBuilder) -> None:
    a = g.input("a", shape=SHAPE, dtype="float32")
    b = g.input("b", shape=(SHAPE[1], 3), dtype="float32")
    g.output("y", dp.matmul(a, b))


def _value_and_grad(g: dp.GraphBuilder) -> None:  # forward and backward, one fused pass
    x = g.input("x", shape=SHAPE, dtype="float32")
    obs = g.input("obs", shape=SHAPE, dtype="float32", requires_grad=False)
    g.output("loss", dp.sum(dp.square(1.3 * dp.exp(-0.7 * x) - obs)))


CASES: dict[str, tuple[Callable[[dp.GraphBuilder], None], str]] = {
    "pointwise": (_pointwise, "run"),
    "reduction": (_reduction, "run"),
    "rows": (_rows, "run"),
    "stencil": (_stencil, "run"),
    "gather": (_gather, "run"),
    "scatter": (_scatter, "run"),
    "matmul": (_matmul, "run"),
    "value_and_grad": (_value_and_grad, "value_and_grad"),
}


def _text(case: str) -> str:
    build, plan = CASES[case]
    g = dp.GraphBuilder(case)
    build(g)
    wrt = ["x"] if plan == "value_and_grad" else None
    program = dp.compile(g.build(), wrt=wrt, device="cpu", threads=1)
    return program.plans[plan].module.text


@pytest.mark.parametrize("case", sorted(CASES))
def test_generated_module_matches_its_golden_file(case: str, regen_golden: bool) -> None:
    path = GOLDEN / f"{case}.py.txt"
    text = _text(case)
    if regen_golden:
        path.write_text(text)
        return
    assert path.exists(), f"no golden file {path.name}: run with --regen-golden"
    expected = path.read_text()
    assert text == expected, f"generated module of {case!r} differs from {path} (rerun with --regen-golden if meant)"

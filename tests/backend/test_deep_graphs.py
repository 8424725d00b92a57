"""Deep and wide graphs compile and match the interpreter (issue 14's "no unbounded
recursion"): a 100-step unrolled chain (600 nodes, a tape plan that saves every step) and
375 terms summed as a balanced tree (2,999 nodes, 375 gradient contributions to one
input). Both once failed with a RecursionError in code generation."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks.compile_scaling import chain, wide

from .harness import MODERATE_TOLERANCES, mismatch


@pytest.mark.parametrize(
    ("build", "nodes"),
    [(lambda: chain(100, (16,)), 601), (lambda: wide(375, (16,)), 2999)],
    ids=["chain100", "wide375"],
)
def test_compiles_and_matches_the_interpreter(build: Callable[[], dp.Graph], nodes: int) -> None:
    graph = build()
    assert len(graph.nodes) == nodes
    x = np.linspace(-1.0, 1.0, 16, dtype=np.float32)
    program = dp.compile(graph, wrt=["x"])
    out, grads = program.value_and_grad(x=x)
    want = dp.interpret(graph, x=x)
    want_grad = dp.interpret_grad(graph, ["x"], x=x)
    problems = [
        mismatch(out["loss"], want["loss"], "loss", MODERATE_TOLERANCES),
        mismatch(grads["x"], want_grad["x"], "gradient", MODERATE_TOLERANCES),
    ]
    with program.tape_pass() as tp:
        tp.forward(x=x)
    tape = tp.backward(seed={"loss": 1.0})["x"].numpy().copy()
    tp.close()
    problems.append(mismatch(tape, want_grad["x"], "tape gradient", MODERATE_TOLERANCES))
    assert not [p for p in problems if p], problems

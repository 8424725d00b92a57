"""Compiled values and gradients of every op case (`tests/op_cases.py`) against the
interpreter (DESIGN §8), table-driven.

All cases of one dtype are compiled as one program (the disjoint union of the case
graphs, plus a loss that sums ``sum(out * seed)`` over the differentiable cases), so the
whole table costs two Warp modules. For every case: ``run``, ``value_and_grad`` and a tape
pass's forward give the interpreter's outputs (integers and bools exactly, float32 within
rtol 1e-5, float64 within rtol 1e-12, with an absolute part relative to the output's
magnitude); the ``value_and_grad`` and tape-pass gradients give ``dp.interpret_grad``'s
with the same cotangent seed.
"""

from __future__ import annotations

import pytest

from .conftest import op_cases
from .harness import Batch, compare_batch

_RESULTS: dict[str, dict[str, list[str]]] = {}


def _results(batch: Batch) -> dict[str, list[str]]:
    """Mismatches per case id, computed once per batch."""
    if batch.name not in _RESULTS:
        _RESULTS[batch.name] = compare_batch(batch)
    return _RESULTS[batch.name]


def _params(dtype: str) -> list[pytest.param]:
    return [pytest.param(pid, id=case.name) for pid, case in op_cases(dtype)]


@pytest.mark.parametrize("pid", _params("float64"))
def test_op_case_float64(ops_float64: Batch, pid: str) -> None:
    problems = _results(ops_float64)[pid]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("pid", _params("float32"))
def test_op_case_float32(ops_float32: Batch, pid: str) -> None:
    problems = _results(ops_float32)[pid]
    assert not problems, "\n".join(problems)

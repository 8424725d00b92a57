"""Compiled values and gradients of every op case (`tests/op_cases.py`) against the
interpreter (DESIGN §8), table-driven, and of every special-value case.

All cases of one dtype are compiled as one program (the disjoint union of the case
graphs, plus a loss that sums ``sum(out * seed)`` over the differentiable cases), so the
whole table costs two Warp modules. For every case: ``run``, ``value_and_grad`` and a tape
pass's forward give the interpreter's outputs (integers and bools exactly, float32 within
rtol 1e-5, float64 within rtol 1e-12, with an absolute part relative to the output's
magnitude); the ``value_and_grad`` and tape-pass gradients give ``dp.interpret_grad``'s
with the same cotangent seed.

Special values (`op_cases.SPECIAL_CASES`, whose interpreted values and gradients
`tests/ops/test_special_values.py` checks against NumPy and PyTorch) run the same way in one
more program (both dtypes), compiled with ``checks=False`` (see `conftest.special_batch`):
NaN where the interpreter has NaN, the same infinities, finite values within
`op_cases.SPECIAL_RTOL`. With the checks compiled in (the op-table programs), finite
results at special inputs pass the checks, and a non-finite one raises NumericalError.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from op_cases import CASES, special_mismatch

import dpt_ir as dp

from .conftest import op_cases, special_cases
from .harness import Batch, Comparator, compare_batch, mismatch, prefixed

_RESULTS: dict[str, dict[str, list[str]]] = {}


def _results(batch: Batch, comparator: Comparator | None = None) -> dict[str, list[str]]:
    """Mismatches per case id, computed once per batch."""
    if batch.name not in _RESULTS:
        _RESULTS[batch.name] = compare_batch(batch, comparator=comparator)
    return _RESULTS[batch.name]


def _params(dtype: str) -> list[Any]:
    return [pytest.param(pid, id=case.name) for pid, case in op_cases(dtype)]


@pytest.mark.parametrize("pid", _params("float64"))
def test_op_case_float64(ops_float64: Batch, pid: str) -> None:
    problems = _results(ops_float64)[pid]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("pid", _params("float32"))
def test_op_case_float32(ops_float32: Batch, pid: str) -> None:
    problems = _results(ops_float32)[pid]
    assert not problems, "\n".join(problems)


@pytest.mark.parametrize("pid", [pytest.param(pid, id=f"{c.name}-{d}") for pid, d, c in special_cases()])
def test_special_values(special_batch: Batch, pid: str) -> None:
    problems = _results(special_batch, special_mismatch)[pid]
    assert not problems, "\n".join(problems)


# -- special values under the status checks (the op-table program, no new compile) --------
def _ids_of(ops: tuple[str, ...]) -> list[str]:
    return [pid for pid, case in op_cases("float64") if case.op in ops and case.wrt]


def test_finite_results_at_zero_pass_the_checks(ops_float64: Batch) -> None:
    """pow at 0 ** 0 and atan2 at the origin have finite values and gradients (0, the
    limit convention): with the checks compiled in, no intermediate NaN raises."""
    ids = _ids_of(("pow", "atan2"))
    feed = batch_feed_with(ops_float64, {pid: 0.0 for pid in ids})
    assert ops_float64.program is not None
    _, grads = ops_float64.program.value_and_grad(**feed)
    for pid in ids:
        inputs = {k: np.zeros_like(v) for k, v in ops_float64.inputs[pid].items()}
        graph, wrt = ops_float64.graphs[pid], list(ops_float64.wrt[pid])
        expected = dp.interpret_grad(graph, wrt, seed=ops_float64.seeds[pid], **inputs)
        for w, g in expected.items():
            assert np.isfinite(g).all()
            msg = mismatch(grads[prefixed(pid, w)], g, f"{pid} d/d{w}")
            assert not msg, msg


def test_a_non_finite_result_raises_numerical_error(ops_float64: Batch) -> None:
    """A NaN input of one case raises NumericalError naming that case's node; the program
    stays usable."""
    (pid,) = [pid for pid, case in op_cases("float64") if case.name == "log1p/rank1"]
    assert ops_float64.program is not None
    with pytest.raises(dp.NumericalError, match=rf"{pid}\."):
        ops_float64.program.run(**batch_feed_with(ops_float64, {pid: np.nan}))
    out = ops_float64.program.run(**ops_float64.feed())
    assert np.isfinite(out[prefixed(pid, "out")]).all()


def batch_feed_with(batch: Batch, fills: dict[str, float]) -> dict[str, np.ndarray]:
    """``batch.feed()`` with every float input of the cases in ``fills`` set to the value."""
    feed = batch.feed()
    for pid, value in fills.items():
        for name, v in batch.inputs[pid].items():
            if v.dtype.kind == "f":
                feed[prefixed(pid, name)] = np.full_like(v, value)
    return feed


def test_special_cases_cover_the_op_table() -> None:
    """The special-value batches exercise every op the op-table batches do, but for the
    ones without float values."""
    from op_cases import NO_SPECIAL_VALUES, SPECIAL_CASES

    assert {c.op for c in CASES} - set(NO_SPECIAL_VALUES) <= {c.op for c in SPECIAL_CASES}

"""`benchmarks.suite.bench_case`: peers that fail are left out, wrong results stop the run."""

from __future__ import annotations

import argparse
from typing import Any

import numpy as np
import pytest

from benchmarks import suite
from benchmarks.cases import CASES
from benchmarks.contenders import CONTENDERS, Contender

ARGS = argparse.Namespace(size=8, reps=2, device="cpu")


def _broken(*_: Any) -> Any:
    raise RuntimeError("backend 'inductor' failed\nlong traceback text")


def _wrong(case: Any, graph: Any, inputs: dict[str, np.ndarray], device: str) -> Any:
    return lambda: (1.0, np.zeros_like(inputs[case.wrt]))


def test_a_failing_peer_is_left_out_and_named() -> None:
    failures: list[str] = []
    contenders = [CONTENDERS["dpt_ir"], Contender("broken", "raises", _broken), CONTENDERS["numpy"]]
    results = suite.bench_case(CASES["beer"], contenders, ARGS, failures)
    assert list(results) == ["dpt_ir", "numpy"]
    assert failures == ["beer/broken: RuntimeError: backend 'inductor' failed"]
    assert all(len(m.times_s) == 2 and m.grad_error < 1e-5 for m in results.values())


def test_a_wrong_peer_stops_the_run() -> None:
    with pytest.raises(SystemExit, match="beer/wrong: loss"):
        suite.bench_case(CASES["beer"], [CONTENDERS["dpt_ir"], Contender("wrong", "zeros", _wrong)], ARGS, [])


def test_an_error_of_dpt_ir_is_not_swallowed() -> None:
    with pytest.raises(RuntimeError, match="inductor"):
        suite.bench_case(CASES["beer"], [Contender("dpt_ir", "raises", _broken)], ARGS, [])

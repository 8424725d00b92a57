"""`benchmarks.suite.configure_environment`: OpenMP pools wait passively unless told otherwise."""

from __future__ import annotations

import os

import pytest

from benchmarks import suite


def _configure(monkeypatch: pytest.MonkeyPatch) -> None:
    for var in ("XLA_FLAGS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS"):
        monkeypatch.setenv(var, os.environ.get(var, ""))  # restored after the test
    suite.configure_environment(len(os.sched_getaffinity(0)), fresh_caches=False)


def test_openmp_waits_passively_by_default(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv("OMP_WAIT_POLICY", raising=False)
    _configure(monkeypatch)
    assert os.environ["OMP_WAIT_POLICY"] == "PASSIVE"


def test_an_explicit_wait_policy_is_kept(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OMP_WAIT_POLICY", "ACTIVE")
    _configure(monkeypatch)
    assert os.environ["OMP_WAIT_POLICY"] == "ACTIVE"

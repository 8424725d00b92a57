"""`Program.report` is a typed, validated `ProgramReport`: its builds follow the modules as
they are built, and a dump's ``report.json`` holds the same model as JSON."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pydantic
import pytest

import dpt_ir as dp
from dpt_ir.runtime.report import BuildRow, ProgramReport


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("reported")
    x = g.input("x", shape=(3, 5), dtype="float32")
    g.output("loss", dp.sum(dp.square(x)))
    return g.build()


def test_report_is_typed_and_builds_follow_the_calls(tmp_path: Path) -> None:
    program = dp.compile(_graph(), wrt=["x"], device="cpu", dump_dir=tmp_path)
    report = program.report
    assert isinstance(report, ProgramReport) and report.cache == "miss"
    assert set(report.plans) == {"run", "value_and_grad", "tape"}
    assert report.plans["value_and_grad"].kernels >= 1 and report.launches >= 3
    program.run(x=np.ones((3, 5), np.float32))
    builds = program.report.builds
    assert builds["run"].built and builds["run"].build_seconds is not None
    dumped = json.loads((tmp_path / "report.json").read_text())["program"]
    assert ProgramReport.model_validate(dumped).plans == report.plans


def test_report_rows_are_validated() -> None:
    with pytest.raises(pydantic.ValidationError):
        BuildRow(module="m", built="perhaps", build_seconds=None)  # type: ignore[arg-type]
    with pytest.raises(pydantic.ValidationError):
        BuildRow(module="m", built=True, build_seconds=None, extra=1)  # type: ignore[call-arg]

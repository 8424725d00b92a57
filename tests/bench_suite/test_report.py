"""`benchmarks.report` (tables, JSON, plot) and the suite's correctness gate, on
hand-made measurements: no compiles."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from benchmarks import suite
from benchmarks.report import Measurement, format_report, results_from_json, to_json, write_json, write_plot


def _results() -> dict[str, dict[str, Measurement]]:
    return {
        "beer": {
            "dpt_ir": Measurement(3.0, times_s=[0.002, 0.001, 0.003], cpu_s=0.006, launches=1),
            "numpy": Measurement(0.01, times_s=[0.004, 0.004, 0.005], cpu_s=0.013),
        },
        "chain16": {
            "dpt_ir": Measurement(0.5, times_s=[0.010, 0.012], cpu_s=0.022, launches=1),
            "torch": Measurement(0.2, times_s=[0.030, 0.050], cpu_s=0.08),
        },
    }


def test_measurement_median_min_and_cpu_share() -> None:
    m = Measurement(1.0, times_s=[0.3, 0.1, 0.2, 0.4], cpu_s=0.5)
    assert m.median_s == pytest.approx(0.25) and m.min_s == 0.1 and m.cpu_per_wall == pytest.approx(0.5)


def test_report_ratios_are_peer_over_dpt_ir_and_missing_cells_dashed() -> None:
    text = format_report(_results())
    ratio_table = text.split("Speed-up of dpt_ir")[1].split("\n\n")[0]
    rows = {line.split()[0]: line.split()[1:] for line in ratio_table.splitlines()[3:]}
    # peers in first-seen order: numpy, torch
    assert rows["beer"] == ["2.00x", "-"] and rows["chain16"] == ["-", "3.64x"]
    assert "beer: dpt_ir 1" in text and "chain16: dpt_ir 1" in text


def test_json_round_trips_with_ratios(tmp_path: Path) -> None:
    path = tmp_path / "out" / "bench.json"
    write_json(path, _results(), {"device": "cpu"})
    doc = json.loads(path.read_text())
    assert doc["device"] == "cpu"
    assert doc["cases"]["beer"]["numpy"]["ratio_to_dpt_ir"] == pytest.approx(2.0)
    assert doc["cases"]["beer"]["dpt_ir"]["median_s"] == pytest.approx(0.002)
    assert doc == json.loads(json.dumps(to_json(_results(), {"device": "cpu"})))


def test_plot_is_a_png(tmp_path: Path) -> None:
    pytest.importorskip("matplotlib")
    path = tmp_path / "bench.png"
    write_plot(path, _results(), {"device": "cpu", "versions": {}, "date": "2026-11-29"})
    assert path.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and path.stat().st_size > 10_000


def test_check_refuses_a_wrong_loss_or_gradient() -> None:
    grad = np.array([1.0, -2.0, 0.5])
    assert suite.check("ok", (np.float32(2.0), grad.astype(np.float32)), 2.0, grad, 1e-4) < 1e-6
    with pytest.raises(SystemExit, match="loss"):
        suite.check("bad-loss", (2.01, grad), 2.0, grad, 1e-4)
    with pytest.raises(SystemExit, match="gradient"):
        suite.check("bad-grad", (2.0, grad * 1.01), 2.0, grad, 1e-4)


def test_unknown_case_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as info:
        suite.select("beer,nope", ["beer", "chain16"], "case")
    assert info.value.code == 2 and "unknown case nope; known: beer, chain16" in capsys.readouterr().err
    assert suite.select(None, ["a", "b"], "case") == ["a", "b"]


def test_a_recorded_run_reads_back(tmp_path: Path) -> None:
    path = tmp_path / "bench.json"
    write_json(path, _results(), {"device": "cpu"})
    again = results_from_json(json.loads(path.read_text()))
    assert again == _results()
    assert format_report(again) == format_report(_results())

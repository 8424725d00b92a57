"""``examples/heat_inverse.py`` at small size (20 heat steps on 16 x 16, 5 L-BFGS-B
iterations): it runs, prints the misfit per iteration, and the misfit falls."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "heat_inverse.py"


def test_heat_inverse_runs_small_and_reduces_the_misfit(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("heat_inverse_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    result = module.main(["--steps", "20", "--size", "16", "--iterations", "5", "--checkpoint", "4"])
    printed = capsys.readouterr().out
    assert printed.count("misfit") >= 6, printed
    assert result["final_misfit"] < 0.5 * result["initial_misfit"], result

"""``examples/fwi.py`` at small size (150 steps of 2 shots on 24 x 24, 6 L-BFGS-B
iterations): it runs, prints the misfit per iteration, the misfit falls, the recovered
model is closer to the true one than the starting model, and the picture is written."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from dpt_ir.ir.errors import ContractError

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "fwi.py"


def _example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("fwi_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_fwi_runs_small_reduces_the_misfit_and_the_model_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    small = ["--size", "24", "--sponge", "6", "--shots", "2", "--steps", "150", "--iterations", "6"]
    result = _example().main([*small, "--out", str(tmp_path / "models.png")])
    printed = capsys.readouterr().out
    assert printed.count("misfit") >= 7, printed
    assert result["final_misfit"] < 0.5 * result["initial_misfit"], result
    assert result["final_error"] < result["initial_error"], result
    assert Path(result["picture"]).is_file() and Path(result["picture"]).stat().st_size > 0


def test_fwi_sponge_damps_only_the_edges() -> None:
    gain = _example().damping(20, 5)
    assert np.all(gain[5:15, 5:15] == 1.0)
    assert gain[0, 0] < gain[2, 2] < 1.0 and np.allclose(gain, gain.T)


def test_fwi_source_outside_the_grid_is_a_contract_error() -> None:
    """The example's geometry with a source column past the grid: dp.add_at names the index and the axis."""
    fwi = _example()
    original = fwi.geometry
    fwi.geometry = lambda n, sponge, shots: (original(n, sponge, shots)[0], [n * n])  # one shot, off the grid
    with pytest.raises(ContractError, match=r"add_at.*index \d+ is out of bounds for an axis of size 576"):
        fwi.wave_graph(24, 6, 1, 10, None, observed=True)

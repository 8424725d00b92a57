"""``examples/newton_inverse.py`` at 8 x 8: trust-ncg through ``.hessp`` reaches the misfit of
L-BFGS-B in fewer function evaluations (its discrepancy-principle weight), and prints its figures."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "newton_inverse.py"


def test_newton_example_reaches_the_lbfgsb_misfit_in_fewer_evaluations(capsys: pytest.CaptureFixture[str]) -> None:
    spec = importlib.util.spec_from_file_location("newton_inverse_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    results = module.main(["--size", "8"])
    lbfgs, newton = results["L-BFGS-B"], results["trust-ncg"]
    assert newton.fun <= lbfgs.fun * (1 + 1e-9)
    assert newton.nfev < lbfgs.nfev
    out = capsys.readouterr().out
    assert "trust-ncg iterations" in out and "Hessian-vector products" in out

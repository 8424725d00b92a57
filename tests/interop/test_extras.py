"""Without the optional extras, dpt_ir.torch and dpt_ir.jax raise an ImportError naming the
extra to install (simulated by hiding the package from the import system)."""

from __future__ import annotations

import importlib
import subprocess
import sys
from pathlib import Path

import pytest

from tests.hiding import env_without


@pytest.mark.parametrize(
    ("adapter", "package", "extra"), [("dpt_ir.torch", "torch", "[torch]"), ("dpt_ir.jax", "jax", "[jax]")]
)
def test_missing_extra_names_it(monkeypatch: pytest.MonkeyPatch, adapter: str, package: str, extra: str) -> None:
    monkeypatch.setitem(sys.modules, package, None)  # `import <package>` now raises ImportError
    monkeypatch.delitem(sys.modules, adapter, raising=False)
    with pytest.raises(ImportError, match=rf"pip install 'dpt_ir\{extra}'"):
        importlib.import_module(adapter)


def test_scipy_adapter_needs_no_extra() -> None:
    """dpt_ir.scipy only builds a callable: it imports neither SciPy nor an extra."""
    module = importlib.import_module("dpt_ir.scipy")
    assert callable(module.objective)


def test_data_parallel_example_without_torch_names_the_extra(tmp_path: Path) -> None:
    """examples/data_parallel.py without PyTorch: one line naming the extra, no traceback."""
    example = Path(__file__).resolve().parents[2] / "examples" / "data_parallel.py"
    env = env_without(tmp_path, "torch")
    proc = subprocess.run(
        [sys.executable, str(example), "--world-size", "1", "--steps", "1"],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1 and "Traceback" not in proc.stderr, proc.stderr
    assert proc.stderr.strip().splitlines() == [
        "error: dpt_ir.torch needs PyTorch, which is not installed; install the extra: pip install 'dpt_ir[torch]'"
    ]

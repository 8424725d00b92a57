"""Without the optional extras, dpt_ir.torch and dpt_ir.jax raise an ImportError naming the
extra to install (simulated by hiding the package from the import system)."""

from __future__ import annotations

import importlib
import sys

import pytest


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

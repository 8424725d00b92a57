"""What the examples tell a user to do next is true: the quickstart's closing line names a
file that exists (with ``--save``) or says how to keep one."""

from __future__ import annotations

import importlib.util
from pathlib import Path
from types import ModuleType

import pytest

from dpt_ir.cli.commands import main

EXAMPLES = Path(__file__).resolve().parents[1] / "examples"


def _example(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"example_{name}", EXAMPLES / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quickstart_closing_line_names_a_file_that_exists(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    quickstart = _example("quickstart")
    graph = quickstart.transmission_loss((4, 4))
    kept = tmp_path / "graph.json"
    line = quickstart.save_and_reload(graph, kept)
    assert line.endswith(f"try `dpt-ir show {kept}`") and kept.is_file()
    assert main(["show", str(kept)]) == 0  # the command it suggests works
    assert capsys.readouterr().out == graph.to_text()
    line = quickstart.save_and_reload(graph, None)  # the default: a temporary folder, gone after
    assert "in a temporary folder" in line and "--save transmission_loss.json" in line

"""The `dpt-ir` command line: `ops`, `show`, and its error contract (one `error:` line on
stderr, exit status 2, no traceback unless --debug)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

import dpt_ir as dp
from dpt_ir.cli import main

REPO = Path(__file__).resolve().parents[1]


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("beer")
    x = g.input("x", (4, 4))
    obs = g.input("obs", (4, 4), requires_grad=False)
    g.output("loss", dp.sum(dp.square(1.3 * dp.exp(-0.7 * x) - obs)))
    return g.build()


def _run_module(*args: str) -> subprocess.CompletedProcess[str]:
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    return subprocess.run(
        [sys.executable, "-m", "dpt_ir", *args], capture_output=True, text=True, env=env, timeout=120
    )


def _rows(table: str) -> dict[str, list[str]]:
    lines = table.splitlines()
    assert lines[0].split()[0] == "name" and set(lines[1]) <= {"-", " "}
    return {line.split()[0]: line.split() for line in lines[2:]}


def test_ops_lists_every_op(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["ops"]) == 0
    rows = _rows(capsys.readouterr().out)
    assert set(rows) == {op.name for op in dp.all_ops()}


@pytest.mark.parametrize(
    "name, expected",
    [
        ("exp", ["exp", "elementwise", "1", "0", "out"]),
        ("mean", ["mean", "reduction", "1", "0", "count"]),
        ("where", ["where", "elementwise", "3", "1,2", "in0"]),
        ("div", ["div", "elementwise", "2", "0,1", "in1,out"]),
        ("concat", ["concat", "shape", "*", "*", "-"]),
        ("sign", ["sign", "elementwise", "1", "-", "-"]),
    ],
)
def test_ops_rows(capsys: pytest.CaptureFixture[str], name: str, expected: list[str]) -> None:
    main(["ops"])
    assert _rows(capsys.readouterr().out)[name] == expected


def test_ops_columns_are_aligned(capsys: pytest.CaptureFixture[str]) -> None:
    main(["ops"])
    lines = capsys.readouterr().out.splitlines()
    starts = [k for k, ch in enumerate(lines[1]) if ch == "-" and (k == 0 or lines[1][k - 1] == " ")]
    assert len(starts) == 5
    for line in lines[2:]:
        for k in starts[1:]:
            assert line[k - 1] == " " and line[k] != " ", line


def test_module_entry_point_prints_ops() -> None:
    proc = _run_module("ops")
    assert proc.returncode == 0, proc.stderr
    assert set(_rows(proc.stdout)) == {op.name for op in dp.all_ops()}


def test_show_prints_textual_ir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    graph = _graph()
    path = tmp_path / "beer.json"
    path.write_text(graph.model_dump_json())
    assert main(["show", str(path)]) == 0
    out = capsys.readouterr().out
    assert out.rstrip("\n") == graph.to_text().rstrip("\n")
    assert dp.Graph.from_text(out) == graph


def _invalid_graph_doc() -> str:
    doc = json.loads(_graph().model_dump_json())
    doc["nodes"][-1]["inputs"] = ["no_such_value"]
    return json.dumps(doc)


@pytest.mark.parametrize(
    "content, fragment",
    [
        (None, "cannot read"),
        ("{not json", "invalid JSON"),
        ('{"name": "g", "nodes": 3}', "nodes"),
        (_invalid_graph_doc(), "'no_such_value'"),
    ],
    ids=["missing-file", "not-json", "not-a-graph", "dangling-reference"],
)
def test_show_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, fragment: str
) -> None:
    path = tmp_path / "graph.json"
    if content is not None:
        path.write_text(content)
    assert main(["show", str(path)]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    prefix = f"error: {path}: "
    lines = captured.err.splitlines()
    assert len(lines) == 1 and lines[0].startswith(prefix), captured.err
    assert fragment in lines[0][len(prefix) :]


def test_show_error_in_a_real_process(tmp_path: Path) -> None:
    path = tmp_path / "bad.json"
    path.write_text(_invalid_graph_doc())
    proc = _run_module("show", str(path))
    assert proc.returncode == 2
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert "no_such_value" in proc.stderr


@pytest.mark.parametrize("argv", [["--debug", "show"], ["show", "--debug"]])
def test_debug_raises_with_traceback(tmp_path: Path, argv: list[str]) -> None:
    with pytest.raises(dp.ContractError, match="cannot read"):
        main([*argv, str(tmp_path / "missing.json")])


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err

"""The `dpt-ir` command line: `ops`, `show`, and its error contract (one `error:` line on
stderr, exit status 2, no traceback unless --debug)."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.cli.commands import main
from tests.hiding import env_without

REPO = Path(__file__).resolve().parents[2]


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("beer")
    x = g.input("x", (4, 4))
    obs = g.input("obs", (4, 4), requires_grad=False)
    g.output("loss", dp.sum(dp.square(1.3 * dp.exp(-0.7 * x) - obs)))
    return g.build()


def _run_module(*args: str, timeout: float = 120) -> subprocess.CompletedProcess[str]:
    paths = [str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}
    cmd = [sys.executable, "-m", "dpt_ir", *args]
    return subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)


def _rows(table: str, first: str = "name") -> dict[str, list[str]]:
    lines = table.splitlines()
    assert lines[0].split()[0] == first and set(lines[1]) <= {"-", " "}
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
def test_show_errors(tmp_path: Path, capsys: pytest.CaptureFixture[str], content: str | None, fragment: str) -> None:
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


def test_show_reads_textual_ir(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """A ``.ir`` file (or any document not starting with ``{``) is read as textual IR."""
    for name in ("beer.ir", "beer.txt"):
        path = tmp_path / name
        path.write_text(_graph().to_text())
        assert main(["show", str(path)]) == 0
        assert dp.Graph.from_text(capsys.readouterr().out) == _graph()
    path = tmp_path / "broken.ir"
    path.write_text("graf 'x' {}")
    assert main(["show", str(path)]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"error: {path}: ") and "textual IR" in err and "expected 'graph'" in err, err


def test_version(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["--version"])
    assert exc.value.code == 0
    assert capsys.readouterr().out == f"dpt-ir {dp.__version__}\n"


def test_readme_test_command_prints_the_summary_line(tmp_path: Path) -> None:
    """The README's test command, with the project's pytest options, shows pytest's summary
    (``addopts = "-q"`` plus the README's ``-q`` would make ``-qq``, which hides it)."""
    readme = (REPO / "README.md").read_text()
    command = next(line for line in readme.splitlines() if line.startswith("python -m pytest"))
    (tmp_path / "test_one.py").write_text("def test_one():\n    assert True\n")
    args = command.split()[3:]  # the options after `python -m pytest`
    cmd = [sys.executable, "-m", "pytest", *args, "-c", str(REPO / "pyproject.toml"), "-p", "no:cacheprovider"]
    proc = subprocess.run([*cmd, str(tmp_path / "test_one.py")], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert "1 passed" in proc.stdout, proc.stdout


def test_package_ships_py_typed() -> None:
    import tomllib

    assert (REPO / "dpt_ir" / "py.typed").is_file()
    config = tomllib.loads((REPO / "pyproject.toml").read_text())
    assert "py.typed" in config["tool"]["setuptools"]["package-data"]["dpt_ir"]


@pytest.mark.parametrize("argv", [["--debug", "show"], ["show", "--debug"]])
def test_debug_raises_with_traceback(tmp_path: Path, argv: list[str]) -> None:
    with pytest.raises(dp.ContractError, match="cannot read"):
        main([*argv, str(tmp_path / "missing.json")])


def test_usage_error_exits_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["no-such-command"])
    assert exc.value.code == 2
    assert "invalid choice" in capsys.readouterr().err


# -- compile / run / show --after / bench: driven as a new user would -------------------
# One small graph for all of them: Warp compiles its module once per session (the
# compile caches make the repeats cheap).


@pytest.fixture(scope="module")
def user_files(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A graph document, an inputs .npz, and inputs with a wrong shape / dtype / name."""
    root = tmp_path_factory.mktemp("cli_user")
    rng = np.random.default_rng(0)
    x = rng.random((4, 4), dtype=np.float32)
    obs = rng.random((4, 4), dtype=np.float32)
    files = {
        "graph": root / "beer.json",
        "inputs": root / "in.npz",
        "shape": root / "wrong_shape.npz",
        "dtype": root / "wrong_dtype.npz",
        "missing_input": root / "missing_input.npz",
        "not_npz": root / "not_npz.npz",
        "root": root,
    }
    files["graph"].write_text(_graph().model_dump_json())
    np.savez(files["inputs"], x=x, obs=obs)
    np.savez(files["shape"], x=x[:, :3], obs=obs)
    np.savez(files["dtype"], x=x.astype(np.float64), obs=obs)
    np.savez(files["missing_input"], x=x)
    files["not_npz"].write_text("these are not arrays")
    return files


def _inputs(files: dict[str, Path]) -> dict[str, np.ndarray]:
    with np.load(files["inputs"]) as npz:
        return {k: npz[k] for k in npz.files}


def test_compile_prints_summary_and_dumps(
    user_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "dumps"
    assert main(["compile", str(user_files["graph"]), "--wrt", "x", "--dump-dir", str(dump)]) == 0
    captured = capsys.readouterr()
    assert "compiling 'beer'" in captured.err and "several seconds" in captured.err
    out = captured.out
    for fragment in ("plan", "kernels", "value_and_grad", "tape", "run", "saved", "workspace", "cache", "compile"):
        assert fragment in out, out
    assert str(dump.resolve()) in out
    assert (dump / "report.json").is_file() and (dump / "kernels").is_dir()
    assert any(p.name.endswith("-fusion.ir") for p in dump.iterdir())
    for ir in (min(dump.glob("*.ir")), max(dump.glob("*.ir"))):  # the input and the scheduled graph
        assert main(["show", str(ir)]) == 0, capsys.readouterr().err
        assert capsys.readouterr().out == ir.read_text(), f"dpt-ir show {ir.name} does not print it back"
    # The same compile again (no dumps): the in-process cache answers.
    assert main(["compile", str(user_files["graph"]), "--wrt", "x"]) == 0
    assert "cache hit" in capsys.readouterr().out


def _plan_rows(out: str) -> dict[str, list[str]]:
    """The rows of the plan table in `dpt-ir compile`'s summary (and the lines after it)."""
    return _rows(out[out.index("\nplan ") + 1 :], first="plan")


def test_compile_options_change_the_program(user_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    graph = str(user_files["graph"])
    assert main(["compile", graph, "--wrt", "x", "--device", "cpu"]) == 0  # the budgets are the CPU's
    default = capsys.readouterr().out
    assert "options checks on, fuse on, recompute on (budget 16), halo budget 48" in default
    assert _plan_rows(default)["tape"][4:6] == ["0", "B"]  # beer's exp chain is recomputed: nothing saved
    # A budget below exp's cost (8 + the scaling) keeps the exp in the forward and saves it.
    assert main(["compile", graph, "--wrt", "x", "--device", "cpu", "--recompute-budget", "4"]) == 0
    tight = capsys.readouterr().out
    assert "recompute on (budget 4)" in tight and _plan_rows(tight)["tape"][4:6] == ["64", "B"]
    argv = ["compile", graph, "--wrt", "x", "--device", "cpu", "--no-fuse", "--no-recompute", "--halo-budget", "7"]
    assert main(argv) == 0
    unfused = capsys.readouterr().out
    assert "fuse off, recompute off (budget 16), halo budget 7" in unfused
    assert int(_plan_rows(unfused)["run"][1]) > int(_plan_rows(default)["run"][1])


@pytest.mark.skipif(shutil.which("dot") is None, reason="Graphviz `dot` is not on PATH (apt-get install graphviz)")
def test_compile_render_writes_svg_pictures(
    user_files: dict[str, Path], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    dump = tmp_path / "rendered"
    argv = ["compile", str(user_files["graph"]), "--wrt", "x", "--dump-dir", str(dump), "--render"]
    assert main(argv) == 0
    assert "graph picture(s) to SVG" in capsys.readouterr().out
    svg = (dump / "11-fusion.svg").read_text()
    assert svg.lstrip().startswith("<?xml") and "cluster_f0" in svg


def test_render_checks_graphviz_before_compiling(
    user_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys
) -> None:
    import dpt_ir.cli.commands as cli

    monkeypatch.setattr(cli.shutil, "which", lambda name: None)
    monkeypatch.setattr(cli, "compile_graph", lambda *a, **k: pytest.fail("compiled before checking for Graphviz"))
    argv = ["compile", str(user_files["graph"]), "--wrt", "x", "--dump-dir", str(tmp_path / "d"), "--render"]
    assert main(argv) == 2
    assert "Graphviz" in capsys.readouterr().err
    assert main(["compile", str(user_files["graph"]), "--render"]) == 2
    assert "--render needs --dump-dir" in capsys.readouterr().err


def test_cache_info_and_clear(user_files: dict[str, Path], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys):
    """`dpt-ir cache info` lists a copy of a real entry (with its Warp binary) and a damaged
    one; `clear` removes both, and Warp's files of the entries (only those)."""
    from dpt_ir.runtime import modules as module

    program = dp.compile(_graph(), wrt=["x"])
    key = program.module_name.removeprefix("dpt_ir_gen_")
    ours, theirs = tmp_path / "dpt_ir", tmp_path / "warp"
    shutil.copytree(module.cache_root() / key, ours / key)
    for d in module.warp_cache_dir().glob(f"wp_{program.module_name}_*"):
        shutil.copytree(d, theirs / d.name)
    (theirs / "wp_someone_else_1234567").mkdir()
    (ours / "ffffffffffffffffffff").mkdir()
    (ours / "ffffffffffffffffffff" / "plan.json").write_text("{garbage")
    monkeypatch.setenv("DPT_IR_CACHE", str(ours))
    monkeypatch.setattr(module, "warp_cache_dir", lambda: theirs)
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    assert f"cache {ours} (from DPT_IR_CACHE)" in out and "2 entries" in out, out
    rows = _rows(out[out.index("\nkey ") + 1 :], first="key")
    assert rows[key][1] == "beer" and rows["ffffffffffffffffffff"][1] == "damaged", rows
    assert rows[key][-2:] != ["0", "B"], "the Warp binary's size is missing"
    assert main(["cache", "clear"]) == 0
    assert "cleared 2 entries" in capsys.readouterr().out
    assert list(ours.iterdir()) == [] and [d.name for d in theirs.iterdir()] == ["wp_someone_else_1234567"]
    assert main(["cache", "info"]) == 0
    assert "0 entries" in capsys.readouterr().out


def test_run_forward_matches_interpreter(user_files: dict[str, Path], tmp_path: Path, capsys) -> None:
    out_path = tmp_path / "out.npz"
    argv = ["run", str(user_files["graph"]), "--inputs", str(user_files["inputs"]), "--out", str(out_path)]
    assert main(argv) == 0
    lines = capsys.readouterr().out.splitlines()
    expected = dp.interpret(_graph(), **_inputs(user_files))
    with np.load(out_path) as got:
        assert got.files == ["loss"]
        np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)
    assert len(lines) == 1 and lines[0].startswith("loss  shape ()  float32  = ")
    assert float(lines[0].split("= ")[1]) == pytest.approx(float(expected["loss"]), rel=1e-5)


def test_run_grad_matches_interpreter(user_files: dict[str, Path], tmp_path: Path, capsys) -> None:
    out_path = tmp_path / "out.npz"
    argv = ["run", str(user_files["graph"]), "--inputs", str(user_files["inputs"]), "--grad", "x"]
    assert main([*argv, "--out", str(out_path)]) == 0
    lines = capsys.readouterr().out.splitlines()
    inputs = _inputs(user_files)
    expected = dp.interpret(_graph(), **inputs)
    grad = dp.interpret_grad(_graph(), ["x"], **inputs)
    with np.load(out_path) as got:
        assert sorted(got.files) == ["grad.x", "loss"]
        np.testing.assert_allclose(got["loss"], expected["loss"], rtol=1e-5)
        np.testing.assert_allclose(got["grad.x"], grad["x"], rtol=1e-4, atol=1e-6)
        assert got["grad.x"].dtype == np.float32
    assert [line.split()[0] for line in lines] == ["loss", "grad.x"]
    assert lines[1] == "grad.x  shape (4, 4)  float32"


def test_run_without_out_prints_the_values(user_files: dict[str, Path], tmp_path: Path, capsys) -> None:
    """`dpt-ir run` without --out prints every result (name, shape, dtype, values) and
    writes nothing: --out is only for keeping them."""
    argv = ["run", str(user_files["graph"]), "--inputs", str(user_files["inputs"]), "--grad", "x"]
    before = sorted(user_files["root"].iterdir())
    assert main(argv) == 0
    out = capsys.readouterr().out
    inputs = _inputs(user_files)
    expected = dp.interpret(_graph(), **inputs)
    grad = dp.interpret_grad(_graph(), ["x"], **inputs)
    lines = out.splitlines()
    assert lines[0].startswith("loss  shape ()  float32  = ")
    assert float(lines[0].split("= ")[1]) == pytest.approx(float(expected["loss"]), rel=1e-5)
    assert lines[1] == "grad.x  shape (4, 4)  float32"
    shown = np.array([float(v) for line in lines[2:6] for v in line.strip(" []").split()])
    np.testing.assert_allclose(shown.reshape(4, 4), grad["x"], rtol=1e-4, atol=1e-6)
    assert lines[6].split()[::2] == ["min", "max", "mean"], out
    assert sorted(user_files["root"].iterdir()) == before


def test_export_cuda_help_shows_inputs_or_seed_required(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        main(["export-cuda", "--help"])
    assert exc.value.code == 0
    usage = " ".join(capsys.readouterr().out.split())
    assert "(--inputs IN.npz | --seed N)" in usage, usage


def test_show_after_fusion(user_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(user_files["graph"]), "--after", "fusion", "--wrt", "x"]) == 0
    out = capsys.readouterr().out
    shown = dp.Graph.from_text(out)
    from dpt_ir.ir.kernel_ir import plan_of
    from dpt_ir.passes.manager import run_pipeline
    from dpt_ir.passes.options import CompileOptions

    assert shown == run_pipeline(_graph(), CompileOptions(wrt=("x",))).after("fusion")
    assert plan_of(shown).groups and "grad.x" in {o.name for o in shown.outputs}


def test_show_after_unknown_pass(user_files: dict[str, Path], capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["show", str(user_files["graph"]), "--after", "fuse"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: ") and "'fuse'" in err and "fusion" in err and "schedule" in err


@pytest.mark.parametrize(
    "argv, fragment",
    [
        (["compile", "{root}/no_such_graph.json", "--wrt", "x"], "cannot read graph file"),
        (["run", "{root}/no_such_graph.json", "--inputs", "{inputs}", "--out", "{root}/o.npz"], "cannot read graph"),
        (["run", "{graph}", "--inputs", "{root}/no_such.npz", "--out", "{root}/o.npz"], "cannot read inputs file"),
        (["run", "{graph}", "--inputs", "{not_npz}", "--out", "{root}/o.npz"], "not an .npz archive"),
        (["run", "{graph}", "--inputs", "{shape}", "--out", "{root}/o.npz"], "expected shape [4, 4], found [4, 3]"),
        (["run", "{graph}", "--inputs", "{dtype}", "--out", "{root}/o.npz"], "expected dtype float32, found float64"),
        (["run", "{graph}", "--inputs", "{missing_input}", "--out", "{root}/o.npz"], "missing input(s) ['obs']"),
        (["run", "{graph}", "--inputs", "{inputs}", "--out", "{root}/o.npz", "--grad", "obs"], "requires_grad=False"),
        (["run", "{graph}", "--inputs", "{inputs}", "--out", "{root}/no_dir/o.npz"], "does not exist"),
        (["compile", "{graph}", "--wrt", "nope"], "'nope' is not an input"),
    ],
    ids=[
        "compile-bad-graph",
        "run-bad-graph",
        "missing-inputs-file",
        "inputs-not-npz",
        "wrong-shape",
        "wrong-dtype",
        "missing-input",
        "grad-of-nograd-input",
        "out-folder-missing",
        "compile-unknown-wrt",
    ],
)
def test_compile_and_run_errors(
    user_files: dict[str, Path], capsys: pytest.CaptureFixture[str], argv: list[str], fragment: str
) -> None:
    names = {k: str(v) for k, v in user_files.items()}
    assert main([a.format(**names) for a in argv]) == 2
    captured = capsys.readouterr()
    assert captured.out == ""
    lines = [line for line in captured.err.splitlines() if line.startswith("error: ")]
    assert len(lines) == 1 and fragment in lines[0], captured.err
    assert "Traceback" not in captured.err


def test_run_wrong_shape_in_a_real_process(user_files: dict[str, Path]) -> None:
    proc = _run_module(
        "run",
        str(user_files["graph"]),
        "--inputs",
        str(user_files["shape"]),
        "--out",
        str(user_files["root"] / "o.npz"),
    )
    assert proc.returncode == 2 and proc.stdout == ""
    assert proc.stderr.startswith("error: ") and "Traceback" not in proc.stderr
    assert "input 'x': expected shape [4, 4], found [4, 3]" in proc.stderr


def test_bench_without_benchmarks_folder(monkeypatch: pytest.MonkeyPatch, capsys) -> None:
    import dpt_ir.cli.commands as cli

    monkeypatch.setattr(cli, "benchmarks_dir", lambda: None)
    assert main(["bench", "--quick"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("error: bench: the benchmarks/ folder") and "Traceback" not in err


def test_bench_smoke(tmp_path: Path) -> None:
    """`dpt-ir bench` as a user runs it, on one tiny case: every installed contender built,
    checked against the interpreter and timed; tables on stdout, JSON and plot written.
    (The full ``--quick`` suite is a benchmark, not a test: its measured time is in
    docs/benchmarks.md.)"""
    out_json, out_png = tmp_path / "bench.json", tmp_path / "bench.png"
    argv = ["--cases", "beer", "--size", "16", "--reps", "2", "--json", str(out_json), "--plot", str(out_png)]
    proc = _run_module("bench", "--quick", *argv, timeout=600)
    assert proc.returncode == 0, proc.stderr[-2000:]
    for heading in ("Step times", "Speed-up of dpt_ir", "Time to first result", "Kernel launches per step"):
        assert heading in proc.stdout
    doc = json.loads(out_json.read_text())
    assert list(doc["cases"]) == ["beer"]
    for case, per_contender in doc["cases"].items():
        assert {"dpt_ir", "dpt_ir-unfused", "numpy"} <= set(per_contender), case
        assert "torch.compile" not in per_contender  # --quick leaves the ~20 s inductor compiles out
        assert all(m["grad_error"] <= 1e-3 and len(m["times_s"]) == 2 for m in per_contender.values())
        assert per_contender["dpt_ir"]["ratio_to_dpt_ir"] == 1.0
    assert {"warp-tape"} <= set(doc["cases"]["beer"]) and doc["shape"] == [16, 16]
    if importlib.util.find_spec("matplotlib") is not None:
        assert out_png.read_bytes()[:4] == b"\x89PNG"
    else:
        assert "matplotlib" in proc.stderr


def test_bench_without_scipy(tmp_path: Path) -> None:
    """SciPy is not a dependency: without it `dpt-ir bench` still runs every case (the imaging
    case's data needs no SciPy) and leaves out only the NumPy peers that use it, each with
    one line naming what to install."""
    env = env_without(tmp_path, "scipy")  # in every process: the suite's too
    argv = ["bench", "--quick", "--cases", "chain16,imaging", "--peers", "dpt_ir,numpy", "--size", "16", "--reps", "1"]
    proc = subprocess.run(
        [sys.executable, "-m", "dpt_ir", *argv], capture_output=True, text=True, env=env, timeout=600, check=False
    )
    assert proc.returncode == 0 and "Traceback" not in proc.stderr, proc.stderr[-3000:]
    for case, what in (("chain16", "scipy.special.erf"), ("imaging", "scipy.ndimage.gaussian_filter")):
        assert f"{case}/numpy: ImportError: the NumPy peer of this case needs SciPy ({what})" in proc.stderr
    assert "pip install scipy" in proc.stderr and "Step times" in proc.stdout


def test_bench_rejects_an_unknown_case() -> None:
    proc = _run_module("bench", "--quick", "--cases", "beer,nope")
    assert proc.returncode == 2 and "Traceback" not in proc.stderr
    assert "error: unknown case nope; known: beer, chain16" in proc.stderr


def test_op_reference_in_docs_is_current() -> None:
    """docs/ops.md is generated from the op table; regenerate it with
    `dpt-ir ops --markdown > docs/ops.md` when an op changes."""
    from dpt_ir.cli.commands import ops_markdown

    path = Path(__file__).resolve().parents[2] / "docs" / "ops.md"
    assert path.read_text() == ops_markdown(), "docs/ops.md is stale: run `dpt-ir ops --markdown > docs/ops.md`"


def test_compile_summarises_a_loop_program(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    g = dp.GraphBuilder("loop_cli")
    x = g.input("x", shape=(8,), dtype="float32")
    g.output("loss", dp.sum(dp.fori_loop(3, lambda i, c: dp.sin(c) * 0.5 + x, x)))
    path = tmp_path / "loop.json"
    path.write_text(g.build().model_dump_json())
    assert main(["compile", str(path), "--wrt", "x"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("\nloop ") + 1 :].splitlines()[2:-1]  # below the header and its rule
    rows = [line.split() for line in table]
    assert len(rows) == 3, out  # the forward's loop; the joint program's loop and its reverse (scan_vjp)
    assert all(cells[2] == "3" and int(cells[3]) >= 1 for cells in rows), out
    assert any(int(cells[4]) >= 1 for cells in rows), out  # the reverse loop runs the body's vjp
    assert "distinct kernels; compile" in out


def test_a_loop_program_prints_and_lists_under_its_graph_name(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """`print(program)` of a loop program says what it is, like `Program`'s repr, and
    `dpt-ir cache info` names its entry after the graph, not a piece (`run.seg0`)."""
    monkeypatch.setenv("DPT_IR_CACHE", str(tmp_path / "cache"))
    g = dp.GraphBuilder("wave")
    x = g.input("x", (8,), dtype="float32")
    g.output("loss", dp.sum(dp.fori_loop(3, lambda i, c: dp.sin(c) * 0.4375 + x, x)))  # a constant no other test uses
    program = dp.compile(g.build(), wrt=["x"], device="cpu")
    assert repr(program) == (
        f"LoopProgram('wave', wrt=['x'], device='cpu', loops={{'run': 1, 'value_and_grad': 2}}, "
        f"kernels={program.kernel_count})"
    )
    assert main(["cache", "info"]) == 0
    out = capsys.readouterr().out
    table = out[out.index("\nkey ") + 1 :].splitlines()[2:]
    assert len(table) == 1 and table[0].split("  ")[1].strip() == "wave (5 loop-program pieces)", out

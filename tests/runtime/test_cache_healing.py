"""The self-healing disk cache (`dpt_ir.runtime.modules`): a damaged entry (plan,
generated module, Warp's files) is detected, logged once at warning level, recompiled and
atomically replaced.

`read_entry` is checked directly on hand-made entries (no compile). The end-to-end check
copies three compiled entries of this session (every pipeline's module built) into a fresh
pair of caches, corrupts every file of each (garbage, empty, truncated to half, rotated so
that every file sees every damage) and compiles each in one new process, which runs only
the forward: it builds only the ``run`` module, and the entry is sound again for it.
"""

from __future__ import annotations

import json
import logging
import os
import shutil
import subprocess
import sys
from collections.abc import Callable
from pathlib import Path

import pytest
import warp as wp

import dpt_ir as dp
from dpt_ir.runtime import modules as cache
from dpt_ir.runtime.modules import cache_root

from .conftest import make_inputs

KEY = "0123456789abcdef0123"
NAME = f"dpt_ir_gen_{KEY}_run"
OTHER = f"dpt_ir_gen_{KEY}_vg"
SOURCES = {NAME: "import warp as wp\n# generated\n", OTHER: "import warp as wp\n# the other pipeline\n"}


def _garbage(path: Path) -> None:
    path.write_bytes(bytes(range(256)) * 4)


def _empty(path: Path) -> None:
    path.write_bytes(b"")


def _half(path: Path) -> None:
    data = path.read_bytes()
    path.write_bytes(data[: len(data) // 2])


DAMAGE: dict[str, Callable[[Path], None]] = {"garbage": _garbage, "empty": _empty, "half": _half}


def _entry(root: Path, **changes: str) -> Path:
    entry = root / KEY
    record = cache.new_record(KEY, json.dumps({"graphs": {}}), SOURCES).model_copy(update=changes)
    cache.write_entry(entry, record, SOURCES)
    return entry


def test_sound_entry_reads_back(tmp_path: Path) -> None:
    record, texts, problem = cache.read_entry(_entry(tmp_path), KEY)
    assert problem is None and texts == SOURCES and record is not None and json.loads(record.payload) == {"graphs": {}}


def test_no_entry_is_a_plain_miss(tmp_path: Path) -> None:
    assert cache.read_entry(tmp_path / KEY, KEY) == (None, None, None)


@pytest.mark.parametrize("damage", sorted(DAMAGE))
@pytest.mark.parametrize("file", ["plan.json", f"{NAME}.py", f"{OTHER}.py"])
def test_damaged_file_is_a_problem(tmp_path: Path, file: str, damage: str) -> None:
    """Every module of the entry is checked, the ones no call has built yet too."""
    entry = _entry(tmp_path)
    DAMAGE[damage](entry / file)
    record, texts, problem = cache.read_entry(entry, KEY)
    assert record is None and texts is None and problem is not None and file in problem, problem


@pytest.mark.parametrize(
    "changes, fragment",
    [
        ({"warp": "0.0.1"}, "expected"),
        ({"dpt_ir": "0.0.1"}, "expected"),
        ({"key": "ffffffffffffffffffff"}, "expected"),
        ({"payload_sha256": "0" * 64}, "payload does not match its checksum"),
    ],
    ids=["warp-version", "dpt_ir-version", "key", "payload-checksum"],
)
def test_mismatched_record_is_a_problem(tmp_path: Path, changes: dict[str, str], fragment: str) -> None:
    _, _, problem = cache.read_entry(_entry(tmp_path, **changes), KEY)
    assert problem is not None and fragment in problem, problem


@pytest.mark.parametrize("missing", ["plan.json", f"{NAME}.py", f"{OTHER}.py"])
def test_missing_file_is_a_problem(tmp_path: Path, missing: str) -> None:
    entry = _entry(tmp_path)
    (entry / missing).unlink()
    _, _, problem = cache.read_entry(entry, KEY)
    assert problem is not None and missing in problem and "missing" in problem, problem


def test_record_build_adds_one_module_and_keeps_the_others(tmp_path: Path) -> None:
    """Each module's Warp checksums are added on its own build, read-modify-write of the
    record as it is on disk; an unsound record is left for the next compile to heal."""
    entry = _entry(tmp_path)
    cache.record_build(entry, KEY, NAME, {"wp_a/x.o": "1" * 64})
    cache.record_build(entry, KEY, OTHER, {"wp_b/y.o": "2" * 64})
    record, _, problem = cache.read_entry(entry, KEY)
    assert problem is None and record is not None
    assert record.warp_files == {NAME: {"wp_a/x.o": "1" * 64}, OTHER: {"wp_b/y.o": "2" * 64}}
    cache.record_build(entry, KEY, "dpt_ir_gen_not_in_this_entry", {"wp_c/z.o": "3" * 64})
    _garbage(entry / "plan.json")
    cache.record_build(entry, KEY, NAME, {})
    assert (entry / "plan.json").read_bytes() == bytes(range(256)) * 4
    _, _, problem = cache.read_entry(entry, KEY)
    assert problem is not None and "unreadable" in problem, problem


def test_warning_is_logged_once(caplog: pytest.LogCaptureFixture) -> None:
    with caplog.at_level(logging.WARNING, logger="dpt_ir"):
        for _ in range(3):
            cache.warn_once("test-entry-once", "cache entry test-entry-once: damaged")
    assert [r.getMessage() for r in caplog.records] == ["cache entry test-entry-once: damaged"]
    assert caplog.records[0].name == "dpt_ir.cache"


CHILD = r"""
import json, logging, sys
import numpy as np
import dpt_ir as dp
from dpt_ir.runtime import modules as cache

class Keep(logging.Handler):
    def __init__(self):
        super().__init__(logging.WARNING)
        self.messages = []
    def emit(self, record):
        self.messages.append(record.getMessage())

keep = Keep()
logging.getLogger("dpt_ir").addHandler(keep)
report = []
for case in json.loads(open(sys.argv[1]).read()):
    graph = dp.Graph.model_validate_json(case["graph"])
    inputs = {k: np.asarray(v, dtype=np.float32) for k, v in case["inputs"].items()}
    before = len(keep.messages)
    program = dp.compile(graph, **case["options"])
    got = program.run(**inputs)
    want = dp.interpret(graph, **inputs)
    error = max(float(np.max(np.abs(np.asarray(got[k], np.float64) - want[k]))) for k in want)
    entry = cache.cache_root() / case["key"]
    record, _, problem = cache.read_entry(entry, case["key"])
    built = sorted(b.module for b in program.report.builds.values() if b.built)
    report.append({
        "key": case["key"], "cache": program.report.cache, "error": error, "problem_after": problem,
        "built": built, "run_module": program.modules["run"].name,
        "recorded": sorted(record.warp_files) if record is not None else None,
        "warp_sound_after": record is not None and all(cache._warp_problem(f) is None
                                                       for f in record.warp_files.values()),
        "warnings": keep.messages[before:],
    })
print("RESULT " + json.dumps(report))
"""


def _files_of(program: dp.Program, warp_root: Path) -> list[Path]:
    """Every file of the program's cache entry: plan, generated modules, Warp's files (of
    every module: the stem's glob covers each pipeline's)."""
    key = program.module_name.removeprefix("dpt_ir_gen_")
    ours = sorted((cache_root() / key).iterdir())
    warp = sorted(p for d in warp_root.glob(f"wp_{program.module_name}_*") for p in d.iterdir() if p.is_file())
    return [p for p in ours if not p.name.endswith(".tmp")] + warp


def test_corrupt_entries_heal_in_a_new_process(
    program: dp.Program, program_nowrt: dp.Program, program_nochecks: dp.Program, tmp_path: Path
) -> None:
    """Entries 0-2: every file damaged (each file sees each damage once): recompiled.
    Entry 3: a sound plan and module, only Warp's binary damaged: the plan is reused from
    disk, the binary's checksum mismatch is caught and it is rebuilt."""
    wp.init()
    warp_root = Path(wp.config.kernel_cache_dir)
    ours, theirs = tmp_path / "dpt_ir", tmp_path / "warp"
    cases, damaged = [], []
    binary_only = dp.compile(_tiny_graph())
    programs = [
        (program, {"wrt": ["x"]}),
        (program_nowrt, {}),
        (program_nochecks, {"wrt": ["x"], "checks": False}),
        (binary_only, {}),
    ]
    modes = sorted(DAMAGE)
    for i, (prog, options) in enumerate(programs):
        prog.build_all()  # every pipeline's module has Warp files to damage
        key = prog.module_name.removeprefix("dpt_ir_gen_")
        files = _files_of(prog, warp_root)
        assert any(f.suffix == ".o" for f in files) and (cache_root() / key / "plan.json") in files, files
        for j, src in enumerate(files):
            base = ours if src.is_relative_to(cache_root()) else theirs / warp_root.name
            dst = base / src.relative_to(cache_root() if base == ours else warp_root)
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(src, dst)
            mode = modes[(i + j) % 3] if prog is not binary_only else "garbage" if dst.suffix == ".o" else None
            if mode is not None:
                DAMAGE[mode](dst)
                damaged.append(f"{dst.name}: {mode}")
        inputs = {k: v.tolist() for k, v in make_inputs(100 + i).items() if k in prog.graph.input_map}
        cases.append({"graph": prog.graph.model_dump_json(), "options": options, "key": key, "inputs": inputs})
    (tmp_path / "cases.json").write_text(json.dumps(cases))
    env = dict(os.environ, DPT_IR_CACHE=str(ours), WARP_CACHE_PATH=str(theirs))
    env.pop("DPT_IR_DUMP", None)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(tmp_path / "cases.json")],
        env=env,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    report = json.loads(next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))[len("RESULT ") :])
    print("\n" + "\n".join(damaged))
    for case, (prog, _) in zip(report, programs, strict=True):
        assert case["cache"] == ("disk" if prog is binary_only else "miss"), case  # a damaged plan is never trusted
        assert case["error"] < 1e-4, case
        assert case["problem_after"] is None and case["warp_sound_after"], case  # replaced, sound again
        assert case["built"] == case["recorded"] == [case["run_module"]], case  # the forward built only its module
        assert len(case["warnings"]) == 1 and case["key"] in case["warnings"][0], case
    assert "does not match its checksum" in report[-1]["warnings"][0], report[-1]


def _tiny_graph() -> dp.Graph:
    g = dp.GraphBuilder("heal_binary")
    x = g.input("x", shape=(3, 4), dtype="float32")
    g.output("loss", dp.sum(x * x))
    return g.build()


def test_warp_files_leave_out_a_build_in_progress(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Another process building the same module (two ranks of a distributed job) writes into
    ``<module folder>_p<pid>_t<thread>`` and renames it into place: its files are not the
    module's, may vanish while they are read, and a purge leaves them to that build."""
    done, building = tmp_path / "wp_mod_abc1234", tmp_path / "wp_mod_abc1234_p4242_t17"
    for folder in (done, building):
        folder.mkdir()
        (folder / "mod.cpp").write_text("// text", encoding="utf-8")
    monkeypatch.setattr(cache, "warp_cache_dir", lambda: tmp_path)
    assert list(cache.warp_files("mod")) == ["wp_mod_abc1234/mod.cpp"]
    cache.purge_warp("mod")  # the running build's folder is that build's
    assert not done.exists() and building.exists()

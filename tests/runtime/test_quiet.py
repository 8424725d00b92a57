"""Quiet by default, and no memory growth in steady state.

One fresh process (shared by the tests below) compiles the runtime tests' graph with an
empty dpt_ir cache (the passes run; Warp reuses this session's binary), evaluates every
entry point, then 2,000 times each, and reports through a file: its stdout and stderr must
be empty, the user's Warp log level untouched, and its peak RSS (``ru_maxrss``) must not
grow between the end of a warm-up and the end of the 2,000 evaluations.
"""

from __future__ import annotations

import json
import logging
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import warp as wp

import dpt_ir as dp
from dpt_ir.driver import compile as compiler

from .conftest import WRT

EVALUATIONS = 2000
WARM_UP = 200
RSS_SLACK_KIB = 1024  # allocator noise; a leak of one small array per call is ~2 MiB over 2,000 calls

CHILD = r"""
import json, resource, sys
import numpy as np
import warp as wp
import dpt_ir as dp

def peak_kib():
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss

def current_kib():
    with open("/proc/self/statm") as fh:
        return int(fh.read().split()[1]) * resource.getpagesize() // 1024

level = wp.config.log_level
graph = dp.Graph.model_validate_json(open(sys.argv[1]).read())
program = dp.compile(graph, wrt=["x"])
rng = np.random.default_rng(0)
inputs = {
    "x": rng.uniform(0.5, 2.0, (3, 4)).astype(np.float32),
    "obs": rng.uniform(0.0, 1.0, (3, 4)).astype(np.float32),
    "w": rng.uniform(0.1, 1.0, (3, 4)).astype(np.float32),
}

def tape():
    with program.tape_pass() as tp:
        tp.forward(**inputs)
    tp.backward(seed={"loss": 1.0})
    tp.close()

calls = {"run": lambda: program.run(**inputs), "value_and_grad": lambda: program.value_and_grad(**inputs), "tape": tape}
peaks = {}
for name, call in calls.items():
    for _ in range(int(sys.argv[3])):
        call()
    before = peak_kib(), current_kib()
    for _ in range(int(sys.argv[4])):
        call()
    peaks[name] = [*before, peak_kib(), current_kib()]
json.dump({"level_before": level, "level_after": wp.config.log_level, "cache": program.report.cache,
           "peaks_kib": peaks}, open(sys.argv[2], "w"))
"""


def _warp_cache_base() -> str:
    wp.init()
    resolved = Path(wp.config.kernel_cache_dir)
    return str(resolved.parent if resolved.name == wp.config.version else resolved)


@pytest.fixture(scope="module")
def fresh_process(program: dp.Program, tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("quiet")
    (root / "graph.json").write_text(program.graph.model_dump_json())
    env = dict(os.environ, DPT_IR_CACHE=str(root / "dpt_ir"), WARP_CACHE_PATH=_warp_cache_base())
    for var in ("DPT_IR_DUMP", "DPT_IR_LOG"):
        env.pop(var, None)
    argv = [str(root / "graph.json"), str(root / "out.json"), str(WARM_UP), str(EVALUATIONS)]
    proc = subprocess.run([sys.executable, "-c", CHILD, *argv], env=env, capture_output=True, text=True, timeout=300)
    result = {"returncode": proc.returncode, "stdout": proc.stdout, "stderr": proc.stderr}
    if proc.returncode == 0:
        result.update(json.loads((root / "out.json").read_text()))
    return result


def test_plain_compile_and_evaluate_print_nothing(fresh_process: dict[str, Any]) -> None:
    assert fresh_process["returncode"] == 0, fresh_process["stderr"][-3000:]
    assert fresh_process["cache"] == "miss"  # the passes ran in the child, Warp loaded its module
    assert fresh_process["stdout"] == "" and fresh_process["stderr"] == "", fresh_process


def test_users_warp_log_level_is_kept(fresh_process: dict[str, Any]) -> None:
    assert fresh_process["level_after"] == fresh_process["level_before"] == wp.LOG_INFO, fresh_process


@pytest.mark.skipif(not Path("/proc/self/statm").exists(), reason="reads the current RSS from /proc (Linux)")
def test_peak_rss_does_not_grow(fresh_process: dict[str, Any]) -> None:
    """2,000 evaluations of each entry point after a warm-up: the peak RSS stays put, and
    so does the current RSS (the peak alone would hide a slow leak under the compile's
    higher peak)."""
    assert fresh_process["returncode"] == 0, fresh_process["stderr"][-3000:]
    for name, (peak0, rss0, peak1, rss1) in fresh_process["peaks_kib"].items():
        print(f"\n{name}: after {WARM_UP} calls peak {peak0} KiB, RSS {rss0} KiB; {EVALUATIONS} more: {peak1}, {rss1}")
        assert peak1 - peak0 <= RSS_SLACK_KIB, f"{name}: peak RSS grew by {peak1 - peak0} KiB"
        assert rss1 - rss0 <= RSS_SLACK_KIB, f"{name}: RSS grew by {rss1 - rss0} KiB"


def test_dpt_ir_log_info_shows_compile_progress(program: dp.Program, tmp_path: Path, caplog) -> None:
    """With the ``dpt_ir`` logger at INFO (what ``DPT_IR_LOG=info`` sets), a compile reports
    its progress (a dump compile runs the passes; its Warp module is loaded already)."""
    with caplog.at_level(logging.INFO, logger="dpt_ir"):
        dp.compile(program.graph, wrt=WRT, dump_dir=tmp_path)
    messages = [r.getMessage() for r in caplog.records if r.name.startswith("dpt_ir")]
    assert any(m.startswith("compiling 'rt'") for m in messages), messages
    assert any(m.startswith("compiled 'rt' on ") for m in messages), messages


def test_dpt_ir_log_sets_level_and_handler(monkeypatch: pytest.MonkeyPatch) -> None:
    logger = logging.getLogger("dpt_ir")
    monkeypatch.setattr(logger, "handlers", [])
    monkeypatch.setattr(logger, "level", logging.NOTSET)
    monkeypatch.setattr(logging.getLogger(), "handlers", [])
    monkeypatch.setenv("DPT_IR_LOG", "debug")
    compiler.configure_logging()
    assert logger.level == logging.DEBUG
    assert len(logger.handlers) == 1 and logger.handlers[0].stream is sys.stderr  # type: ignore[attr-defined]

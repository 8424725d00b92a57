"""Compile caches (DESIGN §5, §6): the in-process cache returns the same Program without
recompiling; a new process hits the on-disk cache (skips the passes, reuses Warp's
binary, and builds only the module of the plan it calls); dumps hold every stage."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import warp as wp

import dpt_ir as dp
from dpt_ir.runtime.modules import cache_root

from .conftest import WRT, assert_close, make_inputs, rt_graph

CHILD = r"""
import json, sys, time
t_import = time.perf_counter()
import numpy as np
import warp as wp
import dpt_ir as dp
t_imported = time.perf_counter()
wp.config.optimization_level = json.loads(sys.argv[3])  # the parent's Warp build settings
graph = dp.Graph.model_validate_json(open(sys.argv[1]).read())
inputs = dict(np.load(sys.argv[2]))
t0 = time.perf_counter()
program = dp.compile(graph, wrt=["x"])
t_compiled = time.perf_counter()
out = program.run(**inputs)
t1 = time.perf_counter()
print("RESULT " + json.dumps({
    "cache": program.report.cache,
    "builds": program.report.model_dump()["builds"],
    "imported": sorted(m for m in sys.modules if m.startswith(program.module_name)),
    "import_seconds": t_imported - t_import,
    "compile_seconds": t_compiled - t0,
    "first_result_seconds": t1 - t0,
    "loss": float(out["loss"]),
}))
"""


def _warp_cache_base() -> str:
    """The directory to give a child process as ``WARP_CACHE_PATH`` so that it uses this
    process's Warp kernel cache (Warp appends its version to the base it is given)."""
    wp.init()
    resolved = Path(wp.config.kernel_cache_dir)
    return str(resolved.parent if resolved.name == wp.config.version else resolved)


def test_memory_cache_returns_same_program(program: dp.Program) -> None:
    timings = []
    for _ in range(3):  # best of three, so that one scheduler hiccup on a loaded machine does not fail it
        again_graph = rt_graph()  # an equal graph, a different object
        assert again_graph == program.graph and again_graph is not program.graph
        start = time.perf_counter()
        again = dp.compile(again_graph, wrt=WRT)
        timings.append(time.perf_counter() - start)
        assert again is program
        assert again.report.cache == "memory"
    assert min(timings) < 0.010, f"in-process cache hit took {[f'{t * 1e3:.2f} ms' for t in timings]}"
    assert dp.compile(again_graph, wrt="x") is program  # the same options spelled differently


def test_memory_cache_keys_on_options(program: dp.Program, program_nowrt: dp.Program) -> None:
    assert program_nowrt is not program
    assert program_nowrt.wrt == () and program.wrt == ("x",)
    assert program_nowrt.module_name != program.module_name


def test_new_process_hits_disk_cache(program: dp.Program, tmp_path: Path) -> None:
    """A fresh interpreter compiling the same graph with the same caches: ``cache == "disk"``,
    the time from ``dp.compile`` to the first result stays well under a recompile, and
    ``run`` imports and builds (from Warp's cache) the ``run`` module only."""
    program.build_all()  # Warp's binaries of every module are in the cache the child shares
    graph_file = tmp_path / "rt.json"
    graph_file.write_text(program.graph.model_dump_json())
    inputs = make_inputs(60)
    np.savez(tmp_path / "inputs.npz", **inputs)
    # DPT_IR_LOG=debug: Warp prints its module-load line, "(cached)" or "(compiled)"
    env = dict(os.environ, DPT_IR_CACHE=str(cache_root()), WARP_CACHE_PATH=_warp_cache_base(), DPT_IR_LOG="debug")
    env.pop("DPT_IR_DUMP", None)
    opt_level = wp.config.optimization_level  # the tests build at their own level (tests/conftest.py)
    proc = subprocess.run(
        [sys.executable, "-c", CHILD, str(graph_file), str(tmp_path / "inputs.npz"), json.dumps(opt_level)],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    line = next(ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT "))
    result = json.loads(line[len("RESULT ") :])
    print(
        f"\nnew process, disk cache: compile -> first result {result['first_result_seconds'] * 1e3:.1f} ms "
        f"(compile {result['compile_seconds'] * 1e3:.1f} ms, import dpt_ir {result['import_seconds'] * 1e3:.1f} ms)"
    )
    assert result["cache"] == "disk", proc.stdout + proc.stderr[-3000:]
    assert "(cached)" in proc.stdout + proc.stderr, proc.stdout + proc.stderr[-3000:]
    assert "(compiled)" not in proc.stdout + proc.stderr, "Warp rebuilt the module instead of reusing its binary"
    assert_close(result["loss"], dp.interpret(program.graph, **inputs)["loss"])
    assert result["first_result_seconds"] < 3.0, result
    run_module = program.modules["run"].name
    assert result["imported"] == [run_module], result
    assert {p: b["built"] for p, b in result["builds"].items()} == {"run": True, "value_and_grad": False, "tape": False}
    assert result["builds"]["run"]["module"] == run_module and result["builds"]["run"]["build_seconds"] < 3.0


def test_dump_dir_contents(program_nochecks: dp.Program, dump_root: Path) -> None:
    names = {p.name for p in dump_root.iterdir()}
    irs = sorted(n for n in names if n.endswith(".ir"))
    dots = sorted(n for n in names if n.endswith(".dot"))
    assert irs and dots, names
    for ir in irs:
        stem = ir[: -len(".ir")]
        number, _, pass_name = stem.partition("-")
        assert len(number) == 2 and number.isdigit() and pass_name, ir
        assert f"{stem}.dot" in names, f"{stem}.dot missing"
    passes = [ir[3:-3] for ir in irs]
    for expected in ("verify", "autodiff", "saved_attributes", "fusion", "schedule"):
        assert expected in passes, passes
    assert (dump_root / f"{irs[0][:-3]}.dot").read_text().startswith("digraph")
    assert dp.Graph.from_text((dump_root / irs[0]).read_text()) == program_nochecks.graph  # the input, verified
    assert dp.Graph.from_text((dump_root / irs[-1]).read_text()).name == program_nochecks.graph.name
    for name in ("saved.txt", "fusion.txt", "report.json"):
        assert (dump_root / name).is_file() and (dump_root / name).read_text().strip(), name
    report = json.loads((dump_root / "report.json").read_text())
    assert report["program"]["cache"] == "miss"  # a dump always runs the passes
    assert report["program"]["module"] == program_nochecks.module_name
    modules = {m.name for m in program_nochecks.modules.values()}
    assert {b["module"] for b in report["program"]["builds"].values()} == modules
    assert len(modules) == 3 and all(m.startswith(program_nochecks.module_name + "_") for m in modules), modules
    kernels = sorted((dump_root / "kernels").glob("*.py"))
    assert [k.name for k in kernels] == sorted(f"{m}.py" for m in modules)  # one module per pipeline
    assert all("@wp.kernel" in k.read_text() for k in kernels)

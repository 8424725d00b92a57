"""Backend benchmark: compiled dpt_ir programs against their peers, forward + backward.

    python benchmarks/bench_backend.py [--n 22] [--reps 5] [--json PATH] [--skip-compile]

At N = 2^n float32 elements (a square-ish 2-D array) it measures, in one process:

1. beer and the 16-op chain: ``Program.value_and_grad`` and a general ``tape_pass``
   (forward, then backward with seed 1) against the same graph written as one Warp
   kernel per op on a ``wp.Tape`` (Warp's own adjoints, `benchmarks/unfused_warp.py`);
2. beer: ``value_and_grad`` against hand-written vectorised float32 NumPy (the obvious
   code, and a tuned in-place variant);
3. launches per forward + backward pass;
4. compile time, in subprocesses with fresh caches (`benchmarks/compile_child.py`):
   first program of a cold process, a second program, the same graph again in-process,
   and a new process hitting the disk cache (``dp.compile`` to first result; process
   start and imports reported separately).

Every timing is the median of ``--reps`` rounds after one warm-up round; a round runs
every contender once, in rotating order, so that machine noise hits all of them alike.
Ratios are between contenders of the same run. Diagnostic rows (no goal) show the Warp
CPU floors: a hand-fused beer kernel, an exp-only kernel and a copy kernel.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import warp as wp

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))

import dpt_ir as dp  # noqa: E402
from benchmarks import handfused_warp as hf  # noqa: E402
from benchmarks import unfused_warp as uw  # noqa: E402
from benchmarks.graphs import beer, chain16  # noqa: E402
from benchmarks.report import machine  # noqa: E402


@dataclass
class Row:
    """One line of the result table."""

    section: str
    figure: str
    value: float | int | str
    unit: str = ""
    goal: str = ""
    met: bool | None = None


def shape_of(n: int) -> tuple[int, int]:
    """A 2-D shape with 2^n elements, as square as possible (2^22 -> 2048 x 2048)."""
    rows = 1 << (n // 2)
    return rows, (1 << n) // rows


def time_round_robin(cases: dict[str, Callable[[], Any]], reps: int) -> dict[str, list[float]]:
    """Seconds per call of each case: one warm-up call each, then ``reps`` rounds that call
    every case once, in an order rotated each round. Returns all samples per case."""
    names = list(cases)
    for name in names:
        cases[name]()
    samples: dict[str, list[float]] = {name: [] for name in names}
    for k in range(reps):
        for name in names[k % len(names) :] + names[: k % len(names)]:
            t = time.perf_counter()
            cases[name]()
            samples[name].append(time.perf_counter() - t)
    return samples


def tape_step(program: Any, inputs: dict[str, wp.array]) -> Callable[[], dict[str, wp.array]]:
    """A general tape pass: forward, backward with seed 1 on the loss, close."""

    def run() -> dict[str, wp.array]:
        with program.tape_pass() as tp:
            tp.forward(**inputs)
        grads = tp.backward(seed={"loss": 1.0})
        tp.close()
        return grads

    return run


def tape_launches(program: Any, inputs: dict[str, wp.array]) -> tuple[int, int]:
    """Launches of the forward and of the backward phase of one tape pass."""
    with program.tape_pass() as tp:
        tp.forward(**inputs)
    fwd = program.launch_count
    tp.backward(seed={"loss": 1.0})
    bwd = program.launch_count
    tp.close()
    return fwd, bwd


def check_close(name: str, got: np.ndarray, want: np.ndarray, rtol: float) -> None:
    """Relative max-norm agreement, or exit: a benchmark of wrong results is worthless."""
    err = float(np.max(np.abs(got - want)) / max(float(np.max(np.abs(want))), 1e-30))
    if not err <= rtol:
        raise SystemExit(f"{name}: results disagree (relative max error {err:.3g} > {rtol})")


def bench_graph(
    name: str, shape: tuple[int, int], inputs: dict[str, np.ndarray], reps: int, goal: float, rows: list[Row]
) -> dict[str, float]:
    """Section 1 (and 2, 3 for beer) for one graph."""
    graph = {"beer": beer, "chain16": chain16}[name](shape)
    program = dp.compile(graph, wrt=["x"], device="cpu")
    nochecks = dp.compile(graph, wrt=["x"], device="cpu", checks=False)
    saving = dp.compile(graph, wrt=["x"], device="cpu", recompute=False)
    wp_inputs = {k: wp.array(v, dtype=wp.float32, device="cpu") for k, v in inputs.items()}
    base = uw.make(name, inputs)

    # correctness first
    out, grads = program.value_and_grad(**inputs)
    vg_launches = program.launch_count
    loss_u, grad_u = base.result_numpy()
    check_close(f"{name} gradient vs unfused Warp", grads["x"].reshape(-1), grad_u, 1e-4)
    ref = dp.interpret(graph, **inputs)["loss"]
    check_close(f"{name} loss vs dp.interpret", np.atleast_1d(out["loss"]), np.atleast_1d(ref), 1e-4)
    # the unfused baseline sums 2^n float32 values one by one with atomic_add: only roughly equal
    check_close(f"{name} loss vs unfused Warp", np.array([loss_u]), np.atleast_1d(ref), 5e-2)
    tp_grad = tape_step(program, wp_inputs)()["x"].numpy().reshape(-1)
    check_close(f"{name} tape-pass gradient vs value_and_grad", tp_grad, grads["x"].reshape(-1), 1e-6)
    sv_grad = tape_step(saving, wp_inputs)()["x"].numpy().reshape(-1)
    check_close(f"{name} tape-pass (recompute=False) gradient", sv_grad, grads["x"].reshape(-1), 1e-6)
    tp_fwd, tp_bwd = tape_launches(program, wp_inputs)

    cases: dict[str, Callable[[], Any]] = {
        "dpt_ir value_and_grad": lambda: program.value_and_grad(**inputs),
        "dpt_ir tape_pass": tape_step(program, wp_inputs),
        "dpt_ir value_and_grad checks=False": lambda: nochecks.value_and_grad(**inputs),
        "dpt_ir tape_pass recompute=False": tape_step(saving, wp_inputs),
        "unfused Warp tape": lambda: base.value_and_grad(),
        "unfused Warp tape + numpy copy": lambda: base.value_and_grad(to_numpy=True),
    }
    n = int(np.prod(shape))
    if name == "beer":
        tuned = uw.numpy_beer_inplace()
        x, obs, w = inputs["x"], inputs["obs"], inputs["w"]
        loss_np, grad_np = uw.numpy_beer(x, obs, w)
        check_close("beer gradient vs NumPy", grad_np, grads["x"], 1e-5)
        check_close("beer loss vs NumPy", np.array([loss_np]), np.atleast_1d(out["loss"]), 1e-4)
        check_close("beer gradient vs tuned NumPy", tuned(x, obs, w)[1], grads["x"], 1e-5)
        loss_buf = wp.zeros(1, dtype=wp.float32, device="cpu")
        grad_buf = wp.zeros(n, dtype=wp.float32, device="cpu")
        tmp = wp.zeros(n, dtype=wp.float32, device="cpu")
        flat = {k: v.reshape((n,)) for k, v in wp_inputs.items()}

        def hand_fused() -> None:
            loss_buf.zero_()
            wp.launch(hf.beer_value_and_grad, dim=n, inputs=[flat["x"], flat["obs"], flat["w"], loss_buf, grad_buf])

        cases.update(
            {
                "NumPy (plain)": lambda: uw.numpy_beer(x, obs, w),
                "NumPy (in-place, tuned)": lambda: tuned(x, obs, w),
                "Warp hand-fused kernel [floor]": hand_fused,
                "Warp exp-only kernel [floor]": lambda: wp.launch(hf.exp_only, dim=n, inputs=[flat["x"], tmp]),
                "Warp copy kernel [floor]": lambda: wp.launch(hf.copy_only, dim=n, inputs=[flat["x"], tmp]),
                "np.exp alone": lambda: np.exp(x),
            }
        )
    samples = time_round_robin(cases, reps)
    times = {case: statistics.median(s) for case, s in samples.items()}
    vg, tp = times["dpt_ir value_and_grad"], times["dpt_ir tape_pass"]
    sec = f"1. {name} vs unfused Warp"
    for case, t in times.items():
        spread = f"(min {min(samples[case]) * 1e3:.1f})"
        rows.append(Row(f"0. times ({name}, median of {reps})", case, round(t * 1e3, 1), "ms", spread))
    r_vg = times["unfused Warp tape + numpy copy"] / vg
    r_tp = times["unfused Warp tape"] / tp
    rows.append(Row(sec, "unfused+copy / value_and_grad", round(r_vg, 2), "x", f">= {goal:g}x", r_vg >= goal))
    rows.append(Row(sec, "unfused / tape_pass", round(r_tp, 2), "x", f">= {goal:g}x", r_tp >= goal))
    r_nc = times["unfused Warp tape + numpy copy"] / times["dpt_ir value_and_grad checks=False"]
    rows.append(Row(sec, "unfused+copy / value_and_grad checks=False", round(r_nc, 2), "x", "(diagnostic)"))
    r_sv = times["unfused Warp tape"] / times["dpt_ir tape_pass recompute=False"]
    rows.append(Row(sec, "unfused / tape_pass recompute=False", round(r_sv, 2), "x", "(diagnostic)"))
    if name == "beer":
        sec2 = "2. beer vs NumPy"
        for peer in ("NumPy (plain)", "NumPy (in-place, tuned)"):
            r = times[peer] / vg
            rows.append(Row(sec2, f"{peer} / value_and_grad", round(r, 2), "x", ">= 1.25x", r >= 1.25))
        for peer in ("Warp hand-fused kernel [floor]", "Warp exp-only kernel [floor]", "Warp copy kernel [floor]"):
            rows.append(Row(sec2, f"value_and_grad / {peer}", round(vg / times[peer], 2), "x", "(diagnostic)"))
    sec3 = "3. launches per forward+backward"
    limit = 3 if name == "beer" else None
    goal3 = f"<= {limit}" if limit else ""
    rows.append(Row(sec3, f"{name} value_and_grad", vg_launches, "", goal3, vg_launches <= limit if limit else None))
    tp_total = tp_fwd + tp_bwd
    rows.append(
        Row(
            sec3,
            f"{name} tape_pass ({tp_fwd} fwd + {tp_bwd} bwd)",
            tp_total,
            "",
            goal3,
            tp_total <= limit if limit else None,
        )
    )
    rows.append(
        Row(
            sec3,
            f"{name} unfused Warp ({base.forward_launches} fwd + {base.backward_launches} adjoint)",
            base.forward_launches + base.backward_launches,
            "",
            "(peer)",
        )
    )
    return {"median_s": times, "samples_s": samples}


def run_child(mode: str, n: int, env: dict[str, str]) -> dict[str, Any]:
    """Run `compile_child.py` and return its JSON, plus the process start time it saw."""
    t = time.time()
    proc = subprocess.run(
        [sys.executable, str(ROOT / "benchmarks" / "compile_child.py"), mode, str(n)],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.time() - t
    if proc.returncode != 0:
        raise SystemExit(f"compile child ({mode}) failed:\n{proc.stdout}\n{proc.stderr}")
    res = json.loads(proc.stdout.strip().splitlines()[-1])
    res["process_start_s"] = res["t_start"] - t
    res["process_wall_s"] = wall
    return res


def bench_compile(n: int, reps: int, rows: list[Row]) -> dict[str, Any]:
    """Section 4: cold process, second program, in-process hit, new process (disk hit)."""
    with tempfile.TemporaryDirectory(prefix="dpt_ir_bench_") as tmp:
        env = {**os.environ, "DPT_IR_CACHE": f"{tmp}/dpt_ir", "WARP_CACHE_PATH": f"{tmp}/warp"}
        env.pop("DPT_IR_DUMP", None)
        cold = run_child("cold", n, env)
        warm = [run_child("warm", n, env) for _ in range(max(reps, 1))]
    if cold["beer_cache"] != "miss" or any(w["beer_cache"] != "disk" for w in warm):
        raise SystemExit(f"unexpected cache states: cold {cold['beer_cache']}, warm {[w['beer_cache'] for w in warm]}")
    keys = ("beer_compile_s", "beer_first_result_s", "import_s", "process_start_s", "process_wall_s")
    med = {key: statistics.median(w[key] for w in warm) for key in keys}
    sec = "4. compile time (beer; subprocesses, fresh caches)"
    rows.append(Row(sec, "cold process: first program, dp.compile", round(cold["beer_compile_s"], 3), "s"))
    rows.append(
        Row(sec, "cold process: second program (chain16), dp.compile", round(cold["chain16_compile_s"], 3), "s")
    )
    again_ms = cold["beer_again_s"] * 1e3
    rows.append(
        Row(sec, "same graph again in-process (memory hit)", round(again_ms, 3), "ms", "<= 10 ms", again_ms <= 10)
    )
    first = med["beer_first_result_s"]
    rows.append(
        Row(sec, "new process, disk hit: dp.compile -> first result", round(first, 3), "s", "<= 0.5 s", first <= 0.5)
    )
    rows.append(Row(sec, "new process, disk hit: dp.compile alone", round(med["beer_compile_s"], 4), "s"))
    rows.append(Row(sec, "new process: start (exec -> first line)", round(med["process_start_s"], 3), "s"))
    rows.append(Row(sec, "new process: import numpy+warp+dpt_ir, wp.init", round(med["import_s"], 3), "s"))
    return {"cold": cold, "warm": warm, "warm_median": med}


def print_table(rows: list[Row]) -> None:
    """Rows grouped by section: figure, value, goal, status."""
    width = max(len(r.figure) for r in rows) + 2
    section = None
    for r in rows:
        if r.section != section:
            section = r.section
            print(f"\n{section}")
        status = "" if r.met is None else ("met" if r.met else "NOT MET")
        value = f"{r.value} {r.unit}".strip()
        print(f"  {r.figure:<{width}}{value:>14}   {r.goal:<14}{status}")


def main(argv: list[str] | None = None) -> None:
    """Parse arguments, run every section, print the table, write JSON."""
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--n", type=int, default=22, help="log2 of the element count (default 22: 2048 x 2048)")
    ap.add_argument("--reps", type=int, default=5, help="timed rounds per figure (median reported)")
    ap.add_argument("--json", type=Path, default=None, help="write the results as JSON here")
    ap.add_argument("--skip-compile", action="store_true", help="skip the compile-time subprocesses")
    args = ap.parse_args(argv)
    wp.config.log_level = 30
    wp.init()
    if wp.get_cuda_device_count() > 0:
        print("note: a GPU is present, but this benchmark measures the CPU backend (device='cpu')")
    shape = shape_of(args.n)
    info = machine()
    print(f"dpt_ir backend benchmark: N = 2^{args.n} = {shape[0]}x{shape[1]} float32, device cpu, reps {args.reps}")
    v = info["versions"]
    print(f"{info['cpu']}, {info['cores']} cores; python {v['python']}, numpy {v['numpy']}, warp {v['warp-lang']}")
    rng = np.random.default_rng(0)
    inputs = {k: rng.random(shape, dtype=np.float32) for k in ("x", "obs", "w")}
    rows: list[Row] = []
    times = {
        "beer": bench_graph("beer", shape, inputs, args.reps, 4.0, rows),
        "chain16": bench_graph("chain16", shape, {"x": inputs["x"]}, args.reps, 5.0, rows),
    }
    compile_info = None if args.skip_compile else bench_compile(args.n, args.reps, rows)
    rows.sort(key=lambda r: r.section)
    print_table(rows)
    if args.json is not None:
        doc = {
            "command": " ".join([Path(sys.executable).name, *sys.argv]),
            "n": args.n,
            "shape": list(shape),
            "reps": args.reps,
            "machine": info,
            "rows": [asdict(r) for r in rows],
            "times": times,
            "compile": compile_info,
        }
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(doc, indent=2))
        print(f"\nwrote {args.json}")


if __name__ == "__main__":
    main()

"""Loop programs in CUDA bundles (`dpt_ir.export.stages`): the stage lists, the reverse's
schedule exported from the runtime's own `Loop`, and their replay by ``gpu_check.py --dry``.

The replays of every loop plan against the interpreter (``ref.npz``) run in
``test_export.test_every_plan_matches_ref_on_cpu_and_cuda_drivers`` (the loop bundles are in
the session's `bundles`), and their ``kernels.cu`` compile for sm_90 in
``test_kernels_cu_compiles_for_sm90_with_nvrtc``. Here: what the bundles hold, that a replay
that skips a step or runs the schedule backwards fails, and bad loop bundles.
"""

from __future__ import annotations

import json
import shutil
import subprocess
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest

from dpt_ir.export.bundle import Bundle, LoopStage, PlanSpec

from .conftest import STEPS, gpu_check


def _plan(folder: Path, name: str) -> PlanSpec:
    doc = Bundle.model_validate_json((folder / "plan.json").read_text())
    return next(p for p in doc.plans if p.name == name)


def _loops(plan: PlanSpec, op: str) -> list[LoopStage]:
    return [s for s in plan.stages if isinstance(s, LoopStage) and s.op == op]


def test_a_scan_plan_is_segments_around_its_loop(bundles: dict[str, Path]) -> None:
    run = _plan(bundles["heat"], "run")
    assert [s.kind for s in run.stages] == ["segment", "loop", "segment"]
    (scan,) = _loops(run, "scan")
    assert scan.length == STEPS and len(scan.carry_in) == len(scan.carry_out) == len(scan.init) == 1
    (x,) = scan.feed  # the source's row i: 48 elements at 48 i
    assert (x.src, x.size, x.src_step, x.dst_step) == ("xs", 48, 48, 0)
    (y,) = scan.emit  # the energy of step i, after the final carry in the packed result
    assert (y.size, y.dst_at, y.dst_step) == (1, 48, 1)
    assert not scan.keep  # a run has no reverse to keep carries for
    packed = next(b for b in run.buffers if b.name == scan.final[0].dst)
    assert packed.size == 48 + STEPS


def test_the_reverse_replays_the_runtimes_schedule(bundles: dict[str, Path], loop_programs: dict[str, Any]) -> None:
    """The exported actions are the runtime `Loop`'s own: revolve's schedule with 2 slots, or,
    storing every carry, the carries the forward kept read from the last step down."""
    vg = _plan(bundles["heat_revolve"], "value_and_grad")
    (reverse,) = _loops(vg, "scan_vjp")
    stages = loop_programs["heat_revolve"].segments("value_and_grad").stages
    (loop,) = [r for kind, r, node in stages if kind == "loop" and node.op == "scan_vjp"]
    assert [a.model_dump() for a in reverse.actions] == [a.model_dump() for a in loop.schedule.actions]
    assert {a.kind for a in reverse.actions} == {"store", "restore", "advance", "reverse"}
    assert len(reverse.slots) == 1 and not _loops(vg, "scan")[0].keep  # slot 0 is the initial carry itself
    kept = _plan(bundles["heat"], "value_and_grad")
    (scan,), (back,) = _loops(kept, "scan"), _loops(kept, "scan_vjp")
    assert len(scan.keep) == STEPS - 1 and back.slots == scan.keep
    assert [(a.kind, a.at, a.slot) for a in back.actions[:4]] == [
        ("restore", 4, 4), ("reverse", 4, 0), ("restore", 3, 3), ("reverse", 3, 0)
    ]  # fmt: skip
    assert "advance" not in {a.kind for a in back.actions}  # nothing is recomputed


def test_fori_loop_reads_its_step_index(bundles: dict[str, Path]) -> None:
    vg = _plan(bundles["fori"], "value_and_grad")
    (scan,), (back,) = _loops(vg, "scan"), _loops(vg, "scan_vjp")
    (index,) = [c for c in scan.feed if c.src.endswith("/iota")]
    iota = next(b for b in vg.buffers if b.name == index.src)
    assert (iota.role, iota.dtype, iota.size, index.src_step) == ("constant", "int32", 4, 1)
    assert len(scan.carry_in) == 2 and len(back.vjp_carry_in) == 2
    assert back.vjp is not None and back.vjp.launches


def test_a_loop_body_raising_stops_the_plan_as_the_runtime_does(bundles: dict[str, Path], dry_run) -> None:
    """Status words are read after each stage: the loop body's flag is raised in run and
    value_and_grad, on both back ends, naming the body's kernel."""
    (body,) = {k.name for s in _loops(_plan(bundles["logscan"], "run"), "scan") for k in s.body.launches}
    lines = [line for line in dry_run.stdout.splitlines() if line.split()[1:2] == ["logscan"]]
    assert len(lines) == 4, dry_run.stdout
    for line in lines:
        assert line.startswith("ok ") and "status word raised" in line and "(expected a flag)" in line, line
        assert "out-of-domain input at node" in line and f"(op log, kernel {body})" in line, line


def _corrupt(bundles: dict[str, Path], tmp_path: Path, name: str, change: Callable[[dict], None]) -> Path:
    folder = tmp_path / name
    shutil.copytree(bundles[name], folder)
    doc = json.loads((folder / "plan.json").read_text())
    for plan in doc["plans"]:
        for stage in plan["stages"]:
            if stage["kind"] == "loop":
                change(stage)
    (folder / "plan.json").write_text(json.dumps(doc))
    return folder


def _fewer_advances(stage: dict) -> None:
    if stage["op"] == "scan_vjp":
        next(a for a in stage["actions"] if a["kind"] == "advance" and a["count"] > 1)["count"] -= 1


def _reversed_actions(stage: dict) -> None:
    stage["actions"].reverse()


def _fewer_steps(stage: dict) -> None:
    if stage["op"] == "scan":
        stage["length"] -= 1


@pytest.mark.parametrize(
    ("name", "change", "failing", "kind"),
    [
        ("heat_revolve", _fewer_advances, ["value_and_grad"], "gradient/"),
        ("heat_revolve", _reversed_actions, ["value_and_grad"], "gradient/"),
        ("heat_revolve", _fewer_steps, ["run", "value_and_grad"], "output/"),
    ],
    ids=["advance-skips-a-step", "schedule-reversed", "scan-skips-a-step"],
)
def test_a_replay_off_the_schedule_fails(
    bundles: dict[str, Path],
    tmp_path: Path,
    name: str,
    change: Callable[[dict], None],
    failing: list[str],
    kind: str,
) -> None:
    run = gpu_check("--dry", "--rounds", "1", str(_corrupt(bundles, tmp_path, name, change)))
    assert run.returncode == 1, run.stdout + run.stderr
    bad = {line.split()[2] for line in run.stdout.splitlines() if line.startswith("FAIL")}
    assert bad == set(failing), run.stdout
    assert all(kind in line for line in run.stdout.splitlines() if line.startswith("FAIL")), run.stdout


def _bad(bundles: dict[str, Path], tmp_path: Path, change: Callable[[dict], None]) -> subprocess.CompletedProcess[str]:
    return gpu_check("--dry", str(_corrupt(bundles, tmp_path, "heat", change)))


def _unknown_kind(stage: dict) -> None:
    stage["kind"] = "while"


def _longer(stage: dict) -> None:
    if stage["op"] == "scan":
        stage["length"] += 1


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        (_unknown_kind, "plan.json: plans[0].stages[1].kind: 'while'; expected 'segment' or 'loop'"),
        (
            _longer,
            "plan.json: plans[0].stages[1].feed[0]: src 'xs' holds 240 elements; step 5 of the stage's 6 "
            "(field 'length') reaches element 288",
        ),
    ],
    ids=["unknown-stage-kind", "loop-length-mismatch"],
)
def test_a_bad_loop_bundle_is_one_error_line(
    bundles: dict[str, Path], tmp_path: Path, change: Callable[[dict], None], expected: str
) -> None:
    run = _bad(bundles, tmp_path, change)
    assert run.returncode == 2 and run.stdout == "", run.stdout + run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"error: {tmp_path / 'heat'}/") and expected in line, line


def test_a_version_1_bundle_is_refused_with_what_to_do(bundles: dict[str, Path], tmp_path: Path) -> None:
    folder = tmp_path / "old"
    shutil.copytree(bundles["ew"], folder)
    doc = json.loads((folder / "plan.json").read_text())
    doc["version"] = 1
    (folder / "plan.json").write_text(json.dumps(doc))
    run = gpu_check("--dry", str(folder))
    assert run.returncode == 2, run.stdout + run.stderr
    assert run.stderr.strip() == (
        f"error: {folder / 'plan.json'}: field 'version' is 1 (format 'dpt_ir.cuda_bundle'), expected 2 "
        "(re-export the bundle with this checkout's dpt-ir export-cuda)"
    )

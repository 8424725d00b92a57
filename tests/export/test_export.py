"""Export of CUDA bundles and their replay by ``benchmarks/gpu_check.py --dry`` (no GPU).

The oracle is the NumPy interpreter (``ref.npz``); the replay runs the CPU drivers and
the CUDA drivers compiled as host C++, so the CUDA partition into ordered partials and
their combine are checked on the CPU. ``kernels.cu`` is compiled for sm_90 with the
NVRTC that Warp ships (no nvcc, no GPU).
"""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp
from benchmarks import graphs
from dpt_ir.backends.cxx import kernels as cxx_kernels
from dpt_ir.export import export_cuda
from dpt_ir.export.bundle import Bundle

from .conftest import CASE_PLANS, EVERY, GPU_CHECK, ROOT, SHAPE, gpu_check


def _lines(run: subprocess.CompletedProcess[str], bundle: str) -> list[str]:
    return [line for line in run.stdout.splitlines() if line.split()[1:2] == [bundle]]


def test_every_plan_matches_ref_on_cpu_and_cuda_drivers(bundles: dict[str, Path], dry_run) -> None:
    assert dry_run.returncode == 0, dry_run.stdout + dry_run.stderr
    expected: dict[str, int] = {}  # graph name -> plans x 2 back ends, over the bundles of that graph
    for key, folder in bundles.items():
        doc = Bundle.model_validate_json((folder / "plan.json").read_text())
        name = "op_sampler" if key == "sampler" else doc.graph
        expected[name] = expected.get(name, 0) + len(doc.plans) * 2
    for name, count in expected.items():
        lines = _lines(dry_run, name)
        assert len(lines) == count, (name, lines)
        assert all(line.startswith("ok ") for line in lines), lines
        assert {re.search(r"\[(.*?)\]", line).group(1) for line in lines} == {"CPU drivers", "cuda drivers on the CPU"}


def test_bundles_hold_the_plans_asked_for(bundles: dict[str, Path]) -> None:
    for name, plans in CASE_PLANS.items():
        doc = Bundle.model_validate_json((bundles[name] / "plan.json").read_text())
        assert [p.name for p in doc.plans] == plans
    ew = Bundle.model_validate_json((bundles["ew"] / "plan.json").read_text())
    tape = next(p for p in ew.plans if p.name == "tape")
    assert {b.role for b in tape.buffers} >= {"input", "cotangent", "output", "gradient"}
    assert "status" not in {b.role for b in tape.buffers} and ew.status_size == 0  # compiled without checks
    assert [s.name for s in tape.stages] == ["forward", "backward"]  # the status word read after each
    for stage in tape.stages:  # the output that is an input after the passes, copied before each stage's launches
        assert [(c.dst, c.src) for c in stage.run.copies] == [("$copy:x", "x")]


def test_tape_plans_with_views_and_imaging_export(bundles: dict[str, Path]) -> None:
    """The plans the dry replay checks hold what they are here for: beer's tape broadcasts the
    scalar cotangent (a view), imaging's plans run the blur as C++ and draw its uint8 mask."""
    beer = Bundle.model_validate_json((bundles["beer"] / "plan.json").read_text())
    tape = next(p for p in beer.plans if p.name == "tape")
    assert [b.shape for b in tape.buffers if b.role == "cotangent"] == [[]]
    imaging = Bundle.model_validate_json((bundles["imaging"] / "plan.json").read_text())
    assert [p.name for p in imaging.plans] == ["run", "value_and_grad", "tape"]
    mask = next(i for i in imaging.inputs if i.name == "mask")
    assert (mask.dtype, mask.seed is not None, mask.low) == ("uint8", True, 0.9)
    assert imaging.reference == "interpreter"
    program = Bundle.model_validate_json((bundles["logsum_program"] / "plan.json").read_text())
    assert program.reference == "program" and [p.name for p in program.plans] == EVERY


def test_softmax_xent_keeps_its_fused_logsumexp_on_cuda(bundles: dict[str, Path]) -> None:
    """The CUDA plans do not expand logsumexp (`Target.expand`): value_and_grad is the fused
    reduction with the dot, the gradient exp(z - lse), the mean; no max launch, no sum of exps.
    The dry replay (test_every_plan_matches_ref_on_cpu_and_cuda_drivers) checks it against ref."""
    doc = Bundle.model_validate_json((bundles["softmax_xent"] / "plan.json").read_text())
    vg = next(p for p in doc.plans if p.name == "value_and_grad")
    ops = [launch.ops for launch in vg.launches()]
    assert len(ops) == 3 and sum(o.count("logsumexp") for o in ops) == 1, ops
    assert not any("max" in o for o in ops) and sum(o.count("exp") for o in ops) == 1, ops


def test_an_integer_input_with_a_negative_range_is_not_drawn() -> None:
    from benchmarks.cases import CASES

    program = dp.compile(CASES["imaging"].build((16, 16)), device="cpu")
    with pytest.raises(dp.ContractError, match=r"input 'mask' \(uint8, range \[-1.0, 2.0\)\) cannot be drawn"):
        export_cuda(program, "/nonexistent/never-written", seed=0, ranges={"mask": (-1.0, 2.0)})


def test_cuda_partition_splits_sums_into_partials(bundles: dict[str, Path]) -> None:
    doc = Bundle.model_validate_json((bundles["beer"] / "plan.json").read_text())
    vg = next(p for p in doc.plans if p.name == "value_and_grad")
    partials = [b for b in vg.buffers if b.role == "partial"]
    assert partials and partials[0].size == 4 and partials[0].dtype == "float64"  # 16384 / 4096 per partial
    assert [launch.dim for launch in vg.launches()] == [4, 1]  # the ordered combine runs after the partials


def test_cuda_partials_interleave_over_a_row(bundles: dict[str, Path]) -> None:
    """Each of a row's 3 CUDA partials strides by 3 (coalesced across threads); the dry replay
    (test_every_plan_matches_ref_on_cpu_and_cuda_drivers) checks them against the interpreter."""
    doc = Bundle.model_validate_json((bundles["strided"] / "plan.json").read_text())
    run = next(p for p in doc.plans if p.name == "run")
    assert {b.size for b in run.buffers if b.role == "partial"} == {9}  # 3 rows x 3 partials
    source = (bundles["strided"] / "kernels.cu").read_text()
    cuda = source.split("#else\nDP_FN void ")[1:]  # the CUDA drivers (`drivers.driver_pair`)
    assert any("const int j0 = p, j1 = 12289;" in d and "j += 3)" in d for d in cuda), cuda


def test_status_word_is_read_and_reported(dry_run) -> None:
    raised = [line for line in dry_run.stdout.splitlines() if "status word raised" in line and " logsum " in line]
    assert len(raised) == 4, dry_run.stdout  # run and value_and_grad, CPU and CUDA drivers
    for line in raised:
        assert line.startswith("ok ") and "out-of-domain input at node 'log_0' (op log" in line, line
        assert "non-finite value at node 'sum_2'" in line, line


def test_a_wrong_reference_fails(bundles: dict[str, Path], tmp_path: Path) -> None:
    bad = tmp_path / "ew"
    bad.mkdir()
    for f in ("kernels.cu", "plan.json"):
        (bad / f).write_bytes((bundles["ew"] / f).read_bytes())
    with np.load(bundles["ew"] / "ref.npz") as npz:
        ref = {k: npz[k] for k in npz.files}
    ref["run/output/y"] = ref["run/output/y"] * np.float32(1.001)
    np.savez(bad / "ref.npz", **ref)
    run = gpu_check("--dry", "--rounds", "1", str(bad))
    assert run.returncode == 1, run.stdout
    assert "FAIL ew run [CPU drivers]" in run.stdout and "output/y:" in run.stdout


def _broken(bundles: dict[str, Path], tmp_path: Path, edit) -> subprocess.CompletedProcess[str]:
    bad = tmp_path / "bad"
    bad.mkdir()
    for f in ("kernels.cu", "plan.json", "ref.npz"):
        (bad / f).write_bytes((bundles["ew"] / f).read_bytes())
    edit(bad)
    return gpu_check("--dry", str(bad))


def _edit_plan(folder: Path, change) -> None:
    doc = json.loads((folder / "plan.json").read_text())
    change(doc)
    (folder / "plan.json").write_text(json.dumps(doc))


@pytest.mark.parametrize(
    ("edit", "expected"),
    [
        (lambda d: (d / "ref.npz").unlink(), "ref.npz: file is missing"),
        (lambda d: _edit_plan(d, lambda p: p.update(version=1)), "plan.json: field 'version' is 1"),
        (lambda d: _edit_plan(d, lambda p: p.pop("plans")), "plan.json: field 'plans' is missing"),
        (
            lambda d: _edit_plan(d, lambda p: p["plans"][0]["buffers"].pop(0)),
            "plan.json: plans[0].stages[0].run.launches[0].args: ['x'] not in the buffer table",
        ),
        (
            lambda d: _edit_plan(d, lambda p: p["plans"][0]["results"][0].update(shape=[800])),
            "ref.npz: field 'run/output/y' has shape [8, 100], ",
        ),
    ],
    ids=["missing-file", "other-version", "missing-field", "buffer-table", "ref-shape"],
)
def test_bad_bundle_is_one_error_line(bundles: dict[str, Path], tmp_path: Path, edit, expected: str) -> None:
    run = _broken(bundles, tmp_path, edit)
    assert run.returncode == 2 and run.stdout == "", run.stdout + run.stderr
    (line,) = run.stderr.splitlines()
    assert line.startswith(f"error: {tmp_path / 'bad'}/") and expected in line, line
    if "ref.npz: field" in expected:
        assert line.endswith("plan.json: plans[0].results[0] says [800]"), line


def test_runner_imports_neither_dpt_ir_nor_warp(bundles: dict[str, Path]) -> None:
    code = (
        "import runpy, sys\n"
        f"sys.argv = ['gpu_check', '--dry', '--rounds', '1', {str(bundles['ew'])!r}]\n"
        "try:\n"
        f"    runpy.run_path({str(GPU_CHECK)!r}, run_name='__main__')\n"
        "except SystemExit as e:\n"
        "    assert e.code == 0, e.code\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dpt_ir', 'warp', 'pydantic'))\n"
        "assert not bad, bad\n"
    )
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=ROOT, check=False)
    assert run.returncode == 0, run.stdout + run.stderr


def test_kernels_cu_compiles_for_sm90_with_nvrtc(bundles: dict[str, Path], tmp_path: Path) -> None:
    from warp._src import build

    wp.init()
    for name, folder in bundles.items():
        cubin = tmp_path / f"{name}.cubin"
        build.build_cuda(str(folder / "kernels.cu"), 90, str(cubin), pch_dir=None, use_precompiled_headers=False)
        assert cubin.read_bytes()[:4] == b"\x7fELF", name


def test_a_group_the_cxx_path_declines_is_refused_by_name(monkeypatch: pytest.MonkeyPatch) -> None:
    b = dp.GraphBuilder("gather")
    x = b.input("x", (8, 16), "float32")
    idx = b.input("idx", (5,), "int32", requires_grad=False)
    b.output("loss", dp.sum(dp.take(x, idx, axis=0)))
    program = dp.compile(b.build(), wrt=["x"], device="cpu")
    # The export regenerates the CUDA launches; with the C++ path declining every group, the
    # first group is refused by name, plan and ops before anything is written.
    monkeypatch.setattr(cxx_kernels, "group_kernels", lambda *args: None)
    refused = r"kernel group 'f\d+' of plan 'run' \(reduction over \[5, 16\], ops \[[^]]*'take'.*expected a group"
    with pytest.raises(dp.ContractError, match=refused):
        export_cuda(program, "/nonexistent/never-written", inputs={"x": np.ones((8, 16)), "idx": np.arange(5)})


def test_only_a_program_exports() -> None:
    from dpt_ir.export import export_cuda

    with pytest.raises(dp.ContractError, match=r"a dp.Program \(or the program of a graph with loops\), found object"):
        export_cuda(object(), "/nonexistent/never-written", seed=0)


def test_cli_export_cuda(tmp_path: Path) -> None:
    from dpt_ir.cli.commands import main

    doc = tmp_path / "beer.json"
    doc.write_text(graphs.beer(SHAPE).model_dump_json())
    out = tmp_path / "bundle"
    args = [str(doc), "--wrt", "x", "--out", str(out), "--seed", "3", "--plans", "run,value_and_grad"]
    assert main(["export-cuda", *args, "--range", "x=0.5:1.5"]) == 0
    doc_out = Bundle.model_validate_json((out / "plan.json").read_text())
    assert [p.name for p in doc_out.plans] == ["run", "value_and_grad"]
    assert (doc_out.inputs[0].low, doc_out.inputs[0].high) == (0.5, 1.5)
    for source in ([], ["--seed", "3", "--inputs", str(tmp_path / "in.npz")]):  # neither, both
        with pytest.raises(SystemExit) as exc:  # argparse's usage error: exit status 2
            main(["export-cuda", str(doc), "--out", str(out), *source])
        assert exc.value.code == 2


def test_the_sampler_holds_one_case_of_every_lowered_op(bundles: dict[str, Path]) -> None:
    """Issue 15's op sampler: every op the backend lowers (all but the loop ops, which
    compile as loop programs) has a case in the sampler bundle."""
    from dpt_ir.ir.registry import all_ops
    from tests.export.sampler import covered_cases

    ops = {case.op for _, case, _ in covered_cases()}
    builtin = [op for op in all_ops() if op.reference.__module__.startswith("dpt_ir.")]  # not tests' user ops
    lowered = {op.name for op in builtin if op.lowered}
    assert ops == lowered, (sorted(lowered - ops), sorted(ops - lowered))
    assert {"logical_and", "logical_not", "logical_or", "matmul", "add_at", "take"} <= ops

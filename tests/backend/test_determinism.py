"""Determinism (DESIGN §6): outputs and gradients are bit-identical over repeated passes in
one process and across processes, for beer, softmax cross-entropy (logsumexp over rows)
and a normalisation with two reductions, at 256 x 256; and no generated kernel uses a
floating-point atomic (reductions are fixed-order trees by construction)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from .harness import MODERATE_TOLERANCES, MODULES, Batch, compare_batch, float_atomics, module_of, program_digests

TESTS = Path(__file__).resolve().parents[1]

CHILD = r"""
import json, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import dpt_ir as dp
from backend.harness import program_digests
spec = json.loads(open(sys.argv[2]).read())
graph = dp.Graph.model_validate_json(spec["graph"])
feed = dict(np.load(sys.argv[3]))
seeds = dict(np.load(sys.argv[4]))
program = dp.compile(graph, wrt=spec["wrt"], loss=spec["loss"])
print("DIGESTS " + json.dumps(program_digests(program, feed, seeds), sort_keys=True))
"""


def test_values_and_gradients_match_interpreter(det_batch: Batch) -> None:
    """The three programs are also right (so the bits being compared are the right ones)."""
    problems = {pid: msgs for pid, msgs in compare_batch(det_batch, MODERATE_TOLERANCES).items() if msgs}
    assert not problems, problems


def test_bit_identical_across_passes(det_batch: Batch) -> None:
    assert det_batch.program is not None
    feed, seeds = det_batch.feed(), det_batch.tape_seeds()
    first = program_digests(det_batch.program, feed, seeds)
    assert any(k.startswith("vg:grad:") for k in first) and any(k.startswith("tape:grad:") for k in first)
    for _ in range(2):
        again = program_digests(det_batch.program, feed, seeds)
        assert again == first, sorted(k for k in first if again.get(k) != first[k])
    # run, value_and_grad and the tape pass agree bit for bit on the forward outputs too
    for name in det_batch.program.plans["run"].outputs:
        assert first[f"run:{name}"] == first[f"vg:{name}"] == first[f"tape:{name}"], name


def test_bit_identical_across_processes(det_batch: Batch, tmp_path: Path) -> None:
    """A new interpreter compiling the same graph (same caches) gives the same bits."""
    program = det_batch.program
    assert program is not None and det_batch.full is not None
    feed, seeds = det_batch.feed(), det_batch.tape_seeds()
    here = program_digests(program, feed, seeds)
    spec = {"graph": det_batch.full.model_dump_json(), "wrt": list(program.wrt), "loss": program.loss}
    (tmp_path / "spec.json").write_text(json.dumps(spec))
    np.savez(tmp_path / "feed.npz", **feed)
    np.savez(tmp_path / "seeds.npz", **seeds)
    args = [str(TESTS), str(tmp_path / "spec.json"), str(tmp_path / "feed.npz"), str(tmp_path / "seeds.npz")]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, *args],
        capture_output=True,
        text=True,
        env=dict(os.environ),
        timeout=600,
    )
    assert child.returncode == 0, child.stderr[-4000:]
    line = next(ln for ln in child.stdout.splitlines() if ln.startswith("DIGESTS "))
    there = json.loads(line.removeprefix("DIGESTS "))
    assert there == here, sorted(k for k in here if there.get(k) != here[k])


def test_no_float_atomics_in_generated_modules(det_batch: Batch, beer_program: object) -> None:
    """No generated kernel of this session calls a Warp atomic on floating-point data."""
    assert MODULES
    for name in MODULES:
        source = Path(module_of(name).__file__).read_text()
        assert "@wp.kernel" in source
        assert not float_atomics(source), (name, float_atomics(source))


def test_float_atomic_detector() -> None:
    """The structural check above does see a float atomic (and lets an int one pass)."""
    src = (
        "@wp.kernel\ndef k(a_x: wp.array(dtype=wp.float32), a_s: wp.array(dtype=wp.int32)):\n"
        "    wp.atomic_add(a_x, 0, 1.0)\n    wp.atomic_or(a_s, 0, 1)\n"
    )
    assert float_atomics(src) == ["k: wp.atomic_add(a_x"]

"""Determinism of the resampling gradients across runs and processes (issue 10).

One compiled float32 program (module fixture) holds both cases, each weighted by its own
input: ``map_coordinates`` at graph-tensor coordinates (order 3, ``mirror``; 1,600
samples in a 9 x 11 image, so the image gradient, an ``add_at`` sorted by destination per
evaluation, sums many colliding contributions) and ``dp.radon`` (the compile-time
transposed map). Its gradients wrt the image, the coordinates and the radon image are
bit-identical over 3 runs and in a second process, and agree with the interpreter to
float32 rounding. The second process has its own dpt_ir cache and another hash seed, so it
runs the passes and writes the module itself: its generated source must equal this
process's byte for byte (then Warp, at the same build level, reuses the binary, which
keeps the test cheap), and its gradients must be the same bits.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp
from tests.resample.cases import phantom

IMAGE, SAMPLES, SIDE = (9, 11), (40, 40), 12
THETA = np.linspace(0.0, 180.0, 8, endpoint=False)
WRT = ("x", "c", "img")


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("resample_determinism")
    x = g.input("x", IMAGE, "float32")
    c = g.input("c", (2, *SAMPLES), "float32")
    img = g.input("img", (SIDE, SIDE), "float32")
    wm = g.input("wm", SAMPLES, "float32", requires_grad=False)
    wr = g.input("wr", (SIDE, len(THETA)), "float32", requires_grad=False)
    warped = dp.map_coordinates(x, c, order=3, mode="mirror")
    g.output("loss", dp.sum(wm * warped) + dp.sum(wr * dp.radon(img, THETA)))
    return g.build()


def _feed() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(31)
    # Coordinates beyond both edges exercise the mirror mapping's branches.
    lo, hi = np.array([-3.0, -3.0]), np.array(IMAGE, dtype=np.float64) + 2.0
    coords = lo[:, None, None] + (hi - lo)[:, None, None] * rng.uniform(size=(2, *SAMPLES))
    values = {
        "x": rng.normal(size=IMAGE),
        "c": coords,
        "img": phantom(SIDE),
        "wm": rng.normal(size=SAMPLES),
        "wr": rng.normal(size=(SIDE, len(THETA))),
    }
    return {k: v.astype(np.float32) for k, v in values.items()}


@pytest.fixture(scope="module")
def program() -> dp.Program:
    return dp.compile(_graph(), wrt=list(WRT), loss="loss", device="cpu")


def _digests(grads: dict[str, np.ndarray]) -> list[str]:
    return [hashlib.sha256(np.ascontiguousarray(grads[k]).tobytes()).hexdigest() for k in WRT]


def test_gradients_bit_identical_over_runs(program: dp.Program) -> None:
    feed = _feed()
    runs = [program.value_and_grad(**feed) for _ in range(3)]
    assert all(_digests(grads) == _digests(runs[0][1]) for _, grads in runs[1:])
    assert all(out["loss"].tobytes() == runs[0][0]["loss"].tobytes() for out, _ in runs[1:])
    expected = dp.interpret_grad(_graph(), list(WRT), seed={"loss": 1.0}, **feed)
    for name in WRT:
        got, want = runs[0][1][name].astype(np.float64), expected[name].astype(np.float64)
        assert np.abs(got).max() > 0.0, f"gradient wrt {name} is zero: the test would not see a change"
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-4 * np.abs(want).max(), err_msg=name)


CHILD = r"""
import hashlib, os, sys
from pathlib import Path
import numpy as np
import warp as wp
sys.path.insert(0, sys.argv[1])
import dpt_ir as dp
wp.config.optimization_level = int(os.environ["DPT_IR_TEST_OPT_LEVEL"])
graph = dp.Graph.model_validate_json(open(sys.argv[2]).read())
feed = dict(np.load(sys.argv[3]))
wrt = sys.argv[4].split(",")
program = dp.compile(graph, wrt=wrt, loss="loss", device="cpu")
_, grads = program.value_and_grad(**feed)
print("SOURCE", hashlib.sha256(b"".join(m.path.read_bytes() for m in program.modules.values())).hexdigest())
print("DIGESTS", *(hashlib.sha256(np.ascontiguousarray(grads[k]).tobytes()).hexdigest() for k in wrt))
"""


def _source_digest(program: dp.Program) -> str:
    return hashlib.sha256(b"".join(m.path.read_bytes() for m in program.modules.values())).hexdigest()


def test_gradients_identical_in_another_process(program: dp.Program, tmp_path: Path) -> None:
    feed = _feed()
    _, grads = program.value_and_grad(**feed)
    (tmp_path / "graph.json").write_text(program.graph.model_dump_json())
    np.savez(tmp_path / "feed.npz", **feed)
    root = Path(__file__).resolve().parents[2]
    args = [str(root), str(tmp_path / "graph.json"), str(tmp_path / "feed.npz"), ",".join(WRT)]
    env = {
        **os.environ,
        "DPT_IR_CACHE": str(tmp_path / "dpt_ir_cache"),  # its own passes and codegen
        "PYTHONHASHSEED": "12345",
        "DPT_IR_TEST_OPT_LEVEL": str(wp.config.optimization_level),
    }
    child = subprocess.run([sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=env, timeout=600)
    assert child.returncode == 0, child.stderr[-4000:]
    tagged = [ln.split() for ln in child.stdout.splitlines() if ln.startswith(("SOURCE ", "DIGESTS "))]
    lines = {words[0]: words[1:] for words in tagged}
    assert lines["SOURCE"] == [_source_digest(program)]
    assert lines["DIGESTS"] == _digests(grads)

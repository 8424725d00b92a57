"""Bundles exported once per session for the export tests (small sizes, CPU programs).

- the benchmark cases (beer and imaging: every plan, the tape plans' cotangent broadcast by
  a view, imaging's blur a stencil on padded views and its mask a drawn uint8; chain16 and
  softmax_xent: ``run`` and ``value_and_grad``; normalisation: ``run``; the sums split into
  ordered partials as on CUDA), inputs drawn from seeds;
- ``logsum``: a sum with partials and a row reduction, the same program on inputs holding a
  negative (log's domain flag and the sum's non-finite flag are raised), and every plan of it
  with references from the compiled CPU program (``logsum_program``: a tape plan's scalar);
- ``strided``: reductions whose rows the CUDA partition splits into 3 interleaved partials
  (12,289 elements: not a multiple of 3) — logsumexp (two passes), max, argmax with a tie
  between two partials, and a sum over two axes of a product with a broadcast row (sub-rows);
- ``ew``: an elementwise program with array outputs, one of them an input after the passes,
  compiled without checks: ``run`` and ``tape`` (cotangents);
- the op sampler (`tests.export.sampler`): one case of every op the C++ path covers;
- loop programs (`loop_programs`): ``heat_scan`` (a `dp.scan` of heat steps: a carry, a
  per-step source ``xs``, a per-step energy ``y``, a closed-over conductivity) with the
  reverse storing every carry (``heat``: every plan) and with binomial checkpointing
  (``heat_revolve``, ``checkpoint=2``: ``run`` and ``value_and_grad``), and ``fori`` (a
  `dp.fori_loop` of two carries reading the step index: ``run`` and ``value_and_grad``), and
  ``logscan`` (a scan whose body takes the log of a negative carry: flags raised).
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks.cases import CASES
from dpt_ir.export import export_cuda

ROOT = Path(__file__).resolve().parents[2]
GPU_CHECK = ROOT / "benchmarks" / "gpu_check.py"
SHAPE = (64, 256)  # 16384 elements: a whole-array sum is split into 4 partials on CUDA
EVERY = ["run", "value_and_grad", "tape"]
CASE_PLANS = {"beer": EVERY, "chain16": ["run", "value_and_grad"], "softmax_xent": ["run", "value_and_grad"]}
CASE_PLANS.update({"normalisation": ["run"], "imaging": EVERY})
RANGES = {"imaging": {"mask": (0.9, 2.0), "mu": (0.0, 1.0)}}  # a 0/1 mask, about 9 % zeros


def gpu_check(*args: str) -> subprocess.CompletedProcess[str]:
    """``python benchmarks/gpu_check.py ARGS`` in a process of its own, as on a GPU machine."""
    return subprocess.run([sys.executable, str(GPU_CHECK), *args], capture_output=True, text=True, check=False)


def logsum_graph() -> dp.Graph:
    b = dp.GraphBuilder("logsum")
    x = b.input("x", SHAPE, "float32")
    w = b.input("w", SHAPE, "float32", requires_grad=False)
    b.output("loss", dp.sum(w * dp.log(x)))
    b.output("rowsum", dp.sum(dp.square(x), axis=1))
    return b.build()


STRIDED = (3, 12289)  # count // 4096 = 3 partials per row on CUDA, 12289 = 3 * 4096 + 1


def strided_graph() -> dp.Graph:
    b = dp.GraphBuilder("strided")
    x = b.input("x", STRIDED, "float32")
    w = b.input("w", (STRIDED[1],), "float32", requires_grad=False)
    b.output("loss", dp.sum(dp.logsumexp(x, axis=1)) + dp.sum(x * w))
    b.output("top", dp.max(x, axis=1))
    b.output("where", dp.argmax(x, axis=1))
    return b.build()


def strided_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    x = rng.normal(0.0, 1.0, STRIDED).astype(np.float32)
    x[:, [5, 12001]] = 9.0  # a tie: positions 5 and 12001 fall in parts 2 and 1 (p = j mod 3)
    return {"x": x, "w": rng.uniform(0.5, 1.5, STRIDED[1]).astype(np.float32)}


def ew_graph() -> dp.Graph:
    b = dp.GraphBuilder("ew")
    x = b.input("x", (8, 100), "float32")
    b.output("y", dp.expm1(dp.tanh(x) * 0.5) + dp.sqrt(x))
    b.output("x_again", x * 1.0)  # an input after the passes: the runner copies it (copy_of)
    return b.build()


LAPLACIAN = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
HEAT = (8, 6)
STEPS = 5


def heat_graph(checkpoint: int | None) -> dp.Graph:
    """Heat steps on an 8 x 6 field: the carry, a per-step source, a per-step y, a closure."""
    g = dp.GraphBuilder("heat_scan")
    u0, k = g.input("u0", HEAT), g.input("k", HEAT)
    xs = g.input("xs", (STEPS, *HEAT))

    def step(u: dp.Tensor, src: dp.Tensor) -> tuple[dp.Tensor, dp.Tensor]:
        u = u + 0.2 * k * dp.correlate(u, LAPLACIAN, mode="nearest") + 0.1 * src
        return u, dp.mean(dp.square(u))

    u, energy = dp.scan(step, u0, xs, checkpoint=checkpoint)
    g.output("loss", dp.sum(u * u0) + dp.sum(energy))
    g.output("field", u)
    return g.build()


def fori_graph() -> dp.Graph:
    """Four steps of two carries (one passes through unchanged) reading the step index; the
    gradient of the closed-over row ``w`` is a reduction over the leading axis (CPU drivers
    of their own partition: `LaunchSpec.host_tasks`)."""
    g = dp.GraphBuilder("fori")
    x, w = g.input("x", (4, 5)), g.input("w", (5,))

    def body(i: dp.Tensor, carry: tuple[dp.Tensor, dp.Tensor]) -> tuple[dp.Tensor, dp.Tensor]:
        a, b = carry
        return a * 0.9 + dp.sin(b) * w * 0.1 + 0.01 * dp.cast(i, "float32"), b

    a, b = dp.fori_loop(4, body, (x, x * 2.0))
    g.output("loss", dp.sum(a * a) + dp.sum(b))
    return g.build()


def logscan_graph() -> dp.Graph:
    """Three steps adding the log of the carry (given a negative: the body raises log's flag)."""
    g = dp.GraphBuilder("logscan")
    x = g.input("x", (4,))
    c, _ = dp.scan(lambda c, _: (c + dp.log(c), None), x * 1.0, length=3)
    g.output("loss", dp.sum(c))
    return g.build()


LOOP_PLANS = {"heat": EVERY, "heat_revolve": ["run", "value_and_grad"], "fori": ["run", "value_and_grad"]}
LOOP_PLANS["logscan"] = ["run", "value_and_grad"]
LOOP_RANGES = {"u0": (-1.0, 1.0), "xs": (-1.0, 1.0)}


@pytest.fixture(scope="session")
def loop_programs() -> dict[str, object]:
    """Bundle name -> the loop program (CPU) it is exported from."""
    return {
        "heat": dp.compile(heat_graph(None), wrt=["u0", "k", "xs"], loss="loss", device="cpu"),
        "heat_revolve": dp.compile(heat_graph(2), wrt=["u0", "k", "xs"], loss="loss", device="cpu"),
        "fori": dp.compile(fori_graph(), wrt=["x", "w"], device="cpu"),
        "logscan": dp.compile(logscan_graph(), wrt=["x"], device="cpu"),
    }


@pytest.fixture(scope="session")
def bundles(tmp_path_factory: pytest.TempPathFactory, loop_programs: dict[str, object]) -> dict[str, Path]:
    """Bundle name -> folder."""
    root = tmp_path_factory.mktemp("bundles")
    out: dict[str, Path] = {}
    for name, plans in CASE_PLANS.items():
        case = CASES[name]
        wrt = [case.wrt] if "value_and_grad" in plans else None
        program = dp.compile(case.build(SHAPE), wrt=wrt, device="cpu")
        out[name] = export_cuda(program, root / name, plans=plans, seed=7, ranges=RANGES.get(name))
    logsum = dp.compile(logsum_graph(), wrt=["x"], loss="loss", device="cpu")
    out["logsum"] = export_cuda(logsum, root / "logsum", plans=["run", "value_and_grad"], seed=1)
    x = np.random.default_rng(0).uniform(0.5, 2.0, SHAPE).astype(np.float32)
    x[3, 7] = -1.0
    neg = {"x": x, "w": np.ones(SHAPE, np.float32)}
    out["logsum_neg"] = export_cuda(logsum, root / "logsum_neg", plans=["run", "value_and_grad"], inputs=neg)
    strided = dp.compile(strided_graph(), wrt=["x"], loss="loss", device="cpu")
    out["strided"] = export_cuda(strided, root / "strided", plans=["run", "value_and_grad"], inputs=strided_inputs())
    ew = dp.compile(ew_graph(), wrt=["x"], device="cpu", checks=False)  # no status word
    out["ew"] = export_cuda(ew, root / "ew", seed=2)
    out["logsum_program"] = export_cuda(logsum, root / "logsum_program", seed=1, reference="program")
    from tests.export.sampler import sampler

    graph, inputs, _ = sampler()
    out["sampler"] = export_cuda(dp.compile(graph, device="cpu"), root / "sampler", inputs=inputs)
    for name, program in loop_programs.items():
        given = {"inputs": {"x": np.array([1.0, -1.0, 2.0, 0.5], np.float32)}} if name == "logscan" else {"seed": 3}
        out[name] = export_cuda(program, root / name, plans=LOOP_PLANS[name], ranges=LOOP_RANGES, **given)
    return out


@pytest.fixture(scope="session")
def dry_run(bundles: dict[str, Path]) -> subprocess.CompletedProcess[str]:
    """One ``gpu_check.py --dry`` over every bundle."""
    return gpu_check("--dry", "--rounds", "1", *map(str, bundles.values()))

"""Shared fixtures of the runtime tests: the graph they all use, its compiled programs
(each compiled once per session) and reference inputs.

Caches: unless the environment already names them, ``DPT_IR_CACHE`` and Warp's kernel
cache (``WARP_CACHE_PATH``) point to a temporary directory this session owns, so the
tests never read or write the user's caches. This runs at collection time, before any
test initialises Warp.
"""

from __future__ import annotations

import atexit
import os
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

if not os.environ.get("DPT_IR_CACHE") or not os.environ.get("WARP_CACHE_PATH"):
    _TMP = tempfile.mkdtemp(prefix="dpt_ir_runtime_tests_")
    atexit.register(shutil.rmtree, _TMP, ignore_errors=True)
    os.environ.setdefault("DPT_IR_CACHE", os.path.join(_TMP, "dpt_ir"))
    os.environ.setdefault("WARP_CACHE_PATH", os.path.join(_TMP, "warp"))

import warp as wp  # noqa: E402

import dpt_ir as dp  # noqa: E402

SHAPE = (3, 4)
WRT = ["x"]


def rt_graph() -> dp.Graph:
    """The runtime tests' graph: a scalar loss (with a ``log`` that flags out-of-domain
    inputs), an array output and a bool output.

    ``loss = sum(w * square(1.3 exp(-0.7 x) - obs)) + 0.25 sum(log x)``,
    ``pred = 1.3 exp(-0.7 x) * sqrt(x)``, ``above = 1.3 exp(-0.7 x) > obs``.
    """
    g = dp.GraphBuilder("rt")
    x = g.input("x", shape=SHAPE, dtype="float32")
    obs = g.input("obs", shape=SHAPE, dtype="float32", requires_grad=False)
    w = g.input("w", shape=SHAPE, dtype="float32", requires_grad=False)
    model = 1.3 * dp.exp(-0.7 * x)
    g.output("loss", dp.sum(w * dp.square(model - obs)) + 0.25 * dp.sum(dp.log(x)))
    g.output("pred", model * dp.sqrt(x))
    g.output("above", model > obs)
    return g.build()


def make_inputs(seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs inside every op's domain (x > 0)."""
    rng = np.random.default_rng(seed)
    return {
        "x": rng.uniform(0.5, 2.0, SHAPE).astype(np.float32),
        "obs": rng.uniform(0.0, 1.0, SHAPE).astype(np.float32),
        "w": rng.uniform(0.1, 1.0, SHAPE).astype(np.float32),
    }


def to_warp(inputs: dict[str, np.ndarray], device: str, requires_grad: tuple[str, ...] = ()) -> dict[str, wp.array]:
    """The inputs as wp.arrays on ``device``."""
    return {
        k: wp.array(v, dtype=wp.float32, device=device, requires_grad=k in requires_grad) for k, v in inputs.items()
    }


def assert_close(actual: Any, expected: Any, what: str = "") -> None:
    """float32 comparison against the interpreter."""
    np.testing.assert_allclose(np.asarray(actual), np.asarray(expected), rtol=2e-5, atol=1e-6, err_msg=what)


def assert_program_works(program: dp.Program, seed: int = 1) -> None:
    """A good call of every entry point gives the interpreter's values and gradients."""
    graph = program.graph
    inputs = make_inputs(seed)
    want = dp.interpret(graph, **inputs)
    out = program.run(**inputs)
    for name in want:
        assert_close(out[name], want[name], name)
    if not program.wrt:
        return
    want_grad = dp.interpret_grad(graph, WRT, **inputs)
    out, grads = program.value_and_grad(**inputs)
    assert_close(out["loss"], want["loss"], "loss")
    assert_close(grads["x"], want_grad["x"], "grad x")
    with program.tape_pass() as tp:
        tout = tp.forward(**to_warp(inputs, program.device))
        assert_close(tout["loss"].numpy().reshape(()), want["loss"], "tape loss")
    tgrads = tp.backward(seed={"loss": 1.0})
    assert_close(tgrads["x"].numpy(), want_grad["x"], "tape grad x")
    tp.close()


@pytest.fixture(scope="session")
def graph() -> dp.Graph:
    return rt_graph()


@pytest.fixture(scope="session")
def program(graph: dp.Graph) -> dp.Program:
    """``dp.compile(graph, wrt=["x"])`` with checks on: compiled once per session."""
    return dp.compile(graph, wrt=WRT)


@pytest.fixture(scope="session")
def program_nowrt(graph: dp.Graph) -> dp.Program:
    """The same graph compiled without ``wrt`` (forward only)."""
    return dp.compile(graph)


@pytest.fixture(scope="session")
def dump_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    return tmp_path_factory.mktemp("dump_nochecks")


@pytest.fixture(scope="session")
def program_nochecks(graph: dp.Graph, dump_root: Path) -> dp.Program:
    """``checks=False``, compiled with ``dump_dir`` so tests can read the generated source."""
    return dp.compile(graph, wrt=WRT, checks=False, dump_dir=dump_root)


@pytest.fixture
def inputs() -> Iterator[dict[str, np.ndarray]]:
    yield make_inputs(0)

"""Session fixtures of the compiled-backend tests: the op table and hand-written graphs
compiled once per session (each as one batched program), shared by the value/gradient
tests and the CUDA ahead-of-time compile check, which runs last (see
`pytest_collection_modifyitems`)."""

from __future__ import annotations

import numpy as np
import pytest
from op_cases import CASES, OUTPUT, SPECIAL_CASES, OpCase, compiled, special_seed

import dpt_ir as dp

from .harness import Batch, register

AOT_FILE = "test_cuda_aot.py"


def pytest_collection_modifyitems(session: pytest.Session, config: pytest.Config, items: list[pytest.Item]) -> None:
    """Run the CUDA AOT checks after every other test, so that they see every module the
    session generated (`harness.MODULES`)."""
    last = [i for i in items if i.path.name == AOT_FILE]
    if last:
        items[:] = [i for i in items if i.path.name != AOT_FILE] + last


# -- the op table ------------------------------------------------------------------------
def case_id(index: int) -> str:
    """The id (name prefix) of ``CASES[index]`` in a union graph."""
    return f"c{index:03d}"


def op_cases(dtype: str) -> list[tuple[str, OpCase]]:
    """(id, case) of every op case the backend lowers that runs in ``dtype``."""
    return [(case_id(k), c) for k, c in enumerate(CASES) if dtype in c.dtypes and compiled(c)]


def op_batch(dtype: str) -> Batch:
    """Every op case of ``dtype`` in one graph; a random cotangent seeds each
    differentiable case's output (inputs and seeds are a pure function of the case index)."""
    graphs, inputs, wrt, seeds = {}, {}, {}, {}
    for pid, case in op_cases(dtype):
        rng = np.random.default_rng(int(pid[1:]))
        graph = case.build(dtype)
        graphs[pid] = graph
        inputs[pid] = case.inputs(rng, dtype)
        wrt[pid] = case.wrt
        if case.wrt:
            t = graph.types[graph.output_value(OUTPUT)]
            seeds[pid] = {OUTPUT: rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype)}
    batch = Batch(f"ops_{dtype}", graphs, inputs, wrt, seeds)
    batch.compile()
    return batch


@pytest.fixture(scope="session")
def ops_float64() -> Batch:
    """The float64 op cases, compiled as one program (run, value_and_grad and tape)."""
    return op_batch("float64")


@pytest.fixture(scope="session")
def ops_float32() -> Batch:
    """The float32 op cases, compiled as one program (run, value_and_grad and tape)."""
    return op_batch("float32")


# -- special values ---------------------------------------------------------------------
def special_cases() -> list[tuple[str, str, OpCase]]:
    """(id, dtype, case) of every special-value case in each of its dtypes."""
    return [(f"s{k:03d}{dtype[-2:]}", dtype, c) for k, c in enumerate(SPECIAL_CASES) for dtype in c.dtypes]


@pytest.fixture(scope="session")
def special_batch() -> Batch:
    """Every special-value case, in both dtypes, in one program compiled with
    ``checks=False``: with the status checks compiled in, the first ±inf or NaN would raise
    NumericalError before any value could be compared, and a NaN-for-inf error would go
    unseen. One program for both dtypes (inputs of one length) keeps it to one module of
    few kernels; without a loss it has no value_and_grad plan (``run`` and the tape pass
    check it; the op lowerings are the same in every plan). Seeds are `special_seed` (±1),
    as in the interpreter's oracle tests."""
    graphs, inputs, wrt, seeds = {}, {}, {}, {}
    for pid, dtype, case in special_cases():
        graphs[pid] = case.build(dtype)
        inputs[pid] = case.inputs(np.random.default_rng(0), dtype)
        wrt[pid] = case.wrt
        if case.wrt:
            seeds[pid] = special_seed(case, dtype)
    # An "ops_" label: like the op-table unions, too large for the CUDA AOT check's NVRTC
    # budget (test_cuda_aot.TOO_LARGE); its lowerings are the op table's, which the AOT
    # op sampler covers.
    batch = Batch("ops_special_values", graphs, inputs, wrt, seeds, with_loss=False)
    batch.compile(checks=False)
    return batch


# -- hand-written graphs at moderate sizes -------------------------------------------------
def beer_graph(n: int = 256) -> dp.Graph:
    """``sum(w * square(1.3 exp(-0.7 x) - obs))`` over an ``n x n`` image (float32)."""
    g = dp.GraphBuilder("beer")
    x = g.input("x", (n, n), "float32")
    obs = g.input("obs", (n, n), "float32", requires_grad=False)
    w = g.input("w", (n, n), "float32", requires_grad=False)
    g.output("loss", dp.sum(w * dp.square(1.3 * dp.exp(-0.7 * x) - obs)))
    return g.build()


@pytest.fixture(scope="session")
def beer_program() -> dp.Program:
    """The beer graph (256 x 256) compiled wrt ``x``."""
    return register(dp.compile(beer_graph(), wrt=["x"]), "beer")


def softmax_xent_graph(rows: int = 256, classes: int = 256) -> dp.Graph:
    """Softmax cross-entropy: ``mean(logsumexp(z, axis=1) - sum(onehot * z, axis=1))``."""
    g = dp.GraphBuilder("xent")
    z = g.input("z", (rows, classes), "float32")
    onehot = g.input("onehot", (rows, classes), "float32", requires_grad=False)
    g.output("loss", dp.mean(dp.logsumexp(z, axis=1) - dp.sum(onehot * z, axis=1)))
    return g.build()


def normalisation_graph(n: int = 256) -> dp.Graph:
    """Row normalisation with two reductions (mean, then variance) and a squared error:
    ``y = (x - mean) / sqrt(var + 1e-5)``, ``loss = sum(square(y - t))``; ``y`` is an output."""
    g = dp.GraphBuilder("norm")
    x = g.input("x", (n, n), "float32")
    t = g.input("t", (n, n), "float32", requires_grad=False)
    d = x - dp.mean(x, axis=1, keepdims=True)
    y = d * dp.rsqrt(dp.mean(dp.square(d), axis=1, keepdims=True) + 1e-5)
    g.output("y", y)
    g.output("loss", dp.sum(dp.square(y - t)))
    return g.build()


def determinism_batch() -> Batch:
    """Beer, softmax cross-entropy and normalisation (256 x 256, float32) as one program:
    ``loss`` seeded with 1, ``y`` with a random cotangent."""
    rng = np.random.default_rng(2024)
    n = 256
    onehot = np.zeros((n, n), np.float32)
    onehot[np.arange(n), rng.integers(0, n, n)] = 1.0
    graphs = {"beer": beer_graph(n), "xent": softmax_xent_graph(n, n), "norm": normalisation_graph(n)}
    inputs = {
        "beer": {k: rng.uniform(0.5, 1.5, (n, n)).astype(np.float32) for k in ("x", "obs", "w")},
        "xent": {"z": rng.normal(0.0, 3.0, (n, n)).astype(np.float32), "onehot": onehot},
        "norm": {"x": rng.normal(1.0, 2.0, (n, n)).astype(np.float32), "t": rng.normal(size=(n, n)).astype(np.float32)},
    }
    wrt = {"beer": ("x",), "xent": ("z",), "norm": ("x",)}
    one = np.asarray(1.0, np.float32)
    seeds = {
        "beer": {"loss": one},
        "xent": {"loss": one},
        "norm": {"loss": one, "y": rng.uniform(-1.0, 1.0, (n, n)).astype(np.float32)},
    }
    batch = Batch("determinism", graphs, inputs, wrt, seeds)
    batch.compile()
    return batch


@pytest.fixture(scope="session")
def det_batch() -> Batch:
    """`determinism_batch`, compiled once per session."""
    return determinism_batch()

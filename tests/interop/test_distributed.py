"""examples/data_parallel.py: 2 gloo ranks on loopback, bounded in time. After 20 SGD steps
the data-parallel parameters equal a single-process run on the full batch (float64, 1e-10).

The ranks are forked from this process (``torch.multiprocessing`` with the fork start
method), so they reuse its imported modules and compiled programs instead of paying
the imports again; the example's own launcher (spawn) runs the same ``_worker``.
"""

from __future__ import annotations

import importlib.util
import sys
import time
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest

from tests.interop.conftest import require

require("dpt_ir.torch")
import torch.multiprocessing as mp  # noqa: E402

import dpt_ir as dp  # noqa: E402

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "data_parallel.py"
STEPS = 20
WORLD = 2
TIMEOUT_S = 120.0


def load_example() -> ModuleType:
    spec = importlib.util.spec_from_file_location("data_parallel_example", EXAMPLE)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # the forked ranks find the worker by this name
    spec.loader.exec_module(module)
    return module


@pytest.mark.skipif(sys.platform != "linux", reason="the ranks are forked (Linux)")
def test_two_gloo_ranks_equal_single_process_full_batch(tmp_path: Path) -> None:
    example = load_example()
    single = example.train(0, 1, STEPS)
    dp.compile(example.build(example.BATCH // WORLD), wrt=["theta"], device="cpu")  # the ranks' program, cached
    out = tmp_path / "theta.npy"
    ctx = mp.start_processes(
        example._worker,
        args=(WORLD, STEPS, example.free_port(), str(out)),
        nprocs=WORLD,
        join=False,
        start_method="fork",
    )
    deadline = time.monotonic() + TIMEOUT_S
    try:
        while not ctx.join(timeout=1.0):
            if time.monotonic() > deadline:
                pytest.fail(f"{WORLD} gloo ranks did not finish {STEPS} steps in {TIMEOUT_S} s")
    finally:
        for p in ctx.processes:
            if p.is_alive():
                p.kill()
    parallel = np.load(out)
    assert np.abs(single).max() > 0.1  # the training moved the parameters
    np.testing.assert_allclose(parallel, single, rtol=0, atol=1e-10)

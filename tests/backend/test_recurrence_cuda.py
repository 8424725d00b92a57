"""The CUDA driver of recurrence groups (`dpt_ir.backends.cxx.recurrence`), without a GPU.

- The module ``dp.compile`` would generate for a GPU (forward, ``value_and_grad`` and tape
  pipelines) of spline filters (``nearest`` with its prepadding, ``grid-constant`` with a
  cval, ``wrap``; float32 and float64) holds C++ launches only for the filters and their
  adjoints, one thread per line, no float atomic, and builds for sm_90 with NVRTC.
- The CUDA plan exported and replayed on the CPU (``gpu_check.py --dry``): the CUDA drivers
  built as host C++ (one line per thread) and the CPU drivers (lines in lanes) equal the
  reference (the bundle's tolerance) and each other bit for bit; an infinite input raises the node's status flag.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp

from .bundle_replay import Replayed, replay_with_poison
from .harness import float_atomics
from .test_cuda_aot import compile_sm90, cuda_variant

FILTERS = [
    ("float32", "nearest", 0),
    ("float64", "grid-constant", 1),
    ("float32", "wrap", 0),
    ("float64", "reflect", 1),
]


def _graph(loss: bool) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    g = dp.GraphBuilder("recurrence_cuda")
    rng = np.random.default_rng(29)
    feed, total = {}, None
    for k, (dtype, mode, axis) in enumerate(FILTERS):
        x = g.input(f"x{k}", (5, 19, 3), dtype)
        attrs = {"axis": axis, "mode": mode, "npad": 12 if mode in ("nearest", "grid-constant") else 0,
                 "cval": 0.75, "order": 3 + k % 3}  # fmt: skip
        y = g.emit("spline_filter1d", [x], attrs)
        g.output(f"y{k}", y)
        feed[x.name] = rng.standard_normal(x.shape).astype(dtype)
        term = dp.cast(dp.sum(y * y), "float64")
        total = term if total is None else total + term
    if loss and total is not None:
        g.output("loss", total)
    return g.build(), feed


def test_cuda_module_holds_cxx_line_drivers_and_compiles_for_sm90() -> None:
    graph, _ = _graph(True)
    module = cuda_variant(graph, tuple(f"x{k}" for k in range(len(FILTERS))), "loss")
    source = Path(module.__file__).read_text()
    lines = [line for line in source.splitlines() if "] recurrence over" in line]
    # run: one launch per filter; value_and_grad and tape: the filter and its adjoint
    assert len(lines) == 5 * len(FILTERS) and all(": [cxx] " in line for line in lines), lines
    assert not float_atomics(source)
    compile_sm90(module)


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    graph, feed = _graph(False)  # the plan's constants: the functionals' weights
    return replay_with_poison(graph, feed, tmp_path_factory.mktemp("recurrence_bundle"), "x0", 7)


def test_cuda_and_cpu_drivers_replayed_on_the_cpu_equal_the_reference_bit_for_bit(replay: tuple) -> None:
    results, bad, _ = replay
    for cuda in (False, True):
        assert len(results[cuda]) == len(FILTERS) and not bad[cuda], (cuda, bad[cuda])
    for key, value in results[False].items():
        np.testing.assert_array_equal(value, results[True][key], err_msg=key)


def test_an_infinite_input_raises_its_flag(replay: tuple) -> None:
    _, _, raised = replay
    for cuda in (False, True):
        assert len(raised[cuda]) == 1 and "spline_filter1d" in raised[cuda][0], raised[cuda]

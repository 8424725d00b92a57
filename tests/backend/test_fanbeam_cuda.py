"""The CUDA drivers of fan-beam projection groups (`dpt_ir.backends.cxx.fanbeam`), without a GPU.

- The module ``dp.compile`` would generate for a GPU of ``dp.fanbeam`` (float32 and a float64
  stack; forward, ``value_and_grad`` and tape pipelines) holds C++ launches for the projector
  and its transpose, no float atomic, and builds for sm_90 with NVRTC.
- The CUDA plan exported and replayed on the CPU (``gpu_check.py --dry``): the CUDA drivers
  built as host C++ (one line or one image row per thread) and the CPU drivers equal the
  reference (the bundle's tolerance) and each other bit for bit; an infinite pixel raises the
  node's status flag.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.ops.fanbeam import FanBeamAttrs

from .bundle_replay import Replayed, replay_with_poison
from .harness import float_atomics
from .test_cuda_aot import compile_sm90, cuda_variant

ANGLES = [0.1, 0.9, 1.6, 2.8, 4.4]


def _graph(loss: bool) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    g = dp.GraphBuilder("fanbeam_cuda")
    rng = np.random.default_rng(29)
    x0 = g.input("x0", (9, 13), "float32")
    x1 = g.input("x1", (2, 12, 10), "float64")
    y0 = dp.fanbeam(x0, ANGLES, source_origin=25.0, origin_det=10.0, det_count=17)
    y1 = dp.fanbeam(x1, ANGLES, source_origin=12.0, origin_det=0.0, det_count=11, det_width=1.5)
    g.output("y0", y0)
    g.output("y1", y1)
    # the transpose on its own, so that the replay runs its drivers too
    s2 = g.input("s2", (2, *y1.shape[-2:]), "float64")
    attrs = FanBeamAttrs(angles=ANGLES, source_origin=12.0, origin_det=0.0, det_count=11, det_width=1.5,
                         in_shape=(2, 12, 10)).model_dump()  # fmt: skip
    g.output("x2", s2.builder.emit("fanbeam_adjoint", [s2], attrs))
    if loss:
        g.output("loss", dp.cast(dp.sum(y0 * y0), "float64") + dp.sum(y1 * y1))
    feed = {"x0": rng.standard_normal((9, 13)).astype("float32"), "x1": rng.standard_normal((2, 12, 10)),
            "s2": rng.standard_normal((2, *y1.shape[-2:]))}  # fmt: skip
    return g.build(), feed


def test_cuda_module_holds_cxx_fanbeam_drivers_and_compiles_for_sm90() -> None:
    graph, _ = _graph(True)
    module = cuda_variant(graph, ("x0", "x1"), "loss")
    source = Path(module.__file__).read_text()
    lines = [line for line in source.splitlines() if "] projection over" in line]
    # run: one launch per projection; value_and_grad and tape: the projectors and their transposes
    assert len(lines) == 3 + 2 * (2 * 2 + 1) and all(": [cxx] " in line for line in lines), lines
    assert not float_atomics(source)
    compile_sm90(module)


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    graph, feed = _graph(False)  # the plan's constants: the line tables
    return replay_with_poison(graph, feed, tmp_path_factory.mktemp("fanbeam_bundle"), "x0", 60)


def test_cuda_and_cpu_drivers_replayed_on_the_cpu_equal_the_reference_bit_for_bit(replay: Replayed) -> None:
    results, bad, _ = replay
    for cuda in (False, True):
        assert len(results[cuda]) == 3 and not bad[cuda], (cuda, bad[cuda])
    for key, value in results[False].items():
        np.testing.assert_array_equal(value, results[True][key], err_msg=key)


def test_an_infinite_pixel_raises_its_flag(replay: Replayed) -> None:
    _, _, raised = replay
    for cuda in (False, True):
        assert len(raised[cuda]) == 1 and "fanbeam" in raised[cuda][0], raised[cuda]


def test_the_cpu_program_s_lanes_give_the_cuda_drivers_bits(replay: Replayed) -> None:
    """The CPU forward sums 8 lines in lanes over the samples any of them reaches, the CUDA
    driver one line per thread over its own: each line's sum is the same."""
    results, _, _ = replay
    graph, feed = _graph(False)
    out = dp.compile(graph, device="cpu").run(**feed)
    assert len(results[True]) == len(out)
    for key, value in results[True].items():
        name = key.rsplit("/", 1)[-1]  # the bundle's buffer "output/<name>"
        np.testing.assert_array_equal(out[name].reshape(-1), value.reshape(-1), err_msg=key)

"""The CUDA drivers of projection groups (`dpt_ir.backends.cxx.projection`), without a GPU.

- The module ``dp.compile`` would generate for a GPU of ``dp.radon`` (a padded frame in
  float32, a cropped stack in float64; forward, ``value_and_grad`` and tape pipelines) holds
  C++ launches for radon and its transpose, no float atomic, and builds for sm_90 with NVRTC.
- The CUDA plan exported and replayed on the CPU (``gpu_check.py --dry``): the CUDA drivers
  built as host C++ (one detector column or one image row per thread) and the CPU drivers
  equal the reference (the bundle's tolerance) and each other bit for bit; an infinite pixel
  raises the node's status flag.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp

from .bundle_replay import Replayed, replay_with_poison
from .harness import float_atomics
from .test_cuda_aot import compile_sm90, cuda_variant

THETA = [0.0, 21.5, 90.0, 133.0, 200.0]


def _graph(loss: bool) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    g = dp.GraphBuilder("projection_cuda")
    rng = np.random.default_rng(29)
    x0 = g.input("x0", (9, 13), "float32")
    x1 = g.input("x1", (2, 12, 10), "float64")
    y0 = dp.radon(x0, THETA, circle=False)
    y1 = dp.radon(x1, THETA)
    g.output("y0", y0)
    g.output("y1", y1)
    if loss:
        g.output("loss", dp.cast(dp.sum(y0 * y0), "float64") + dp.sum(y1 * y1))
    feed = {"x0": rng.standard_normal((9, 13)).astype("float32"), "x1": rng.standard_normal((2, 12, 10))}
    return g.build(), feed


def test_cuda_module_holds_cxx_projection_drivers_and_compiles_for_sm90() -> None:
    graph, _ = _graph(True)
    module = cuda_variant(graph, ("x0", "x1"), "loss")
    source = Path(module.__file__).read_text()
    lines = [line for line in source.splitlines() if "] projection over" in line]
    # run: one launch per radon; value_and_grad and tape: radon and its transpose
    assert len(lines) == 5 * 2 and all(": [cxx] " in line for line in lines), lines
    assert not float_atomics(source)
    compile_sm90(module)


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    graph, feed = _graph(False)  # the plan's constants: the angle tables
    return replay_with_poison(graph, feed, tmp_path_factory.mktemp("projection_bundle"), "x0", 60)


def test_cuda_and_cpu_drivers_replayed_on_the_cpu_equal_the_reference_bit_for_bit(replay: tuple) -> None:
    results, bad, _ = replay
    for cuda in (False, True):
        assert len(results[cuda]) == 2 and not bad[cuda], (cuda, bad[cuda])
    print(sorted(results[True]))
    for key, value in results[False].items():
        np.testing.assert_array_equal(value, results[True][key], err_msg=key)


def test_an_infinite_pixel_raises_its_flag(replay: tuple) -> None:
    _, _, raised = replay
    for cuda in (False, True):
        assert len(raised[cuda]) == 1 and "radon" in raised[cuda][0], raised[cuda]


def _banded_graph() -> tuple[dp.Graph, dict[str, np.ndarray]]:
    """Transposes of two CPU bands with interleaved runs: a cropped frame (70 rows, 70 wide: four
    runs of 18; every tap tested) and a square one (80², float32: taps outside the band land in
    the work block's margins untested), and a float32 forward whose inner rows read their taps
    unmasked, in pairs on the CPU."""
    theta = [float(t) for t in np.linspace(0.0, 180.0, 24, endpoint=False)] + [37.3, 301.0]
    g = dp.GraphBuilder("projection_cuda_bands")
    rng = np.random.default_rng(7)
    feed = {}
    for name, shape, dtype in (("s", (70, 90), "float64"), ("q", (80, 80), "float32")):
        attrs = {"theta": theta, "circle": True, "in_shape": shape, "out_shape": (shape[0], len(theta))}
        g.output(f"{name}t", g.emit("radon_adjoint", [g.input(name, attrs["out_shape"], dtype)], attrs))
        feed[name] = rng.standard_normal(attrs["out_shape"]).astype(dtype)
    x = g.input("x", (2, 70, 90), "float32")
    g.output("y", dp.radon(x, theta))
    feed["x"] = rng.standard_normal((2, 70, 90)).astype("float32")
    return g.build(), feed


def test_banded_transpose_and_unmasked_forward_on_the_cpu_equal_the_cuda_drivers_bit_for_bit(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    # the bundle holds the CUDA target's drivers (one row or column per thread) in both host
    # builds; the CPU program's own drivers (bands of 64 rows, 8 lanes, paired reads) must agree
    graph, feed = _banded_graph()
    results, bad, raised = replay_with_poison(graph, feed, tmp_path_factory.mktemp("bands"), "x", 35 * 90 + 45)
    for cuda in (False, True):
        assert len(results[cuda]) == 3 and not bad[cuda], (cuda, bad[cuda])
        assert len(raised[cuda]) == 1 and "radon" in raised[cuda][0], raised[cuda]
    cpu = dp.compile(graph, device="cpu", threads=2).run(**feed)
    for key, value in cpu.items():
        np.testing.assert_array_equal(value.reshape(-1), results[True][f"output/{key}"], err_msg=key)

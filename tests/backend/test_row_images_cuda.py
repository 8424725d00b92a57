"""Row images and row ends (`backends.cxx.row_images`, `row_ends`) on the CUDA path, without a GPU.

A pad along the rows only (a 1-D correlation along axis 0) leaves no guard: the CUDA driver runs the
element function with the per-row image indices in ``rb``. A 2-D constant pad keeps a guard along the
row: the CPU's row ends run the inlined ends function, CUDA the edge function everywhere. The CUDA
module builds for sm_90, and the exported plan replayed on the CPU (``gpu_check.py --dry``) gives
the CUDA drivers' bits equal to the CPU drivers' and the reference, and an infinite input raises
its node's flag. A mapped pad's adjoint sums several images at its first and last rows: the CPU
runs them as summed row images (one slot per image, a row class without the sums), CUDA through the
edge function, with the same bits. A float32 chain of fmaf taps (``accumulate="dtype"``) gives the
same bits on both drivers."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp

from .bundle_replay import Replayed, replay_with_poison
from .test_cuda_aot import compile_sm90, cuda_variant

K = np.array([[0.5, 1.0, -0.25], [1.0, -4.0, 2.0], [0.0, 1.5, 0.75]])


def _graph() -> tuple[dp.Graph, dict[str, np.ndarray]]:
    g = dp.GraphBuilder("row_images_cuda")
    rng = np.random.default_rng(31)
    x = g.input("x", (3, 13, 17))
    y = g.input("y", (11, 9), "float64")
    g.output("rows", dp.correlate1d(x * x, [1.0, -2.0, 0.5, 0.25], axis=1, mode="constant", cval=0.5))
    g.output("both", dp.correlate(y + 1.0, K, mode="constant"))
    g.output("mapped", dp.correlate(y, K, mode="reflect"))
    z = g.input("z", (14, 12))
    wide = dp.correlate(z * z, K, mode="constant")
    attrs = {"before": [2, 1], "after": [1, 1], "mode": "nearest", "cval": 0.0}
    g.output("summed", wide.builder.emit("pad_adjoint", [wide], attrs))
    g.output("chained", dp.correlate(z, K, mode="nearest", accumulate="dtype"))
    feed = {
        "x": rng.standard_normal((3, 13, 17)).astype(np.float32),
        "y": rng.standard_normal((11, 9)),
        "z": rng.standard_normal((14, 12)).astype(np.float32),
    }
    return g.build(), feed


def test_the_cuda_module_compiles_for_sm90() -> None:
    graph, _ = _graph()
    module = cuda_variant(graph)
    source = Path(module.__file__).read_text()
    assert "_ri0[" in source  # the row images' tables, read by both drivers
    assert "rs = rb[" in source  # the summed rows' class
    assert "fmaf((float)" in source  # accumulate="dtype": the ordered float32 chain
    compile_sm90(module)


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Replayed:
    graph, feed = _graph()
    return replay_with_poison(graph, feed, tmp_path_factory.mktemp("row_images_bundle"), "x", 20)


def test_cuda_and_cpu_drivers_replayed_on_the_cpu_agree_bit_for_bit(replay: Replayed) -> None:
    results, bad, _ = replay
    for cuda in (False, True):
        expected = {"output/rows", "output/both", "output/mapped", "output/summed", "output/chained"}
        assert set(results[cuda]) == expected, results[cuda].keys()
        assert not bad[cuda], (cuda, bad[cuda])
    for key, value in results[False].items():
        np.testing.assert_array_equal(value, results[True][key], err_msg=key)


def test_an_infinite_input_raises_its_flag(replay: Replayed) -> None:
    _, _, raised = replay
    for cuda in (False, True):
        assert raised[cuda], cuda

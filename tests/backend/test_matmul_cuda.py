"""The CUDA driver of ``matmul`` (`dpt_ir.backends.cxx.contraction.cuda_driver`), without a GPU.

- The module ``dp.compile`` would generate for a GPU (forward, ``value_and_grad`` and tape
  pipelines) holds only C++ launches for the products, of whole blocks of 256 threads, with
  shared tiles and barriers and no float atomic, and builds for sm_90 with NVRTC.
- The CUDA plan exported and replayed on the CPU (``gpu_check.py --dry``): the CUDA drivers
  built as host C++ (each thread doing its block's tile loads itself: the same addressing,
  bounds and k-tile walk) and the CPU drivers over the CUDA partition equal the reference for
  odd sizes, batch broadcasting, vectors and transpose flags, and equal each other bit for bit
  (the documented order); a non-finite product raises the node's status flag.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.cxx.contraction import BLOCK
from dpt_ir.export import export_cuda
from dpt_ir.export.cuda import cuda_plans
from dpt_ir.passes.options import CompileOptions

from .harness import float_atomics
from .test_cuda_aot import compile_sm90, cuda_variant

# (a shape, b shape, transpose_a, transpose_b): sizes that are not multiples of the tiles.
PRODUCTS = [
    ((33, 17), (17, 65), False, False),
    ((2, 17, 33), (65, 17), True, True),
    ((3, 1, 5, 9), (2, 9, 4), False, False),
    ((5,), (3, 5, 2), False, False),
    ((4, 7), (7,), False, False),
    ((6,), (6,), False, False),
    ((20, 40), (18, 40), False, True),
    ((40, 20), (40, 18), True, False),
    # thin products, which the CPU plan runs on its direct kernel (`contraction.choose`)
    ((70, 40), (40,), False, False),
    ((40,), (40, 70), False, False),
    ((3, 33, 20), (3, 20, 1), False, False),
    ((50, 3), (3, 60), False, False),
    ((20, 300), (300, 2), False, False),
]


def _graph(products: dict[str, int], loss: bool = True) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    """The first ``products[dtype]`` of `PRODUCTS` in each dtype, outputs ``<dtype>_c<k>``, and
    with ``loss`` an output ``loss`` summing their squares."""
    g = dp.GraphBuilder("matmul_cuda_" + "_".join(f"{d}x{n}" for d, n in products.items()))
    rng = np.random.default_rng(3)
    feed, total = {}, None
    for dtype, count in products.items():
        for k, (sa, sb, ta, tb) in enumerate(PRODUCTS[:count]):
            a, b = g.input(f"{dtype}_a{k}", sa, dtype), g.input(f"{dtype}_b{k}", sb, dtype)
            out = g.emit("matmul", [a, b], {"transpose_a": ta, "transpose_b": tb})
            g.output(f"{dtype}_c{k}", out)
            feed[a.name], feed[b.name] = rng.standard_normal(sa).astype(dtype), rng.standard_normal(sb).astype(dtype)
            term = dp.cast(dp.sum(out * out), "float64")
            total = term if total is None else total + term
    if loss and total is not None:
        g.output("loss", total)
    return g.build(), feed


def test_cuda_module_holds_cxx_tile_drivers_and_compiles_for_sm90() -> None:
    """Two products (odd sizes; transposes with a broadcast batch) and their gradients."""
    products = 2
    graph, _ = _graph({"float32": products})
    wrt = tuple(f"float32_{x}{k}" for k in range(products) for x in "ab")
    module = cuda_variant(graph, wrt, "loss")
    source = Path(module.__file__).read_text()
    # Launches (one comment line each): run: one per product; value_and_grad and tape: the
    # product and its two gradients, every one on the C++ path.
    lines = [line for line in source.splitlines() if "] contraction over" in line]
    assert len(lines) == 7 * products and all(": [cxx] " in line for line in lines), lines
    assert "wp.tile_" not in source  # no Warp tiles left: the C++ driver shares its own tiles
    assert source.count("__syncthreads();") >= 2 * 3 * products and "__shared__ float As" in source
    assert not float_atomics(source)
    compile_sm90(module)


def test_cuda_launches_are_whole_blocks() -> None:
    graph, _ = _graph({"float32": len(PRODUCTS)}, loss=False)
    build = cuda_plans(graph, {"run": CompileOptions()}, True)
    launches = build.kernels["run"]
    assert len(launches) == len(PRODUCTS) and all(f"n_{build.units[k.name].name}(" in k.text for k in launches)
    assert all(k.dim % BLOCK == 0 for k in launches)  # every thread of a block reaches each barrier


@dataclass
class Replay:
    """The exported CUDA plan of `_graph`'s products, replayed on the CPU by both host builds
    of its ``kernels.cu`` (`benchmarks.gpu_check.Host`: CPU drivers, CUDA drivers), on finite
    inputs (``results``, ``raised``) and with an infinite operand (``raised_inf``); ``cpu``: the
    CPU program's own results (its direct kernel on the thin products)."""

    results: dict[bool, dict[str, np.ndarray]]
    raised: dict[bool, list[int]]
    raised_inf: dict[bool, list[int]]
    bad: dict[bool, list[str]]
    status: list[dict[str, str]]
    cpu: dict[str, np.ndarray]


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> Replay:
    """Every product in float32, the first three in float64 (one export, two host builds)."""
    from benchmarks import gpu_check
    from benchmarks.gpu_bundle_io import inputs_of, load

    counts = {"float32": len(PRODUCTS), "float64": 3}
    graph, feed = _graph(counts, loss=False)
    program = dp.compile(graph, device="cpu")
    folder = tmp_path_factory.mktemp("matmul_bundle")
    export_cuda(program, str(folder / "ok"), inputs=feed)
    doc, ref, source = load(folder / "ok")
    (plan,) = doc["plans"]
    data = inputs_of(doc, ref, folder / "ok")
    inf = {**data, "float32_a0": np.full_like(data["float32_a0"], np.inf)}
    out = Replay({}, {}, {}, {}, doc["status"], program.run(**feed))
    for cuda in (False, True):
        be = gpu_check.Host(source, cuda, folder)
        results, out.raised[cuda], _ = gpu_check.run_plan(be, plan, data)
        out.results[cuda] = {k: np.array(v) for k, v in results.items()}
        out.bad[cuda] = gpu_check.compare(plan, results, ref, doc["tolerance"])
        out.raised_inf[cuda] = gpu_check.run_plan(be, plan, inf)[1]
    return out


def test_cuda_and_cpu_drivers_replayed_on_the_cpu_equal_the_reference(replay: Replay) -> None:
    for cuda in (False, True):
        assert len(replay.results[cuda]) == sum((len(PRODUCTS), 3)), cuda
        assert not replay.bad[cuda] and not replay.raised[cuda], (cuda, replay.bad[cuda], replay.raised[cuda])


def test_cuda_host_replay_is_bit_identical_to_the_cpu_drivers(replay: Replay) -> None:
    """The CUDA drivers (host build) give the CPU drivers' bits: one summation order."""
    for key, value in replay.results[False].items():
        assert np.array_equal(value, replay.results[True][key]), key


def test_cpu_direct_kernel_equals_the_cuda_host_replay(replay: Replay) -> None:
    """The CPU program, thin products on its direct kernel, gives the CUDA drivers' bits."""
    from dpt_ir.backends.cxx.contraction import choose, contraction_of

    graph, _ = _graph({"float32": len(PRODUCTS), "float64": 3}, loss=False)
    c_types = {"float32": "float", "float64": "double"}
    products = [n.name for n in graph.nodes if n.op == "matmul"]
    direct = [p for p in products if choose(contraction_of(graph, p), c_types[graph.types[p].dtype])]
    assert len(direct) >= 5, direct
    for key, value in replay.results[True].items():
        assert np.array_equal(replay.cpu[key.removeprefix("output/")].ravel(), value.ravel()), key


def test_a_nonfinite_product_raises_its_flag(replay: Replay) -> None:
    for cuda in (False, True):
        (slot,) = replay.raised_inf[cuda]
        assert "matmul" in replay.status[slot]["message"], replay.status[slot]

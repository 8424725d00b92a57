"""The CUDA kernels of ``matmul`` (`dpt_ir.backends.warp.matmul.cuda_kernel`), without a GPU.

- The module ``dp.compile`` would generate for a GPU (forward, ``value_and_grad`` and tape
  pipelines) holds one ``wp.tile_matmul`` kernel per product, no float atomic, and builds
  for sm_90 with NVRTC.
- The same tile kernels, built for the CPU (Warp runs a tile kernel's block as one thread
  there), equal the interpreter for odd sizes, batch broadcasting, vectors and transpose
  flags: this runs the padding, masking and tile-walking logic the GPU would run.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import warp as wp

import dpt_ir as dp
from dpt_ir.backends.warp import codegen
from dpt_ir.backends.warp.launches import STATUS, STATUS_BASE
from dpt_ir.backends.warp.matmul import BLOCK_DIM
from dpt_ir.backends.warp.module import cache_root, content_key, import_source
from dpt_ir.passes.manager import run_pipeline
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


def test_cuda_module_holds_tile_kernels_and_compiles_for_sm90() -> None:
    """Two products (odd sizes; transposes with a broadcast batch) and their gradients: NVRTC
    takes about a second per distinct tile kernel, so the others are left to the CPU run below
    and the op sampler of test_cuda_aot.py."""
    products = 2
    graph, _ = _graph({"float32": products})
    wrt = tuple(f"float32_{x}{k}" for k in range(products) for x in "ab")
    module = cuda_variant(graph, wrt, "loss")
    source = Path(module.__file__).read_text()
    # Launches (one comment line each): run: one per product; value_and_grad and tape: the
    # product and its two gradients. Equal kernel texts are defined once.
    assert source.count("] contraction over") == 7 * products, source.count("] contraction over")
    assert source.count("wp.tile_matmul(") >= 3 * products  # at least each product's three kernels
    assert "wp.zeros(shape=" not in source  # none of the CPU loop kernels
    assert not float_atomics(source)
    compile_sm90(module)


def test_tile_kernels_equal_the_interpreter_on_the_cpu() -> None:
    """Every product in float32 (tiles converted to float64), the odd one in float64 too
    (clang takes about a second per tile kernel)."""
    counts = {"float32": len(PRODUCTS), "float64": 1}
    graph, feed = _graph(counts, loss=False)
    plan = run_pipeline(graph, CompileOptions()).graph
    source = codegen.generate({"run": plan}, graph.name, "CUDA tile kernels run on the CPU", True, "cuda")
    module = import_source(source.text, cache_root() / "cuda_variants", f"dpt_ir_cuda_{content_key(source.text)}")
    expected = dp.interpret(graph, **feed)
    roots = {g["id"]: g["roots"][0] for g in plan.meta["groups"] if g["kind"] == "contraction"}
    products = [k for k in source.kernels if k.group in roots]
    assert len(products) == sum(counts.values())
    for launch in products:
        value = roots[launch.group]
        node = plan.node_map[value]
        dtype = node.type.dtype
        buffers = {v: wp.array(feed[v].ravel(), device="cpu") for v in node.inputs}
        buffers[value] = wp.zeros(node.type.size, dtype=wp.dtype_from_numpy(np.dtype(dtype)), device="cpu")
        buffers[STATUS] = wp.zeros(len(source.slots) + 1, dtype=wp.int32, device="cpu")
        args = [launch.status_base if p == STATUS_BASE else buffers[p] for p in launch.params]
        # On the CPU a block is one thread: one launch index per tile, not BLOCK_DIM.
        wp.launch(getattr(module, launch.function), dim=launch.dim // BLOCK_DIM, inputs=args, device="cpu")
        name = next(o.name for o in graph.outputs if o.value == value)
        got = buffers[value].numpy().reshape(node.type.shape)
        tol = 1e-12 if dtype == "float64" else 1e-6
        np.testing.assert_allclose(got, expected[name], rtol=tol, atol=tol, err_msg=name)
        assert not buffers[STATUS].numpy().any(), name
        # A non-finite result raises the node's flag in the launch's slot of the status word.
        buffers[node.inputs[0]].fill_(float("inf"))
        wp.launch(getattr(module, launch.function), dim=launch.dim // BLOCK_DIM, inputs=args, device="cpu")
        assert buffers[STATUS].numpy()[launch.status_base] == 1, name

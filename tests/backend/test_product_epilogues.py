"""Fused epilogues of matrix products (`dpt_ir.passes.fusion_products`,
`dpt_ir.backends.cxx.product_epilogue`).

- Fusion: a pointwise consumer of a product runs in the product's kernel where the target says
  so (CUDA always; the CPU up to 64² outputs, or with ``epilogues=True``), and not when it reads the product
  anywhere but at its own element, when a reduction already took it, or when it is a stencil.
- Bits: with the epilogue, every output equals the unfused program's, on the packed kernel, both
  direct (thin) kernels, batched and broadcast products, float32 and float64, 1 and 2 threads, in
  ``run`` and in a backward whose gradient sum is a product's epilogue; values equal the
  interpreter's.
- Status: a non-finite or out-of-domain value computed in the epilogue names its node.
- CUDA: the module builds for sm_90 with NVRTC, and the exported plan replayed on the CPU (both
  host builds) equals the reference and the CPU program bit for bit.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.ir.kernel_ir import plan_of

from .bundle_replay import replay_with_poison
from .test_cuda_aot import compile_sm90, cuda_variant

# (x shape, w shape, dtype): the packed kernel, a vector times a matrix and a thin product
# (the two direct kernels: lanes along the columns, along the rows), a batch, odd float64 sizes.
LAYERS = [
    ((70, 90), (90, 130), "float32"),
    ((1, 256), (256, 96), "float32"),
    ((300, 40), (40, 4), "float32"),
    ((3, 17, 33), (33, 48), "float32"),
    ((37, 53), (53, 29), "float64"),
]


def _layer(xs: tuple[int, ...], ws: tuple[int, int], dtype: str) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    g = dp.GraphBuilder(f"layer_{'x'.join(map(str, xs))}_{dtype}")
    x, w = g.input("x", xs, dtype), g.input("w", ws, dtype)
    b = g.input("b", (ws[1],), dtype)
    g.output("y", 2.0 * dp.tanh(x @ w + b) - 1.0)
    rng = np.random.default_rng(len(xs) + ws[1])
    feed = {
        "x": rng.standard_normal(xs).astype(dtype),
        "w": (rng.standard_normal(ws) / np.sqrt(ws[0])).astype(dtype),
        "b": rng.standard_normal(ws[1]).astype(dtype),
    }
    return g.build(), feed


def _groups(program: dp.Program, plan: str = "run") -> list:
    return list(plan_of(program.plans[plan].graph).groups)


@pytest.mark.parametrize("layer", LAYERS, ids=lambda s: f"{'x'.join(map(str, s[0]))}_{s[2]}")
def test_fused_layer_keeps_the_unfused_bits(layer: tuple) -> None:
    graph, feed = _layer(*layer)
    fused = {t: dp.compile(graph, device="cpu", threads=t, epilogues=True) for t in (1, 2)}
    plain = dp.compile(graph, device="cpu", epilogues=False)
    (group,) = _groups(fused[1])
    assert group.kind == "contraction" and group.epilogue, group
    assert len(_groups(plain)) == 2
    want = plain.run(**feed)["y"]
    for t, program in fused.items():
        assert np.array_equal(program.run(**feed)["y"], want), t
    tol = 1e-5 if layer[2] == "float32" else 1e-12
    np.testing.assert_allclose(want, dp.interpret(graph, **feed)["y"], rtol=tol, atol=tol)


def test_the_cpu_fuses_small_products_by_default_and_fusion_txt_says_so(tmp_path: Path) -> None:
    """`Target.product_epilogues`: the CPU fuses products of up to 64² outputs unless told."""
    graph, _ = _layer(*LAYERS[0])  # 70 x 130 outputs
    assert len(_groups(dp.compile(graph, device="cpu"))) == 2
    small, _ = _layer((64, 90), (90, 64), "float32")
    assert len(_groups(dp.compile(small, device="cpu"))) == 1
    assert len(_groups(dp.compile(small, device="cpu", epilogues=False))) == 2
    dp.compile(graph, device="cpu", epilogues=True, dump_dir=str(tmp_path))
    text = (tmp_path / "fusion.txt").read_text()
    assert "epilogue: sub_" in text and "run on each finished tile of matmul_0" in text, text


def test_a_backward_gradient_sum_runs_on_the_product_tiles() -> None:
    """``dx = dZ Wᵀ + ct * x`` (x is read by the product and by the pointwise term): in the tape
    pass's backward the sum is the epilogue of the gradient's product (``value_and_grad`` fuses
    it into the loss's reduction instead)."""
    g = dp.GraphBuilder("backward_epilogue")
    x, w = g.input("x", (40, 50), "float64"), g.input("w", (50, 30), "float64")
    s = g.input("s", (40, 30), "float64", requires_grad=False)
    g.output("loss", dp.sum(s * dp.tanh(x @ w)) + dp.sum(0.5 * x * x))
    graph = g.build()
    rng = np.random.default_rng(5)
    feed = {"x": rng.standard_normal((40, 50)), "w": rng.standard_normal((50, 30)) / 7}
    feed["s"] = rng.standard_normal((40, 30))
    fused = dp.compile(graph, wrt=["x", "w"], device="cpu", epilogues=True)
    plain = dp.compile(graph, wrt=["x", "w"], device="cpu", epilogues=False)
    backward = [k for k in _groups(fused, "tape") if k.phase == "backward" and k.kind == "contraction"]
    assert any(k.epilogue for k in backward), backward
    grads = {}
    for key, program in (("fused", fused), ("plain", plain)):
        with program.tape_pass() as tp:
            tp.forward(**feed)
        grads[key] = {n: v.numpy() for n, v in tp.backward(seed={"loss": 1.0}).items()}
        tp.close()
    ref = dp.interpret_grad(graph, ["x", "w"], **feed)
    for name in ("x", "w"):
        assert np.array_equal(grads["fused"][name], grads["plain"][name]), name
        np.testing.assert_allclose(grads["fused"][name], ref[name], rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize(
    "consumer",
    [
        pytest.param(lambda c, x: dp.sum(c * c, axis=1), id="reduction"),
        pytest.param(lambda c, x: c + dp.transpose(c), id="transpose-of-the-product"),
        pytest.param(lambda c, x: c[::-1] * 2.0, id="reversed-rows"),
        pytest.param(lambda c, x: dp.correlate(c, np.ones((3, 3)) / 9.0, mode="nearest"), id="stencil"),
        pytest.param(
            lambda c, x: c * x.builder.emit("pad", [x[1:-1, 2:]], {"before": (1, 0), "after": (1, 2)}),
            id="pad",
        ),
    ],
)
def test_consumers_reading_other_elements_stay_kernels_of_their_own(consumer) -> None:
    g = dp.GraphBuilder("not_an_epilogue")
    x, w = g.input("x", (24, 24), "float64"), g.input("w", (24, 24), "float64")
    g.output("y", consumer(x @ w, x))
    graph = g.build()
    program = dp.compile(graph, device="cpu", epilogues=True)
    assert not any(k.epilogue for k in _groups(program) if k.kind == "contraction")
    rng = np.random.default_rng(1)
    feed = {"x": rng.standard_normal((24, 24)), "w": rng.standard_normal((24, 24))}
    np.testing.assert_allclose(program.run(**feed)["y"], dp.interpret(graph, **feed)["y"], rtol=1e-12, atol=1e-12)


def test_an_out_of_domain_epilogue_value_names_its_node() -> None:
    g = dp.GraphBuilder("epilogue_domain")
    x, w = g.input("x", (16, 8), "float32"), g.input("w", (8, 16), "float32")
    g.output("y", dp.log(x @ w))
    program = dp.compile(g.build(), device="cpu", epilogues=True)
    (group,) = _groups(program)
    assert group.epilogue
    feed = {"x": np.ones((16, 8), np.float32), "w": np.ones((8, 16), np.float32)}
    assert np.allclose(program.run(**feed)["y"], np.log(8.0))
    feed["w"][3, 5] = -10.0  # column 5 of the product: 7 - 10 < 0
    with pytest.raises(dp.NumericalError, match="log"):
        program.run(**feed)


def test_cuda_module_with_epilogues_builds_for_sm90() -> None:
    graph, _ = _layer(*LAYERS[0])
    module = cuda_variant(graph)
    source = Path(module.__file__).read_text()
    assert "_epi(" in source and "__syncthreads();" in source
    compile_sm90(module)


def test_exported_cuda_plan_with_an_epilogue_replays_bit_for_bit(tmp_path: Path) -> None:
    """The CUDA plan (epilogues on by default) replayed by both host builds equals the bundle's
    reference and the CPU program (no epilogue) bit for bit; an infinite operand raises the
    product's flag and the epilogue's (``y = 0.5 (x w) + b`` stays infinite)."""
    g = dp.GraphBuilder("export_epilogue")
    x, w, b = g.input("x", (33, 20), "float32"), g.input("w", (20, 40), "float32"), g.input("b", (40,), "float32")
    g.output("y", 0.5 * (x @ w) + b)
    graph = g.build()
    rng = np.random.default_rng(2)
    feed = {k: rng.standard_normal(s).astype(np.float32) for k, s in (("x", (33, 20)), ("w", (20, 40)), ("b", (40,)))}
    results, bad, raised = replay_with_poison(graph, feed, tmp_path, "x", 7)
    assert "_epi(" in (tmp_path / "ok" / "kernels.cu").read_text()  # the plan fused it
    cpu = dp.compile(graph, device="cpu").run(**feed)["y"]
    for cuda in (False, True):
        assert not bad[cuda], (cuda, bad[cuda])
        (y,) = (v for k, v in results[cuda].items() if k.endswith("y"))
        assert np.array_equal(y.ravel(), cpu.ravel()), cuda
        assert any("'matmul_0'" in m for m in raised[cuda]), raised[cuda]
        assert any("'add_" in m and "op add" in m for m in raised[cuda]), raised[cuda]

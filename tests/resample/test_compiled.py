"""Compiled resampling equals the interpreter (values and gradients, float64), the
compiled gradients are exact adjoints (dot tests to 1e-11), the generated source holds no
atomic, two runs are bit-identical, and fusion.txt names the adjoint form.

One program holds every case (each weighted by its own input ``w<k>``), so the module
compiles once; structurally equal cases share kernels (the CSRs are launch constants)."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from tests.resample.cases import coordinates, phantom

RNG = np.random.default_rng(20)
COORDS = coordinates(RNG, (10, 12), (6, 7))
THETA = np.linspace(0.0, 180.0, 10, endpoint=False)
CASES: dict[str, tuple[str, Callable[[dp.Tensor], dp.Tensor]]] = {
    "mc1_constant": ("x", lambda x: dp.map_coordinates(x, COORDS, order=1, cval=0.5)),
    "mc3_nearest": ("x", lambda x: dp.map_coordinates(x, COORDS, mode="nearest")),
    "mc3_reflect": ("x", lambda x: dp.map_coordinates(x, COORDS, mode="reflect")),
    "mc3_gridconst": ("x", lambda x: dp.map_coordinates(x, COORDS, mode="grid-constant", cval=-0.3)),
    "mc0_wrap": ("x", lambda x: dp.map_coordinates(x, COORDS, order=0, mode="wrap")),
    "affine3_mirror": ("x", lambda x: dp.affine_transform(x, [[0.9, 0.3], [-0.2, 1.1]], [1.0, -1.5], mode="mirror")),
    "zoom1_gridwrap": ("x", lambda x: dp.zoom(x, 1.3, order=1, mode="grid-wrap", grid_mode=True)),
    "rotate3": ("x", lambda x: dp.rotate(x, 27.0)),
    "radon": ("img", lambda x: dp.radon(x, THETA)),
}
SHAPES = {"x": (10, 12), "img": (16, 16)}


def _graph() -> tuple[dp.Graph, dict[str, np.ndarray]]:
    g = dp.GraphBuilder("resample_compiled")
    inputs = {name: g.input(name, shape, "float64") for name, shape in SHAPES.items()}
    values = {"x": RNG.normal(size=SHAPES["x"]), "img": phantom(16)}
    loss = None
    for k, (src, fn) in CASES.items():
        y = fn(inputs[src])
        w = g.input(f"w_{k}", y.shape, "float64", requires_grad=False)
        values[f"w_{k}"] = RNG.normal(size=y.shape)
        g.output(k, y)
        term = dp.sum(w * y)
        loss = term if loss is None else loss + term
    g.output("loss", loss)
    return g.build(), values


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dp.Program, dp.Graph, dict[str, np.ndarray], Path]:
    graph, values = _graph()
    dump = tmp_path_factory.mktemp("resample_dump")
    return dp.compile(graph, wrt=list(SHAPES), loss="loss", device="cpu", dump_dir=dump), graph, values, dump


def test_compiled_equals_interpreter(compiled) -> None:
    program, graph, values, _ = compiled
    out, grads = program.value_and_grad(**values)
    want = dp.interpret(graph, **values)
    want_grads = dp.interpret_grad(graph, list(SHAPES), **values)
    for k in [*CASES, "loss"]:
        np.testing.assert_allclose(out[k], want[k], rtol=1e-12, atol=1e-12, err_msg=k)
    for name in SHAPES:
        np.testing.assert_allclose(grads[name], want_grads[name], rtol=1e-11, atol=1e-12, err_msg=name)
    again = program.value_and_grad(**values)
    assert all(np.array_equal(again[1][n], grads[n]) for n in SHAPES)  # bit-identical


@pytest.mark.parametrize("case", ["mc1_constant", "mc3_nearest", "mc3_reflect", "mc3_gridconst", "radon"])
def test_compiled_dot_test(compiled, case: str) -> None:
    """With only ``w_case`` non-zero, loss(x) - loss(0) = <A x, w> and the gradient is Aᵀ w."""
    program, _, values, _ = compiled
    src = CASES[case][0]
    masked = {n: (v if n == f"w_{case}" or not n.startswith("w_") else np.zeros_like(v)) for n, v in values.items()}
    out, grads = program.value_and_grad(**masked)
    zero, _ = program.value_and_grad(**{**masked, src: np.zeros(SHAPES[src])})
    lhs = float(out["loss"] - zero["loss"])
    rhs = float(np.sum(masked[src] * grads[src]))
    assert abs(lhs - rhs) <= 1e-11 * abs(lhs), (lhs, rhs)


def test_generated_source_and_fusion_report(compiled) -> None:
    _, _, _, dump = compiled
    source = "\n".join(p.read_text() for p in (dump / "kernels").glob("*.py"))
    assert "atomic" not in source
    fusion = (dump / "fusion.txt").read_text()
    assert "resample_adjoint" in fusion and "spline_filter1d_adjoint" in fusion
    ops = {op.name: op.doc for op in dp.all_ops()}
    assert "compile-time transposed CSR" in ops["resample_adjoint"]


def test_cuda_variant_compiles_for_sm90(tmp_path: Path) -> None:
    """The module dp.compile would generate for a GPU (one element per thread; float32 data,
    float64 sums) builds for sm_90 with NVRTC, without a GPU."""
    import warp as wp

    from dpt_ir.backends.base import target_for
    from dpt_ir.backends.warp import codegen
    from dpt_ir.passes.manager import run_pipeline
    from dpt_ir.passes.options import CompileOptions
    from dpt_ir.runtime.modules import cache_root, content_key, import_source

    g = dp.GraphBuilder("resample_cuda")
    x = g.input("x", (10, 12), "float32")
    y = dp.map_coordinates(x, COORDS, mode="grid-constant", cval=0.5)
    g.output("loss", dp.sum(y * y) + dp.sum(dp.radon(x[:, 1:11], [0.0, 45.0])))
    options = CompileOptions(wrt=("x",), seeds=("loss",), seed_values={"loss": 1.0}, loss="loss")
    graphs = {"vg": run_pipeline(g.build(), options).graph}
    source = codegen.generate(graphs, "resample_cuda", "CUDA variant", True, target_for("cuda"))
    module = import_source(source.text, cache_root() / "cuda_variants", f"dpt_ir_cuda_{content_key(source.text)}")
    wp.init()
    paths = [Path(p) for p in wp.compile_aot_module(module, arch=90, module_dir=tmp_path)]
    assert paths and all(p.stat().st_size > 0 for p in paths)
    assert "atomic" not in source.text

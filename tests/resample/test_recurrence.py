"""The exact recursive B-spline prefilter (kind ``recurrence``, issue 29).

- scipy as the oracle, float64: `dp.spline_filter` / `dp.spline_filter1d`, `dp.map_coordinates`
  (constant and graph-tensor coordinates) and `dp.zoom`, orders 2 to 5, every mode, through
  the interpreter, to 1e-12 (relative to the largest value). At order 3 the compiled program
  (CPU, threads 1 and 2) equals the interpreter bit for bit, every mode, forward and
  gradient; orders 2, 4 and 5 compile (float32: values and gradients wrt the image and the
  coordinates as the interpreter's).
- The adjoint: ``<A x, y> == <x, Aᵀ y>`` to 1e-12 for every mode and order, with the prepadding.
- Fusion gives each filter its own ``recurrence`` kernel, its input materialised.

Lines are 10 samples or longer (orders 2, 3) and 40 (orders 4, 5): scipy <= 1.17's reflect
initialisation is off by ~|z|^(2n) (docs/resampling.md), below 1e-12 there.
Cost: one program compiled twice (threads 1 and 2), one once.
"""

from __future__ import annotations

import numpy as np
import pytest
import scipy.ndimage as ndi

import dpt_ir as dp
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.ops.spline_filter import FilterAttrs, program
from dpt_ir.reference import recurrence_ref

MODES = ("mirror", "reflect", "wrap", "nearest", "constant", "grid-constant", "grid-mirror", "grid-wrap")
rng = np.random.default_rng(29)
IMAGE = rng.normal(size=(11, 13))
COORDS = rng.uniform(-3.0, 15.0, size=(2, 6, 7))


def close(got: np.ndarray, want: np.ndarray, what: str) -> None:
    scale = max(float(np.abs(want).max()), 1.0)
    assert float(np.abs(got - want).max()) <= 1e-12 * scale, what


def _functions(x: dp.Tensor, mode: str) -> dict[str, dp.Tensor]:
    return {
        "filter": dp.spline_filter(x, mode=mode),
        "filter1d": dp.spline_filter1d(x, axis=0, mode=mode),
        "map": dp.map_coordinates(x, COORDS, order=3, mode=mode, cval=0.5),
        "zoom": dp.zoom(x, 1.7, order=3, mode=mode, cval=-0.25),
    }


def _scipy(x: np.ndarray, mode: str) -> dict[str, np.ndarray]:
    return {
        "filter": ndi.spline_filter(x, 3, mode=mode),
        "filter1d": ndi.spline_filter1d(x, 3, axis=0, mode=mode),
        "map": ndi.map_coordinates(x, COORDS, order=3, mode=mode, cval=0.5),
        "zoom": ndi.zoom(x, 1.7, order=3, mode=mode, cval=-0.25),
    }


def graph() -> dp.Graph:
    g = dp.GraphBuilder("recurrence")
    x = g.input("x", IMAGE.shape, "float64")
    loss = None
    for mode in MODES:
        for name, y in _functions(x, mode).items():
            g.output(f"{name}_{mode.replace('-', '_')}", y)
            term = dp.sum(dp.square(y))
            loss = term if loss is None else loss + term
    g.output("loss", loss)
    return g.build()


@pytest.fixture(scope="module")
def programs() -> tuple[dp.Graph, dp.Program, dp.Program]:
    gr = graph()
    return (
        gr,
        dp.compile(gr, wrt=["x"], loss="loss", device="cpu", threads=1),
        dp.compile(gr, wrt=["x"], loss="loss", device="cpu", threads=2),
    )


def test_the_interpreter_equals_scipy_for_every_mode(programs: tuple[dp.Graph, dp.Program, dp.Program]) -> None:
    gr, _, _ = programs
    out = dp.interpret(gr, x=IMAGE)
    for mode in MODES:
        for name, want in _scipy(IMAGE, mode).items():
            close(out[f"{name}_{mode.replace('-', '_')}"], want, f"{name} {mode}")


@pytest.mark.parametrize("order", [2, 4, 5])
def test_every_scipy_order_of_the_filter(order: int) -> None:
    x0 = rng.normal(size=(40, 42)) if order > 3 else IMAGE
    for mode in MODES:
        g = dp.GraphBuilder(f"filter{order}")
        x = g.input("x", x0.shape, "float64")
        g.output("y", dp.spline_filter(x, order=order, mode=mode))
        close(dp.interpret(g.build(), x=x0)["y"], ndi.spline_filter(x0, order, mode=mode), f"{order} {mode}")


@pytest.mark.parametrize("order", [2, 4, 5])
def test_every_scipy_order_interpolates_like_scipy(order: int) -> None:
    """map_coordinates (constant and graph-tensor coordinates) and zoom, every mode."""
    x0 = rng.normal(size=(40, 42))
    c0 = np.random.default_rng(order).uniform(-4.0, 46.0, size=(2, 5, 6))
    for mode in MODES:
        g = dp.GraphBuilder(f"interp{order}")
        x, c = g.input("x", x0.shape, "float64"), g.input("c", c0.shape, "float64")
        g.output("a", dp.map_coordinates(x, c0, order=order, mode=mode, cval=0.5))
        g.output("b", dp.map_coordinates(x, c, order=order, mode=mode, cval=0.5))
        g.output("z", dp.zoom(x, 0.7, order=order, mode=mode, cval=0.5))
        out = dp.interpret(g.build(), x=x0, c=c0)
        want = ndi.map_coordinates(x0, c0, order=order, mode=mode, cval=0.5)
        close(out["a"], want, f"{order} {mode} constant coordinates")
        close(out["b"], want, f"{order} {mode} tensor coordinates")
        close(out["z"], ndi.zoom(x0, 0.7, order=order, mode=mode, cval=0.5), f"{order} {mode} zoom")


def test_orders_2_4_5_compile_like_the_interpreter() -> None:
    g = dp.GraphBuilder("orders245")
    x, c = g.input("x", IMAGE.shape, "float32"), g.input("c", COORDS.shape, "float32")
    ys = [
        dp.map_coordinates(x, COORDS, order=2, mode="reflect"),
        dp.map_coordinates(x, c, order=4, mode="wrap"),
        dp.zoom(x, 1.3, order=5, mode="nearest"),
    ]
    for k, y in enumerate(ys):
        g.output(f"y{k}", y)
    g.output("loss", dp.sum(dp.square(ys[0])) + dp.sum(dp.square(ys[1])) + dp.sum(dp.square(ys[2])))
    gr = g.build()
    feed = {"x": IMAGE.astype(np.float32), "c": COORDS.astype(np.float32)}
    out, grads = dp.compile(gr, wrt=["x", "c"], loss="loss", device="cpu").value_and_grad(**feed)
    want, ref = dp.interpret(gr, **feed), dp.interpret_grad(gr, ["x", "c"], **feed)
    for name in want:
        scale = max(float(np.abs(want[name]).max()), 1.0)
        np.testing.assert_allclose(out[name], want[name], rtol=1e-5, atol=1e-5 * scale, err_msg=name)
    for name in ("x", "c"):
        scale = float(np.abs(ref[name]).max())
        assert float(np.abs(grads[name] - ref[name]).max()) <= 1e-4 * scale, name


def test_compiled_equals_the_interpreter_bit_for_bit(programs: tuple[dp.Graph, dp.Program, dp.Program]) -> None:
    gr, one, two = programs
    want, grad = dp.interpret(gr, x=IMAGE), dp.interpret_grad(gr, ["x"], x=IMAGE)
    for p in (one, two):
        out, got = p.value_and_grad(x=IMAGE)
        for name in want:
            if name != "loss":  # the loss sums in the kernels' reduction order
                np.testing.assert_array_equal(out[name], want[name], err_msg=name)
        close(got["x"], grad["x"], "gradient")
    np.testing.assert_array_equal(one.value_and_grad(x=IMAGE)[1]["x"], two.value_and_grad(x=IMAGE)[1]["x"])


@pytest.mark.parametrize(
    "shape, dtype", [((37, 64), "float64"), ((45, 64), "float32"), ((45, 13), "float32"), ((45, 13), "float64")]
)
def test_every_lane_layout_equals_the_interpreter_bit_for_bit(shape: tuple[int, int], dtype: str) -> None:
    """Along axis 0 the lines of a row are lane-contiguous where the width is a multiple of 32
    (one task of 32 neighbouring lines each), otherwise lanes of their own; along axis 1 the
    lines are rows, moved in 8 x 8 register tiles (45 rows: a task of four whole
    groups of 8, then one of a group and 5 lanes; width 13: entries past the last whole tile, whose
    weights in the causal sum are large enough that their order shows);
    the last task's lanes partly past the end; ``nearest`` adds the edges its transpose folds.
    The cotangent of each filter is a fixed weight, so the gradient is the transposed
    recurrence's bits too."""
    x0, w0 = (rng.normal(size=shape).astype(dtype) for _ in range(2))
    g = dp.GraphBuilder(f"lane_layouts_{dtype}_{shape[1]}")
    x, w = g.input("x", x0.shape, dtype), g.input("w", w0.shape, dtype, requires_grad=False)
    ys = {mode: dp.spline_filter(x, mode=mode) for mode in ("mirror", "nearest")}
    for mode, y in ys.items():
        g.output(mode, y)
    g.output("loss", dp.sum(w * ys["mirror"]) + dp.sum(w * ys["nearest"]))
    gr = g.build()
    want, grad = dp.interpret(gr, x=x0, w=w0), dp.interpret_grad(gr, ["x"], x=x0, w=w0)
    for threads in (1, 2):
        out, got = dp.compile(gr, wrt=["x"], loss="loss", device="cpu", threads=threads).value_and_grad(x=x0, w=w0)
        for mode in ys:
            np.testing.assert_array_equal(out[mode], want[mode], err_msg=f"{mode}, {threads} threads")
        np.testing.assert_array_equal(got["x"], grad["x"], err_msg=f"gradient, {threads} threads")


def test_each_filter_is_its_own_recurrence_kernel(programs: tuple[dp.Graph, dp.Program, dp.Program]) -> None:
    _, one, _ = programs
    graph_ = one.plans["value_and_grad"].graph
    groups = [g for g in plan_of(graph_).groups if g.kind == "recurrence"]
    ops = {graph_.node_map[g.roots[0]].opdef.name for g in groups}
    assert ops == {"spline_filter1d", "spline_filter1d_adjoint"}
    assert all(len(g.nodes) == 1 and g.inputs == graph_.node_map[g.roots[0]].inputs for g in groups)


@pytest.mark.parametrize("order", [2, 3, 4, 5])
@pytest.mark.parametrize("mode", MODES)
def test_the_adjoint_is_the_transpose(mode: str, order: int) -> None:
    npad = 12 if mode in ("nearest", "grid-constant") else 0
    a = FilterAttrs(axis=1, mode=mode, npad=npad, order=order)
    x = rng.normal(size=(3, 17, 2))
    y = rng.normal(size=(3, 17 + 2 * npad, 2))
    ax = recurrence_ref.run(program(a, x.shape, False), x)
    aty = recurrence_ref.run(program(a, y.shape, True), y)
    lhs, rhs = float(np.vdot(ax, y)), float(np.vdot(x, aty))
    assert abs(lhs - rhs) <= 1e-12 * max(abs(lhs), 1.0), (lhs, rhs)

"""Layout views on the C++ path (issue 11): reads through ``broadcast_to``, ``reshape``,
``expand_dims``, ``squeeze``, ``transpose`` and ``slice`` of memory (scalar, row, strided and
shifted reads), views of members evaluated where the view reads them, and views in a
reduction's epilogue; the slices' adjoints (``embed_slice``: per-axis images, as pads);
joins (``concat``) along the inner and an outer axis, each input read at its clamped index;
values and gradients against the interpreter.

Cost: one graph of 24 x 70 compiled once (run, value_and_grad and tape pipelines).
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

from .harness import off_cxx

R, C = 24, 70


def views() -> dp.Graph:
    g = dp.GraphBuilder("cxx_views")
    x = g.input("x", (R, C), "float32")
    a = g.input("a", (C, R), "float32")
    s = g.input("s", (), "float32", requires_grad=False)
    f = g.input("f", (R * C,), "float32", requires_grad=False)
    c = g.input("c", (R, 1, C), "float32", requires_grad=False)
    m = dp.sum(dp.exp(-x), axis=1)  # a row result, read back through reshape and broadcast_to
    y = x * dp.broadcast_to(s, (R, C)) + dp.reshape(f, (R, C)) - dp.broadcast_to(dp.reshape(m, (R, 1)), (R, C))
    y = y + dp.transpose(a) * dp.squeeze(c, 1) + dp.expand_dims(dp.sin(x[:, 3]), 1)
    d = x[2:, ::2] - x[:-2, 1::2]  # shifted rows, strided columns
    cat = dp.concatenate([x[:, :30], dp.exp(x[:, 30:])], axis=1) * dp.concatenate([dp.transpose(a)[:10], x[10:]])
    g.output("y", dp.tanh(y))
    g.output("cat", cat)
    g.output("rows", dp.reshape(dp.mean(y, axis=1), (1, R)) * 2.0)  # a view in the epilogue
    g.output("loss", dp.sum(dp.square(y)) + dp.sum(dp.square(d)) + dp.sum(dp.transpose(a)[:, 1:4]) + dp.sum(cat))
    return g.build()


def inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)

    def u(*shape: int) -> np.ndarray:
        return rng.uniform(-1.0, 1.0, shape).astype(np.float32)

    return {"x": u(R, C), "a": u(C, R), "s": u(), "f": u(R * C), "c": u(R, 1, C)}


@pytest.fixture(scope="module")
def program() -> dp.Program:
    return dp.compile(views(), wrt=["x", "a"], loss="loss")


def test_every_launch_takes_the_cxx_path(program: dp.Program) -> None:
    """Run, value_and_grad and tape: the slices' adjoints (``embed_slice``) included."""
    for name in ("run", "value_and_grad", "tape"):
        plan = program.plans[name]
        off = off_cxx(plan.kernels, plan.module.text)
        assert plan.kernels and not off, (name, off)


def test_values_and_gradients_match_the_interpreter(program: dp.Program) -> None:
    ins = inputs(3)
    got, want = program.run(**ins), dp.interpret(program.graph, **ins)
    for name in ("y", "rows", "cat", "loss"):
        np.testing.assert_allclose(got[name], want[name], rtol=2e-5, atol=2e-5, err_msg=name)
    _, grads = program.value_and_grad(**ins)
    ref = dp.interpret_grad(program.graph, ["x", "a"], seed={"loss": 1.0}, **ins)
    with program.tape_pass() as tp:
        tp.forward(**ins)
    taped = tp.backward(seed={"loss": 1.0})
    for name in ("x", "a"):
        scale = float(np.abs(ref[name]).max())
        assert float(np.abs(grads[name] - ref[name]).max()) <= 2e-5 * scale, name
        assert float(np.abs(taped[name].numpy() - ref[name]).max()) <= 2e-5 * scale, name
    tp.close()


def test_image_tables_over_the_limit_are_launch_constants() -> None:
    """A per-axis view's image tables past `gathers.TABLE_MAX` elements (a strided slice's
    adjoint over a long axis) are launch constants (``$images:``/``$counts:``), not C++ text
    the size of the field in every build; the adjoint reads them right."""
    from dpt_ir.backends.cxx import gathers

    n = gathers.TABLE_MAX + 8
    g = dp.GraphBuilder("cxx_views_big_images")
    x = g.input("x", (n,), "float32")
    g.output("loss", dp.sum(dp.square(x[::3])))
    program = dp.compile(g.build(), wrt=["x"])
    plan = program.plans["value_and_grad"]
    assert not off_cxx(plan.kernels, plan.module.text)
    params = {p for k in plan.kernels for p in k.constants}
    assert any(p.startswith("$images:") for p in params) or any(p.startswith("$counts:") for p in params), params
    assert len(plan.module.text) < 200_000, len(plan.module.text)
    x_np = np.random.default_rng(3).uniform(-1.0, 1.0, n).astype(np.float32)
    _, grads = program.value_and_grad(x=x_np)
    expected = np.zeros(n, np.float32)
    expected[::3] = 2.0 * x_np[::3]
    np.testing.assert_array_equal(grads["x"], expected)

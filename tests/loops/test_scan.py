"""`dp.scan` and `dp.fori_loop` in the reference interpreter: values and gradients against
an explicitly unrolled Python loop of the same step, a NumPy loop and central finite
differences (float64); the checkpoint policies; IR round trips; contract errors."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp

LAPLACIAN = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
SHAPE = (6, 5)
STEPS = 7


def heat_step(k: dp.Tensor) -> Callable[[dp.Tensor, dp.Tensor], tuple[dp.Tensor, dp.Tensor]]:
    def step(u: dp.Tensor, src: dp.Tensor) -> tuple[dp.Tensor, dp.Tensor]:
        u = u + 0.2 * k * dp.correlate(u, LAPLACIAN, mode="nearest") + 0.1 * dp.tanh(src)
        return u, dp.sum(dp.square(u))

    return step


def heat_graph(loop: bool, checkpoint: Any = None) -> dp.Graph:
    """Heat steps with a closed-over conductivity ``k`` and a per-step source ``xs``; the
    loss reads the final field and every step's energy (a y)."""
    g = dp.GraphBuilder("heat_loop" if loop else "heat_unrolled")
    u0 = g.input("u0", SHAPE, "float64")
    k = g.input("k", SHAPE, "float64")
    xs = g.input("xs", (STEPS, *SHAPE), "float64")
    wts = g.input("wts", (STEPS,), "float64", requires_grad=False)
    step = heat_step(k)
    if loop:
        u, energy = dp.scan(step, u0, xs, checkpoint=checkpoint)
        total = dp.sum(energy * wts)
    else:
        u, total = u0, None
        for i in range(STEPS):
            u, e = step(u, xs[i])
            total = e * wts[i] if total is None else total + e * wts[i]
    g.output("loss", dp.sum(u * u0) + 0.01 * total)
    return g.build()


def heat_inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    return {
        "u0": rng.uniform(-1.0, 1.0, SHAPE),
        "k": rng.uniform(0.5, 1.0, SHAPE),
        "xs": rng.uniform(-1.0, 1.0, (STEPS, *SHAPE)),
        "wts": np.arange(1.0, STEPS + 1),
    }


def central_differences(graph: dp.Graph, name: str, inputs: dict[str, np.ndarray], h: float = 1e-6) -> np.ndarray:
    grad = np.zeros_like(inputs[name])
    for idx in np.ndindex(grad.shape):
        plus, minus = inputs[name].copy(), inputs[name].copy()
        plus[idx] += h
        minus[idx] -= h
        lp = float(dp.interpret(graph, **{**inputs, name: plus})["loss"])
        lm = float(dp.interpret(graph, **{**inputs, name: minus})["loss"])
        grad[idx] = (lp - lm) / (2 * h)
    return grad


WRT = ["u0", "k", "xs"]


@pytest.fixture(scope="module")
def heat() -> dict[str, Any]:
    inputs = heat_inputs()
    loop, unrolled = heat_graph(True), heat_graph(False)
    return {
        "inputs": inputs,
        "loop": loop,
        "unrolled": unrolled,
        "grads": dp.interpret_grad(loop, WRT, **inputs),
        "unrolled_grads": dp.interpret_grad(unrolled, WRT, **inputs),
    }


def test_values_equal_the_unrolled_loop(heat: dict[str, Any]) -> None:
    loop = dp.interpret(heat["loop"], **heat["inputs"])["loss"]
    unrolled = dp.interpret(heat["unrolled"], **heat["inputs"])["loss"]
    np.testing.assert_allclose(loop, unrolled, rtol=1e-13)


@pytest.mark.parametrize("name", WRT)
def test_gradients_equal_the_unrolled_loop(heat: dict[str, Any], name: str) -> None:
    np.testing.assert_allclose(heat["grads"][name], heat["unrolled_grads"][name], rtol=1e-11, atol=1e-13)


@pytest.mark.parametrize("name", ["u0", "k"])
def test_gradients_equal_central_differences(heat: dict[str, Any], name: str) -> None:
    fd = central_differences(heat["loop"], name, heat["inputs"])
    np.testing.assert_allclose(heat["grads"][name], fd, rtol=1e-6, atol=1e-8)


def test_xs_gradient_equals_central_differences_on_some_entries(heat: dict[str, Any]) -> None:
    inputs, graph, h = heat["inputs"], heat["loop"], 1e-6
    for idx in [(0, 0, 0), (3, 2, 4), (STEPS - 1, 5, 1)]:
        plus, minus = inputs["xs"].copy(), inputs["xs"].copy()
        plus[idx] += h
        minus[idx] -= h
        fd = (
            dp.interpret(graph, **{**inputs, "xs": plus})["loss"]
            - dp.interpret(graph, **{**inputs, "xs": minus})["loss"]
        ) / (2 * h)
        assert heat["grads"]["xs"][idx] == pytest.approx(float(fd), rel=1e-6, abs=1e-9)


@pytest.mark.parametrize("checkpoint", [1, 2, 3, STEPS + 4, "auto"])
def test_checkpointed_gradients_are_bit_identical(heat: dict[str, Any], checkpoint: Any) -> None:
    grads = dp.interpret_grad(heat_graph(True, checkpoint), WRT, **heat["inputs"])
    for name in WRT:
        assert np.array_equal(grads[name], heat["grads"][name]), name


def test_repeated_runs_are_bit_identical(heat: dict[str, Any]) -> None:
    again = dp.interpret_grad(heat["loop"], WRT, **heat["inputs"])
    assert all(np.array_equal(again[n], heat["grads"][n]) for n in WRT)


def test_structures_tuple_carry_list_xs_no_y_and_float32() -> None:
    """A (tuple) carry of two tensors of different shapes, a list of two xs, a tuple of ys
    and a step returning no y, in float32, against a NumPy loop."""
    g = dp.GraphBuilder("pairs")
    a0 = g.input("a0", (3,), "float32")
    b0 = g.input("b0", (), "float32")
    xs = g.input("xs", (4, 3), "float32")
    ws = g.input("ws", (4,), "float32")

    def step(carry: tuple[dp.Tensor, dp.Tensor], x: list[dp.Tensor]) -> Any:
        a, b = carry
        a2 = dp.sin(a) * x[1] + x[0]
        b2 = b + dp.sum(a2)
        return (a2, b2), (a2 * 2.0, b2)

    (a, b), (ya, yb) = dp.scan(step, (a0, b0), [xs, ws])
    (c,), none = dp.scan(lambda carry, _: ((carry[0] * 0.5,), None), (a,), length=3)
    assert none is None and ya.shape == (4, 3) and yb.shape == (4,)
    g.output("out", dp.sum(c) + b + dp.sum(ya) + dp.sum(yb))
    graph = g.build()
    rng = np.random.default_rng(0)
    inputs = {
        "a0": rng.uniform(-1, 1, 3).astype(np.float32),
        "b0": np.float32(0.5),
        "xs": rng.uniform(-1, 1, (4, 3)).astype(np.float32),
        "ws": rng.uniform(-1, 1, 4).astype(np.float32),
    }
    na, nb, tot = inputs["a0"].copy(), inputs["b0"], np.float32(0)
    for i in range(4):
        na = np.sin(na) * inputs["ws"][i] + inputs["xs"][i]
        nb = nb + na.sum(dtype=np.float32)
        tot = tot + (na * 2).sum(dtype=np.float32) + nb
    expected = (na * 0.125).sum(dtype=np.float32) + nb + tot
    out = dp.interpret(graph, **inputs)["out"]
    assert out.dtype == np.float32
    np.testing.assert_allclose(out, expected, rtol=1e-5)
    grads = dp.interpret_grad(graph, ["a0", "b0", "xs", "ws"], **inputs)
    assert {k: v.dtype for k, v in grads.items()} == {k: np.dtype(np.float32) for k in grads}


def test_fori_loop_reads_the_step_index() -> None:
    g = dp.GraphBuilder("fori")
    x = g.input("x", (4,), "float64")
    y = dp.fori_loop(5, lambda i, c: c * 0.5 + dp.cast(i, "float64") * x, x)
    g.output("out", dp.sum(dp.square(y)))
    graph = g.build()
    xv = np.array([0.3, -1.0, 2.0, 0.7])
    c = xv.copy()
    for i in range(5):
        c = c * 0.5 + i * xv
    np.testing.assert_allclose(dp.interpret(graph, x=xv)["out"], np.sum(c**2), rtol=1e-14)
    # d/dx: c = a x with a = prod-weighted sum: c_5 = x (0.5^5 + sum_i i 0.5^(4-i))
    a = 0.5**5 + sum(i * 0.5 ** (4 - i) for i in range(5))
    np.testing.assert_allclose(dp.interpret_grad(graph, "x", x=xv)["x"], 2 * a * a * xv, rtol=1e-13)


def test_nested_scan_and_round_trips(heat: dict[str, Any]) -> None:
    g = dp.GraphBuilder("nested")
    x = g.input("x", (3,), "float64")
    w = g.input("w", (3,), "float64")

    def outer(c: dp.Tensor, _: None) -> tuple[dp.Tensor, None]:
        inner, _ = dp.scan(lambda d, _: (dp.sin(d) * w, None), c, length=2)
        return inner + c, None

    y, _ = dp.scan(outer, x, length=3, checkpoint=2)
    g.output("out", dp.sum(y))
    graph = g.build()
    for gr in (graph, heat["loop"]):
        text = gr.to_text()
        assert "body graph" in text
        assert dp.Graph.from_text(text) == gr
        assert dp.Graph.model_validate_json(gr.model_dump_json()) == gr
    xv, wv = np.array([0.1, 0.5, -0.4]), np.array([1.1, 0.9, 1.3])
    c = xv
    for _ in range(3):
        d = c
        for _ in range(2):
            d = np.sin(d) * wv
        c = d + c
    np.testing.assert_allclose(dp.interpret(graph, x=xv, w=wv)["out"], c.sum(), rtol=1e-14)
    fd = central_differences(
        graph.replace(outputs=(dp.Output(name="loss", value=graph.outputs[0].value),)), "w", {"x": xv, "w": wv}
    )
    np.testing.assert_allclose(dp.interpret_grad(graph, ["w"], x=xv, w=wv)["w"], fd, rtol=1e-7)


# -- contract errors ----------------------------------------------------------------------
def _scan_error(build: Callable[[dp.GraphBuilder], object], *words: str) -> None:
    g = dp.GraphBuilder("bad")
    with pytest.raises(dp.ContractError) as info:
        build(g)
    for w in words:
        assert w in str(info.value), str(info.value)


def test_a_carry_that_changes_shape_or_dtype_is_refused() -> None:
    def shape(g: dp.GraphBuilder) -> object:
        x = g.input("x", (4,), "float64")
        return dp.scan(lambda c, _: (c[1:], None), x, length=3)

    def dtype(g: dp.GraphBuilder) -> object:
        x = g.input("x", (4,), "float64")
        return dp.scan(lambda c, _: (dp.cast(c, "float32"), None), x, length=3)

    _scan_error(shape, "carry 0 changes type", "f64[4]", "f64[3]")
    _scan_error(dtype, "carry 0 changes type", "f32[4]")


def test_length_that_disagrees_with_xs_is_refused() -> None:
    def build(g: dp.GraphBuilder) -> object:
        x = g.input("x", (4,), "float64")
        xs = g.input("xs", (5, 4), "float64")
        return dp.scan(lambda c, s: (c + s, None), x, xs, length=6)

    def mixed(g: dp.GraphBuilder) -> object:
        x = g.input("x", (4,), "float64")
        return dp.scan(lambda c, s: (c, None), x, [g.input("a", (5, 4)), g.input("b", (3,))])

    _scan_error(build, "xs 0 (%xs) has 5 rows", "expected 6")
    _scan_error(mixed, "xs 1 (%b) has 3 rows", "expected 5")
    _scan_error(lambda g: dp.scan(lambda c, s: (c, None), g.input("x", (2,))), "length=")


@pytest.mark.parametrize(("checkpoint", "words"), [(0, "K >= 1"), (-2, "K >= 1"), ("revolve", "unknown checkpoint")])
def test_bad_checkpoint_policies_are_refused(checkpoint: Any, words: str) -> None:
    _scan_error(lambda g: dp.scan(lambda c, _: (c, None), g.input("x", (2,)), length=2, checkpoint=checkpoint), words)


def test_misuse_is_refused() -> None:
    leaked: list[dp.Tensor] = []

    def leak(g: dp.GraphBuilder) -> object:
        x = g.input("x", (2,), "float64")

        def step(c: dp.Tensor, _: None) -> tuple[dp.Tensor, None]:
            leaked.append(c * 2.0)
            return c, None

        dp.scan(step, x, length=2)
        return x + leaked[0]

    _scan_error(leak, "already built")
    _scan_error(lambda g: dp.scan(lambda c, _: c, g.input("x", (2,)), length=2), "pair (carry, y)")
    _scan_error(lambda g: dp.scan(lambda c, _: ((c, c), None), g.input("x", (2,)), length=2), "structure of init")
    _scan_error(lambda g: dp.scan(lambda c, _: (c, None), g.input("i", (2,), "int32"), length=2), "float dtype")
    _scan_error(lambda g: dp.fori_loop(-1, lambda i, c: c, g.input("x", (2,))), "an int >= 0")


def test_a_document_whose_body_disagrees_is_refused(heat: dict[str, Any]) -> None:
    doc = heat["loop"].model_dump(mode="json")
    node = next(n for n in doc["nodes"] if n["op"] == "scan")
    node["attrs"]["length"] = STEPS + 1
    with pytest.raises(dp.ContractError, match="leading axis of length 8"):
        dp.Graph.model_validate(doc)


def test_a_malformed_body_block_names_its_line_and_node(heat: dict[str, Any]) -> None:
    text = heat["loop"].to_text()
    broken = text.replace('body graph "heat_loop.body" {', "body {")
    assert broken != text
    with pytest.raises(dp.ContractError, match=r"line \d+, column \d+: expected 'graph \"name\" \{' opening the body"):
        dp.Graph.from_text(broken)
    unclosed = text.replace("    output y.0", "    outputz y.0")
    with pytest.raises(dp.ContractError, match=r"line \d+, column 5: expected a statement"):
        dp.Graph.from_text(unclosed)

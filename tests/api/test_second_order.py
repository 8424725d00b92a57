"""Forward mode and second order in the interpreter (`dp.interpret_jvp`, `dp.interpret_hvp`),
table-driven over the op table: ``J v`` and ``H v`` equal directional central finite
differences (float64) for every differentiable case; the derived graphs drop the first
backward (jvp) and carry their `Derived` record; misuse is a ContractError."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.api.second_order import gnvp_graph, hvp_graph, jvp_graph
from dpt_ir.ir import records

from .second_order_cases import LOSS, Problem, fd_hvp, fd_jvp, problems, rel_error

PROBLEMS = problems() + problems(loops=True)  # the loop ops too: scan, and scan_vjp (third order)
FD_TOL = 1e-5


@pytest.mark.parametrize("p", PROBLEMS, ids=[p.case.name for p in PROBLEMS])
def test_jvp_and_hvp_match_finite_differences(p: Problem) -> None:
    outs, tangents = dp.interpret_jvp(p.graph, p.tangents, **p.inputs)
    expected = fd_jvp(p)
    for name, value in dp.interpret(p.graph, **p.inputs).items():
        np.testing.assert_array_equal(outs[name], value)
    for name, t in tangents.items():
        err = rel_error(t, expected[name])
        assert err <= FD_TOL, f"{p.case.name}: tangent of {name}: relative error {err:.2e}"
    _, grads, hvps = dp.interpret_hvp(p.graph, list(p.case.wrt), p.tangents, loss=LOSS, **p.inputs)
    first = dp.interpret_grad(p.graph, list(p.case.wrt), seed={LOSS: 1.0}, **p.inputs)
    expected_h = fd_hvp(p)
    for w in p.case.wrt:
        np.testing.assert_allclose(grads[w], first[w], rtol=1e-12, atol=1e-12)
        err = rel_error(hvps[w], expected_h[w])
        assert err <= FD_TOL, f"{p.case.name}: H v for {w}: relative error {err:.2e}"


def _model() -> dp.Graph:
    g = dp.GraphBuilder("model")
    x = g.input("x", (6,), "float64")
    y = g.input("y", (6,), "float64")
    n = g.input("n", (6,), "int32")
    r = dp.exp(0.3 * x) * dp.tanh(y) - dp.sin(x * y)
    g.output("r", r)
    g.output("count", n + 1)
    g.output("loss", dp.sum(dp.square(r)) + dp.logsumexp(x * y))
    return g.build()


def _inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {"x": rng.standard_normal(6), "y": rng.standard_normal(6), "n": np.arange(6, dtype=np.int32)}


def test_jvp_graph_drops_the_first_backward_and_records_itself() -> None:
    graph = _model()
    derived = jvp_graph(graph, ["x", "y"])
    record = records.derived_of(derived)
    assert record is not None and record.kind == "jvp" and record.of == ("r", "loss")
    assert record.vectors == {"x": "tangent.x", "y": "tangent.y"}
    assert [i.name for i in derived.inputs] == ["x", "y", "n", "tangent.x", "tangent.y"]
    assert records.autodiff_of(derived) is None  # the levels' records are consumed
    # No cotangent survives: every node left is forward work or tangent work.
    assert not any(i.startswith("ct.") for n in derived.nodes for i in n.inputs)


def test_gnvp_equals_the_vjp_of_the_jvp() -> None:
    graph, rng = _model(), np.random.default_rng(0)
    inputs, v = _inputs(rng), {"x": rng.standard_normal(6), "y": rng.standard_normal(6)}
    derived = gnvp_graph(graph, ["x", "y"], "r")
    record = records.derived_of(derived)
    assert record is not None and record.products == {"x": "gnvp.x", "y": "gnvp.y"}
    got = dp.interpret(derived, **inputs, **{record.vectors[w]: a for w, a in v.items()})
    _, tangents = dp.interpret_jvp(graph, v, **inputs)
    expected = dp.interpret_grad(graph, ["x", "y"], seed={"r": tangents["r"]}, **inputs)
    for w in ("x", "y"):
        np.testing.assert_allclose(got[record.products[w]], expected[w], rtol=1e-12, atol=1e-12)


def test_hvp_graph_is_symmetric_in_its_vectors() -> None:
    """<u, H v> == <v, H u>: the reverse-over-reverse product is a symmetric bilinear form."""
    graph, rng = _model(), np.random.default_rng(1)
    inputs = _inputs(rng)
    u, v = ({"x": rng.standard_normal(6), "y": rng.standard_normal(6)} for _ in range(2))
    hu = dp.interpret_hvp(graph, ["x", "y"], u, **inputs)[2]
    hv = dp.interpret_hvp(graph, ["x", "y"], v, **inputs)[2]
    lhs = sum(float(u[w] @ hv[w]) for w in u)
    rhs = sum(float(v[w] @ hu[w]) for w in v)
    assert abs(lhs - rhs) <= 1e-10 * max(1.0, abs(lhs))
    assert hvp_graph(graph, ["x"], "loss").outputs[-1].name == "hvp.x"


def test_misuse_is_a_contract_error() -> None:
    graph, inputs = _model(), _inputs(np.random.default_rng(2))
    with pytest.raises(dp.ContractError, match=r"'n'.*int32"):
        dp.interpret_jvp(graph, {"n": np.zeros(6)}, **inputs)
    with pytest.raises(dp.ContractError, match=r"tangent for input 'x': expected shape \[6\].*found \[5\]"):
        dp.interpret_jvp(graph, {"x": np.zeros(5)}, **inputs)
    with pytest.raises(dp.ContractError, match=r"\['y'\] are not differentiated inputs"):
        dp.interpret_hvp(graph, ["x"], {"y": np.zeros(6)}, **inputs)
    with pytest.raises(dp.ContractError, match=r"gnvp.*output 'count'.*int32; expected a float output"):
        gnvp_graph(graph, ["x"], "count")
    with pytest.raises(dp.ContractError, match=r"hvp: output 'r'.*shape \[6\]; expected a scalar loss"):
        hvp_graph(graph, ["x"], "r")


def test_outputs_that_are_inputs_or_constant_in_wrt() -> None:
    """An output that is a wrt input has the tangent itself (and gnvp of it is ``v``); one
    that does not depend on wrt has a zero tangent; a zero vector gives a zero product."""
    g = dp.GraphBuilder("edges")
    x = g.input("x", (3,), "float64")
    y = g.input("y", (3,), "float64", requires_grad=False)
    g.output("same", x)
    g.output("other", dp.exp(y))
    g.output("loss", dp.sum(x * y))
    graph, v = g.build(), np.array([1.0, 2.0, 3.0])
    inputs = {"x": np.ones(3), "y": np.arange(3.0)}
    _, tangents = dp.interpret_jvp(graph, {"x": v}, **inputs)
    np.testing.assert_array_equal(tangents["same"], v)
    np.testing.assert_array_equal(tangents["other"], np.zeros(3))
    assert float(tangents["loss"]) == float(v @ inputs["y"])
    derived = gnvp_graph(graph, ["x"], "same")
    np.testing.assert_array_equal(dp.interpret(derived, **inputs, **{"vector.x": v})["gnvp.x"], v)
    _, grads, hvps = dp.interpret_hvp(graph, ["x"], {}, **inputs)
    np.testing.assert_array_equal(grads["x"], inputs["y"])
    np.testing.assert_array_equal(hvps["x"], np.zeros(3))


def test_stop_gradient_passes_the_value_and_no_derivative() -> None:
    """``stop_gradient(x)`` is ``x`` in value and zero in every derivative: ``f = x² + stop_gradient(x)
    · y`` has gradient ``2x`` in x, tangent ``2x tx + x ty``, and Hessian-vector product ``2 v`` in x."""
    g = dp.GraphBuilder("stop")
    x, y = g.input("x", (5,), "float64"), g.input("y", (5,), "float64")
    g.output("loss", dp.sum(x * x + dp.stop_gradient(x) * y))
    graph, rng = g.build(), np.random.default_rng(2)
    xs, ys, tx, ty = (rng.standard_normal(5) for _ in range(4))
    outs = dp.interpret(graph, x=xs, y=ys)
    np.testing.assert_array_equal(outs["loss"], np.sum(xs * xs + xs * ys))
    grads = dp.interpret_grad(graph, ["x", "y"], x=xs, y=ys)
    np.testing.assert_allclose(grads["x"], 2 * xs, rtol=1e-15)
    np.testing.assert_allclose(grads["y"], xs, rtol=1e-15)
    _, tangents = dp.interpret_jvp(graph, {"x": tx, "y": ty}, x=xs, y=ys)
    np.testing.assert_allclose(tangents["loss"], np.sum(2 * xs * tx + xs * ty), rtol=1e-13)
    _, _, hvps = dp.interpret_hvp(graph, ["x"], {"x": tx}, x=xs, y=ys)
    np.testing.assert_allclose(hvps["x"], 2 * tx, rtol=1e-15)


def test_expanded_logsumexp_runs_no_derivative_of_its_shift() -> None:
    """The hvp and jvp plans expand logsumexp (`driver.second_order.EXPAND`); its shift ``m = max(x)``
    passes no derivative (`stop_gradient`), so no argmax (the maximum's derivative) is built, and
    the products equal the whole op's."""
    g = dp.GraphBuilder("lse")
    z = g.input("z", (4, 6), "float64")
    g.output("loss", dp.sum(dp.square(dp.logsumexp(z, axis=1))))
    graph, rng = g.build(), np.random.default_rng(3)
    zs, v = rng.standard_normal((4, 6)) * 3, rng.standard_normal((4, 6))
    products = {}
    for expand in (True, False):
        derived = hvp_graph(graph, ["z"], "loss", expand=expand)
        ops = {n.opdef.name for n in derived.nodes}
        assert "argmax" not in ops, (expand, sorted(ops))
        record = records.derived_of(derived)
        products[expand] = dp.interpret(derived, z=zs, **{record.vectors["z"]: v})[record.products["z"]]
    np.testing.assert_allclose(products[True], products[False], rtol=1e-12)
    assert "argmax" not in {n.opdef.name for n in jvp_graph(graph, ["z"]).nodes}

"""`dp.matmul` and ``@`` (`dpt_ir.linalg`) against ``np.matmul``: values for 2-D, batched
(broadcast) and 1-D operands, interpreter gradients against central finite differences
(float64) and the analytic ``gy @ b.T`` / ``a.T @ gy``, compiled against interpreted (one
program for every shape, float64 and float32), the fused kernel count (one reduction
kernel forward, one per gradient: the products stay in registers), and the
ContractErrors of bad shapes."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 2)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4,)),
]
RNG = np.random.default_rng(5)


def _graph(*dtypes: str) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    """Every shape pair per dtype in one graph: outputs ``o<k>`` (``<dtype>_o<k>`` when
    several dtypes) and a loss summing ``sum(o * s)`` over all of them."""
    g = dp.GraphBuilder("matmul")
    feed: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(7)
    loss = None
    for dtype in dtypes:
        pre = f"{dtype}_" if len(dtypes) > 1 else ""
        for k, (sa, sb) in enumerate(SHAPES):
            a, b = g.input(f"{pre}a{k}", sa, dtype), g.input(f"{pre}b{k}", sb, dtype)
            out = a @ b if k % 2 else dp.matmul(a, b)
            s = g.input(f"{pre}s{k}", out.shape, dtype, requires_grad=False)
            g.output(f"{pre}o{k}", out)
            term = dp.cast(dp.sum(out * s), "float64")
            loss = term if loss is None else loss + term
            for name, shape in ((f"{pre}a{k}", sa), (f"{pre}b{k}", sb), (f"{pre}s{k}", out.shape)):
                feed[name] = rng.standard_normal(shape).astype(dtype)
    assert loss is not None
    g.output("loss", loss)
    return g.build(), feed


WRT = [f"{x}{k}" for k in range(len(SHAPES)) for x in "ab"]


def test_values_equal_numpy() -> None:
    graph, feed = _graph("float64")
    out = dp.interpret(graph, **feed)
    for k in range(len(SHAPES)):
        expected = np.matmul(feed[f"a{k}"], feed[f"b{k}"])
        assert out[f"o{k}"].shape == expected.shape, k
        np.testing.assert_allclose(out[f"o{k}"], expected, rtol=1e-13, atol=1e-14)


def test_integers_and_rmatmul() -> None:
    g = dp.GraphBuilder("ints")
    a, b = g.input("a", (2, 3), "int32"), g.input("b", (3, 2), "int32")
    g.output("p", b.__rmatmul__(a))
    x, y = np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(6, dtype=np.int32).reshape(3, 2) - 2
    out = dp.interpret(g.build(), a=x, b=y)["p"]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, x @ y)


def test_gradients_match_finite_differences_and_transposes() -> None:
    graph, feed = _graph("float64")
    grads = dp.interpret_grad(graph, WRT, seed={"loss": 1.0}, **feed)
    a, b, s = feed["a0"], feed["b0"], feed["s0"]
    np.testing.assert_allclose(grads["a0"], s @ b.T, rtol=1e-13)
    np.testing.assert_allclose(grads["b0"], a.T @ s, rtol=1e-13)
    h = 1e-6
    for name in ("a2", "b2", "a3", "b4", "a5", "b6"):  # batched broadcast and 1-D operands
        x = feed[name]
        fd = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            up, down = x.copy(), x.copy()
            up[i] += h
            down[i] -= h
            hi = dp.interpret(graph, **{**feed, name: up})["loss"]
            lo = dp.interpret(graph, **{**feed, name: down})["loss"]
            fd[i] = (hi - lo) / (2 * h)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-6, atol=1e-8, err_msg=name)


def test_compiled_equals_interpreter_in_few_kernels() -> None:
    graph, feed = _graph("float64", "float32")
    wrt = [f"{d}_{w}" for d in ("float64", "float32") for w in WRT]
    program = dp.compile(graph, wrt=wrt, loss="loss", device="cpu")
    out, grads = program.value_and_grad(**feed)
    expected = dp.interpret(graph, **feed)
    expected_grads = dp.interpret_grad(graph, wrt, seed={"loss": 1.0}, **feed)
    rtol = {"float64": 1e-12, "float32": 1e-5}
    for got, want in ((out, expected), (grads, expected_grads)):
        for name, value in want.items():
            tol = rtol[str(value.dtype)]
            np.testing.assert_allclose(got[name], value, rtol=tol, atol=tol, err_msg=name)
    # Each product (a sum over k of a multiply of two broadcast views) is one reduction
    # kernel that keeps the products in registers: no m x k x n temporary is written,
    # forward or backward.
    for plan in ("run", "value_and_grad"):
        run = program.plans[plan].graph
        groups = run.meta["groups"]
        written = {v for g in groups for v in g["outputs"]}
        mul = {n.name for n in run.nodes if n.op == "mul"}
        products = [n for n in run.nodes if n.op == "sum" and n.inputs[0] in mul]
        assert len(products) >= 2 * len(SHAPES), plan
        for n in products:
            assert n.inputs[0] not in written, (plan, n.name)
            assert run.node_map[n.inputs[0]].meta["group"] == n.meta["group"], (plan, n.name)


BAD = [
    (((3, 4), (5, 2)), ["op 'matmul' on %a, %b", "shapes [3, 4] and [5, 2] do not fit", "(4)", "(5)"]),
    (((4,), (3,)), ["shapes [4] and [3] do not fit", "only axis"]),
    (((2, 3, 4), (3, 4, 2)), ["op 'matmul' on %a, %b", "shapes [2] and [3] do not broadcast"]),
    (((), (3,)), ["rank >= 1", "%a"]),
]


@pytest.mark.parametrize("shapes, words", BAD, ids=["inner", "vectors", "batch", "rank0"])
def test_bad_shapes_are_contract_errors(shapes: tuple[tuple[int, ...], ...], words: list[str]) -> None:
    g = dp.GraphBuilder("bad")
    a, b = g.input("a", shapes[0], "float64"), g.input("b", shapes[1], "float64")
    with pytest.raises(dp.ContractError) as err:
        a @ b
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_numpy_operand_is_refused() -> None:
    g = dp.GraphBuilder("np")
    t = g.input("t", (3, 2), "float64")
    with pytest.raises(dp.ContractError, match="expected dp tensors, found ndarray"):
        np.ones((2, 3)) @ t
    with pytest.raises(dp.ContractError, match="bool"):
        dp.matmul(g.input("m", (2, 3), "bool"), g.input("n", (3, 2), "bool"))

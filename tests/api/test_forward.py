"""Forward mode (`dpt_ir.api.forward`): ops declared linear in an input get the op itself
applied to the tangent (the forward's own kernel shapes), the others the transpose of their
VJP; the op table's `Linear` entries are checked at registration. The values are checked
against finite differences table-driven in test_second_order.py; here, the graph shapes."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.api.second_order import jvp_graph
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import Derivative, Linear, OpDef, get_op, register_op


def _blur_model() -> dp.Graph:
    g = dp.GraphBuilder("blur")
    x = g.input("x", shape=(16, 12), dtype="float64")
    y = dp.gaussian_filter(dp.exp(-x), 1.5)
    g.output("loss", dp.sum(dp.square(y)))
    return g.build()


def test_stencil_tangent_runs_over_the_forward_rows() -> None:
    graph = _blur_model()
    derived = jvp_graph(graph, ["x"])
    ops = [n.op for n in derived.nodes]
    assert "pad_adjoint" not in ops  # no transpose of the blur's adjoint
    forward = sorted(n.type.shape for n in graph.nodes if n.op in ("pad", "correlate_valid"))
    tangent = sorted(n.type.shape for n in derived.nodes[len(graph.nodes) :] if n.op in ("pad", "correlate_valid"))
    assert tangent == forward
    rng = np.random.default_rng(0)
    x0, v = rng.standard_normal((16, 12)), rng.standard_normal((16, 12))
    _, tangents = dp.interpret_jvp(graph, {"x": v}, x=x0)
    eps = 1e-6
    plus = dp.interpret(graph, x=x0 + eps * v)["loss"]
    minus = dp.interpret(graph, x=x0 - eps * v)["loss"]
    np.testing.assert_allclose(tangents["loss"], (plus - minus) / (2 * eps), rtol=1e-6)


def test_multilinear_op_gets_one_product_per_argument() -> None:
    g = dp.GraphBuilder("mm")
    a = g.input("a", shape=(3, 4), dtype="float64")
    b = g.input("b", shape=(4, 2), dtype="float64")
    g.output("y", dp.matmul(a, b))
    graph = g.build()
    derived = jvp_graph(graph, ["a", "b"])
    assert [n.op for n in derived.nodes].count("matmul") == 3  # the forward, a' b and a b'
    rng = np.random.default_rng(1)
    a0, b0, ta, tb = (rng.standard_normal(s) for s in [(3, 4), (4, 2), (3, 4), (4, 2)])
    _, tangents = dp.interpret_jvp(graph, {"a": ta, "b": tb}, a=a0, b=b0)
    np.testing.assert_allclose(tangents["y"], ta @ b0 + a0 @ tb, rtol=1e-12)


def test_affine_op_tangent_drops_its_constant() -> None:
    g = dp.GraphBuilder("pad")
    x = g.input("x", shape=(5,), dtype="float64")
    g.output("y", x.builder.emit("pad", [x], {"before": [2], "after": [1], "mode": "constant", "cval": 3.0}))
    graph = g.build()
    v = np.arange(5.0)
    _, tangents = dp.interpret_jvp(graph, {"x": v}, x=np.ones(5))
    np.testing.assert_array_equal(tangents["y"], np.pad(v, (2, 1)))
    assert get_op("pad").linear is not None


@pytest.mark.parametrize(
    "linear",
    [Linear(((0, 3),)), Linear(((0,), (0,))), Linear(((1,),))],
    ids=["out of range", "twice", "non-differentiable"],
)
def test_bad_linear_entry_is_refused(linear: Linear) -> None:
    base = get_op("mul")
    op = OpDef(
        name="bad_linear_mul",
        kind="elementwise",
        arity=2,
        infer=base.infer,
        reference=base.reference,
        derivative=Derivative({0: lambda c: c.gy}, nondifferentiable=(1,)),
        linear=linear,
        cxx="({0} * {1})",
    )
    with pytest.raises(ContractError, match="bad_linear_mul"):
        register_op(op)

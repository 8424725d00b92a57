"""`expand`: a differentiated logsumexp is rebuilt from its pieces (the shift, exp(x - m), their
sum), which its gradient shares after cse (one exp per element for forward and backward);
a forward-only graph, an empty slice and an op without an expansion are left alone; the
expanded graph gives the same values and gradients as the original under the interpreter,
special rows included."""

from __future__ import annotations

import numpy as np

import dpt_ir as dp
from dpt_ir.ir.records import phase_of
from dpt_ir.passes import autodiff, cse, dce, expand
from dpt_ir.passes.options import CompileOptions

SHAPE = (6, 5)


def _lse(shape: tuple[int, ...] = SHAPE, keepdims: bool = False) -> dp.Graph:
    g = dp.GraphBuilder("lse")
    x = g.input("x", shape, "float64")
    g.output("loss", dp.square(dp.logsumexp(x, axis=1, keepdims=keepdims)))  # per row
    return g.build()


def _expanded(graph: dp.Graph) -> dp.Graph:
    joint = autodiff.run(graph, CompileOptions(wrt=("x",), seeds=("loss",)))
    return dce.run(cse.run(expand.run(joint)))


def _full_shape(graph: dp.Graph, op: str) -> list[str]:
    return [n.name for n in graph.nodes if n.op == op and n.type.shape == SHAPE]


def test_a_differentiated_logsumexp_shares_its_exp_with_its_gradient() -> None:
    for keepdims in (False, True):
        out = _expanded(_lse(keepdims=keepdims))
        assert not [n for n in out.nodes if n.op == "logsumexp"], "the expanded node should be gone"
        assert len(_full_shape(out, "exp")) == 1, [n.op for n in out.nodes]
        assert [n.op for n in out.nodes if n.op in ("max", "sum") and n.type.shape == (SHAPE[0], 1)] == ["max", "sum"]
        forward = [n for n in out.nodes if n.op in ("max", "exp", "log")]
        assert all(phase_of(n) == "forward" for n in forward), "the pieces keep the node's meta"


def test_a_forward_only_graph_is_unchanged() -> None:
    graph = _lse()
    assert expand.run(graph) is graph
    joint = autodiff.run(graph, CompileOptions())  # no wrt: nothing differentiated
    assert expand.run(joint) is joint


def test_an_empty_slice_keeps_its_logsumexp() -> None:
    joint = autodiff.run(_lse((3, 0)), CompileOptions(wrt=("x",), seeds=("loss",)))
    assert expand.run(joint) is joint


def test_ops_without_an_expansion_are_left_alone() -> None:
    g = dp.GraphBuilder("plain")
    x = g.input("x", SHAPE, "float64")
    g.output("loss", dp.sum(dp.exp(x) * dp.max(x, axis=1, keepdims=True)))
    joint = autodiff.run(g.build(), CompileOptions(wrt=("x",), seeds=("loss",)))
    assert expand.run(joint) is joint


def test_values_and_gradients_are_unchanged_at_special_rows() -> None:
    """The expanded graph (interpreted node by node) gives the same bits as the logsumexp
    node's reference and the same gradient, NaN for NaN, at rows holding NaN, +inf, only
    -inf and the dtype's maximum."""
    big = float(np.finfo(np.float64).max)
    x = np.random.default_rng(0).normal(0.0, 3.0, SHAPE)
    x[1, 2], x[2, 0], x[3, :] = np.nan, np.inf, -np.inf
    x[4, :2] = big
    graph = _lse(keepdims=True)
    joint = autodiff.run(graph, CompileOptions(wrt=("x",), seeds=("loss",)))
    expanded = dce.run(cse.run(expand.run(joint)))
    ct = {"ct.loss": np.linspace(0.5, 1.5, SHAPE[0]).reshape(SHAPE[0], 1)}
    want, got = dp.interpret(joint, x=x, **ct), dp.interpret(expanded, x=x, **ct)
    for name in ("loss", "grad.x"):
        np.testing.assert_array_equal(got[name], want[name], err_msg=name)


def test_the_option_off_leaves_the_graph_unchanged() -> None:
    """`CompileOptions.expand` off (CUDA's `Target.expand`): the pass returns its input, even a
    joint graph whose derivative was built in the expansion's form."""
    joint = autodiff.run(_lse(), CompileOptions(wrt=("x",), seeds=("loss",)))
    assert expand.run(joint, CompileOptions(wrt=("x",), seeds=("loss",), expand=False)) is joint
    assert expand.run(joint, CompileOptions(wrt=("x",), seeds=("loss",))) is not joint


def test_unexpanded_the_gradient_reads_the_fused_value() -> None:
    """With ``expand`` off, autodiff differentiates logsumexp by its own output, ``exp(x - lse)``
    (PyTorch's formula): no max, no sum of exps, the node stays; where lse rounds (two
    elements at the dtype's maximum) each gets 1, not the exact softmax's 1/2."""
    big = float(np.finfo(np.float64).max)
    x = np.random.default_rng(1).normal(0.0, 3.0, SHAPE)
    x[1, 2], x[2, 0], x[3, :], x[4, :2] = np.nan, np.inf, -np.inf, big
    g = dp.GraphBuilder("lse_sum")
    g.output("loss", dp.sum(dp.logsumexp(g.input("x", SHAPE, "float64"), axis=1, keepdims=True)))
    options = CompileOptions(wrt=("x",), seeds=("loss",), expand=False)
    joint = autodiff.run(g.build(), options)
    ops = [n.op for n in joint.nodes]
    assert ops.count("logsumexp") == 1 and "max" not in ops and ops.count("exp") == 1, ops
    assert expand.run(joint, options) is joint
    got = dp.interpret(joint, x=x, **{"ct.loss": np.float64(1.0)})
    with np.errstate(invalid="ignore"):
        want = np.exp(x - dp.interpret(_lse_of(x.shape), x=x)["lse"])
    np.testing.assert_array_equal(got["grad.x"], want)
    np.testing.assert_array_equal(got["grad.x"][4, :2], [1.0, 1.0])
    expanded = dp.interpret(_expanded_sum(g.build()), x=x, **{"ct.loss": np.float64(1.0)})
    np.testing.assert_array_equal(expanded["grad.x"][4, :2], [0.5, 0.5])
    np.testing.assert_allclose(got["grad.x"][:2], expanded["grad.x"][:2], rtol=1e-14)


def _lse_of(shape: tuple[int, ...]) -> dp.Graph:
    g = dp.GraphBuilder("lse_only")
    g.output("lse", dp.logsumexp(g.input("x", shape, "float64"), axis=1, keepdims=True))
    return g.build()


def _expanded_sum(graph: dp.Graph) -> dp.Graph:
    options = CompileOptions(wrt=("x",), seeds=("loss",))
    return dce.run(cse.run(expand.run(autodiff.run(graph, options), options)))

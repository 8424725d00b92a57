"""`dpt_ir.api.core.sum_to`: the gradient of a broadcast sums only over axes of more than one
element; a broadcast along a size-1 axis (a leading batch of one shot) is reshaped back, so its
gradient is a view that fuses with its producer instead of a reduction kernel."""

from __future__ import annotations

import numpy as np

import dpt_ir as dp
from dpt_ir.api.autodiff import joint_graph


def _graph(batch: int) -> dp.Graph:
    g = dp.GraphBuilder("sum_to_batch")
    c = g.input("c", (5, 6), dtype="float64")
    u = g.input("u", (batch, 5, 6), dtype="float64")
    g.output("loss", dp.sum(dp.square(c * u)))
    return g.build()


def _ops(graph: dp.Graph) -> list[str]:
    return [n.op for n in graph.nodes]


def test_size_one_batch_axis_is_reshaped_not_summed() -> None:
    joint = joint_graph(_graph(1), ["c"], ["loss"])
    # the loss's own sum is the only reduction: c's gradient reshapes (1, 5, 6) to (5, 6)
    assert _ops(joint).count("sum") == 1, _ops(joint)


def test_batch_axis_of_two_is_still_summed() -> None:
    joint = joint_graph(_graph(2), ["c"], ["loss"])
    assert _ops(joint).count("sum") == 2, _ops(joint)


def test_size_one_batch_gradient_values() -> None:
    rng = np.random.default_rng(0)
    x = {"c": rng.normal(size=(5, 6)), "u": rng.normal(size=(1, 5, 6))}
    x["c"][0, 0] = -0.0  # d/dc of (c u)^2 = 2 c u^2: -0.0 where c is -0.0, as NumPy's reduce of one term
    program = dp.compile(_graph(1), wrt=["c"])
    _, grads = program.value_and_grad(**x)
    expected = 2.0 * x["c"] * x["u"][0] ** 2
    np.testing.assert_allclose(grads["c"], expected, rtol=1e-14)
    assert np.signbit(grads["c"][0, 0])
    ref = dp.interpret_grad(_graph(1), ["c"], **x)
    np.testing.assert_array_equal(grads["c"], ref["c"])

"""Builders of the graphs the benchmarks (and the pass tests) compile.

Each builder takes a 2-D ``shape`` and a float ``dtype`` and returns a validated
`dp.Graph` with a scalar output ``loss``; the differentiable input is ``x`` (the
softmax cross-entropy calls it ``z``). `BENCHMARK_GRAPHS` lists them by name.
"""

from __future__ import annotations

from collections.abc import Callable

import dpt_ir as dp

Shape = tuple[int, int]


def beer(shape: Shape = (512, 512), dtype: str = "float32") -> dp.Graph:
    """Beer–Lambert transmission with a weighted squared error (DESIGN §2)."""
    g = dp.GraphBuilder("beer")
    x = g.input("x", shape, dtype)
    obs = g.input("obs", shape, dtype, requires_grad=False)
    w = g.input("w", shape, dtype, requires_grad=False)
    g.output("loss", dp.sum(w * dp.square(1.3 * dp.exp(-0.7 * x) - obs)))
    return g.build()


def chain16(shape: Shape = (512, 512), dtype: str = "float32") -> dp.Graph:
    """A chain of 16 elementwise ops on one input, then a sum; values stay in a tame range."""
    g = dp.GraphBuilder("chain16")
    x = g.input("x", shape, dtype)
    y = dp.sin(x)  # 1
    y = y * 0.5  # 2
    y = y + 1.25  # 3
    y = dp.log(y)  # 4
    y = dp.exp(y)  # 5
    y = dp.sqrt(y)  # 6
    y = dp.tanh(y)  # 7
    y = dp.sigmoid(y)  # 8
    y = dp.square(y)  # 9
    y = y - 0.25  # 10
    y = dp.cos(y)  # 11
    y = dp.softplus(y)  # 12
    y = dp.reciprocal(y)  # 13
    y = dp.erf(y)  # 14
    y = -y  # 15
    y = dp.expm1(y)  # 16
    g.output("loss", dp.sum(y))
    return g.build()


def softmax_xent(shape: Shape = (512, 512), dtype: str = "float32") -> dp.Graph:
    """Softmax cross-entropy over the rows of logits ``z`` against targets ``t``, averaged."""
    g = dp.GraphBuilder("softmax_xent")
    z = g.input("z", shape, dtype)
    t = g.input("t", shape, dtype, requires_grad=False)
    per_row = dp.logsumexp(z, axis=1) - dp.sum(z * t, axis=1)
    g.output("loss", dp.mean(per_row))
    return g.build()


def normalisation(shape: Shape = (512, 512), dtype: str = "float32") -> dp.Graph:
    """Row normalisation with two reductions (mean, then variance), then a weighted sum of
    squares."""
    g = dp.GraphBuilder("normalisation")
    x = g.input("x", shape, dtype)
    w = g.input("w", shape, dtype, requires_grad=False)
    centred = x - dp.mean(x, axis=1, keepdims=True)
    scale = dp.sqrt(dp.mean(dp.square(centred), axis=1, keepdims=True) + 1e-5)
    g.output("loss", dp.sum(w * dp.square(centred / scale)))
    return g.build()


BENCHMARK_GRAPHS: dict[str, Callable[[Shape, str], dp.Graph]] = {
    "beer": beer,
    "chain16": chain16,
    "softmax_xent": softmax_xent,
    "normalisation": normalisation,
}

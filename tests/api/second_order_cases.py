"""The op table (`tests/op_cases.py`) as second-order test data: per differentiable case, a
graph with a scalar loss (``loss = sum(out * w)``, ``w`` a fixed non-differentiable weight),
inputs, tangents, and directional central finite differences of the values and gradients.

Directional differences cost two evaluations per case whatever its size: ``J v`` is
``(f(x + h v) - f(x - h v)) / 2h`` and ``H v`` the same difference of the gradient.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
from op_cases import CASES, OUTPUT, OpCase

import dpt_ir as dp

LOSS = "loss"
WEIGHT = "w"
STEP = 1e-6
STEP32 = 1e-2  # graphs that round through float32 (casts: linear, so a long step is exact)


@dataclass(frozen=True)
class Problem:
    """One case as a second-order problem (float64)."""

    case: OpCase
    graph: dp.Graph  # the case's graph plus ``loss``
    inputs: dict[str, np.ndarray]  # with the weight
    tangents: dict[str, np.ndarray]

    @property
    def step(self) -> float:
        return STEP32 if any(t.dtype == "float32" for t in self.graph.types.values()) else STEP


def with_loss(graph: dp.Graph) -> dp.Graph:
    """``graph`` plus input ``w`` (the output's type, not differentiated) and output
    ``loss = sum(out * w)``."""
    b, handles = dp.GraphBuilder.from_graph(graph)
    t = graph.types[graph.output_value(OUTPUT)]
    w = b.add_input(WEIGHT, t, requires_grad=False)
    b.set_outputs([*graph.outputs])
    loss = dp.sum(handles[graph.output_value(OUTPUT)] * w)
    b.output(LOSS, loss)
    return b.build()


def problems(loops: bool = False) -> list[Problem]:
    """Every case that differentiates something and outputs floats, in float64; with
    ``loops``, only those whose graph holds a loop (compiled as loop programs, not in the
    batched op-table programs), else only the others."""
    out: list[Problem] = []
    for case in CASES:
        if not case.wrt or "float64" not in case.dtypes:
            continue
        if any(n.opdef.kind == "loop" for n in case.build("float64").nodes) != loops:
            continue
        rng = np.random.default_rng(3)
        base = case.build("float64")
        t = base.types[base.output_value(OUTPUT)]
        if t.dtype != "float64":
            continue
        inputs = case.inputs(rng, "float64")
        inputs[WEIGHT] = rng.standard_normal(t.shape)
        tangents = {w: rng.standard_normal(inputs[w].shape).astype(inputs[w].dtype) for w in case.wrt}
        out.append(Problem(case, with_loss(base), inputs, tangents))
    return out


def fd_jvp(p: Problem) -> dict[str, np.ndarray]:
    """Central differences of every output along the tangents."""
    plus, minus = (dp.interpret(p.graph, **m) for m in _moved(p))
    return {k: (plus[k].astype(np.float64) - minus[k]) / (2 * p.step) for k in plus}


def _moved(p: Problem) -> list[dict[str, np.ndarray]]:
    """The inputs moved by plus and minus one step along the tangents, in their dtypes."""
    return [
        {**p.inputs, **{w: (p.inputs[w] + s * p.step * v).astype(v.dtype) for w, v in p.tangents.items()}}
        for s in (1, -1)
    ]


def fd_hvp(p: Problem) -> dict[str, np.ndarray]:
    """Central differences of the loss gradient along the tangents."""
    wrt = list(p.case.wrt)
    plus, minus = (dp.interpret_grad(p.graph, wrt, seed={LOSS: 1.0}, **m) for m in _moved(p))
    return {w: (plus[w].astype(np.float64) - minus[w]) / (2 * p.step) for w in wrt}


def rel_error(actual: np.ndarray, expected: np.ndarray) -> float:
    """||actual - expected|| / max(||actual||, ||expected||, 1e-8)."""
    a, e = np.asarray(actual, np.float64), np.asarray(expected, np.float64)
    return float(np.linalg.norm(a - e) / max(np.linalg.norm(a), np.linalg.norm(e), 1e-8))

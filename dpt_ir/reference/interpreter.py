"""The NumPy reference interpreter: the oracle every other result is compared against.

`interpret` evaluates a graph node by node with each op's NumPy reference, in the
declared dtypes. Inputs are checked by `dpt_ir.ir.contracts`, the one front door shared with
compiled programs (a `wp.array` is accepted and read back to the host). `interpret_grad`
builds the joint forward/backward graph from the derivative table (`dpt_ir.api.autodiff`) and
evaluates it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpt_ir.api.autodiff import check_wrt, joint_graph, seed_arrays
from dpt_ir.ir import records
from dpt_ir.ir.contracts import check_inputs
from dpt_ir.ir.errors import NumericalError
from dpt_ir.ir.graph import Graph

__all__ = ["check_inputs", "evaluate", "interpret", "interpret_grad"]


def evaluate(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of ``graph`` by name, given already checked inputs."""
    env: dict[str, np.ndarray] = dict(inputs)
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            attrs = node.opdef.parse_attrs(node.attrs, f"node {node.name!r}")
            try:
                result = node.opdef.reference(attrs, *(env[i] for i in node.inputs))
            except NumericalError as exc:  # data-dependent failures (an index out of range) name their node
                raise NumericalError(f"node {node.name!r}: {exc}") from None
            arr = np.asarray(result).astype(node.type.dtype, copy=False)
            if arr.shape != node.type.shape:
                raise AssertionError(
                    f"node {node.name!r}: reference of op {node.op!r} gave shape {arr.shape}, "
                    f"type rule says {node.type.shape}"
                )
            env[node.name] = arr
    return env


def interpret(graph: Graph, **inputs: Any) -> dict[str, np.ndarray]:
    """Evaluate ``graph`` in NumPy: a dict output name -> array."""
    env = evaluate(graph, check_inputs(graph, inputs))
    return {o.name: env[o.value] for o in graph.outputs}


def interpret_grad(
    graph: Graph, wrt: Sequence[str] | str, seed: Mapping[str, Any] | None = None, **inputs: Any
) -> dict[str, np.ndarray]:
    """Gradients of the seeded outputs with respect to ``wrt``: a dict input name -> array.

    ``seed`` maps output names to a scalar or an array of the output's shape; outputs it
    does not name get a zero seed. By default the only scalar float output is seeded
    with 1.
    """
    wrt = check_wrt(graph, [wrt] if isinstance(wrt, str) else wrt)
    seeds = seed_arrays(graph, seed)
    checked = check_inputs(graph, inputs)
    joint = joint_graph(graph, wrt, list(seeds))
    cts = records.joint_record(joint).cotangents
    env = evaluate(joint, {**checked, **{cts[k]: v for k, v in seeds.items()}})
    grads = records.joint_record(joint).gradients
    return {w: env[joint.output_value(grads[w])] for w in wrt}

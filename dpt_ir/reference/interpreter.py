"""The NumPy reference interpreter: the oracle every other result is compared against.

`interpret` evaluates a graph node by node with each op's NumPy reference, in the
declared dtypes. Inputs are checked by `dpt_ir.ir.contracts`, the one front door shared with
compiled programs (a `wp.array` is accepted and read back to the host). `interpret_grad`
builds the joint forward/backward graph from the derivative table (`dpt_ir.api.autodiff`) and
evaluates it the same way. `interpret_jvp` and `interpret_hvp` evaluate the graphs that
`dpt_ir.api.second_order` derives for forward mode and Hessian-vector products.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpt_ir.api.autodiff import check_wrt, default_loss, joint_graph, seed_arrays
from dpt_ir.api.second_order import hvp_graph, jvp_graph
from dpt_ir.ir import records
from dpt_ir.ir.contracts import check_inputs
from dpt_ir.ir.errors import ContractError, NumericalError
from dpt_ir.ir.graph import Graph

__all__ = ["check_inputs", "evaluate", "interpret", "interpret_grad", "interpret_hvp", "interpret_jvp", "vector_arrays"]


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


def vector_arrays(graph: Graph, wrt: Sequence[str], vectors: Any, what: str) -> dict[str, np.ndarray]:
    """Normalise user vectors (a dict ``wrt`` input -> array of its shape; a missing one is
    zero) to arrays of each input's dtype; ContractError for a name not in ``wrt``, a wrong
    shape or a non-real array."""
    if not isinstance(vectors, Mapping):
        raise ContractError(f"{what}: expected a dict input name -> array, found {type(vectors).__name__}")
    stray = [n for n in vectors if n not in wrt]
    if stray:
        raise ContractError(
            f"{what}: {stray} are not differentiated inputs of {graph.name!r}; expected vectors for {list(wrt)} only"
        )
    out: dict[str, np.ndarray] = {}
    for name in wrt:
        t = graph.input_map[name].type
        arr = np.asarray(vectors[name]) if name in vectors else np.zeros(t.shape, dtype=t.dtype)
        if arr.dtype.kind not in "biuf":
            raise ContractError(f"{what} for input {name!r}: expected a real array, found dtype {arr.dtype}")
        if arr.shape != t.shape:
            raise ContractError(
                f"{what} for input {name!r}: expected shape {list(t.shape)} (the input's), found {list(arr.shape)}"
            )
        # No copy when it is already of the dtype and C-contiguous (nothing writes a vector: they are
        # inputs of the derived plan); ascontiguousarray would make a 0-d array 1-d.
        out[name] = np.asarray(arr, dtype=t.dtype, order="C")
    return out


def interpret_jvp(
    graph: Graph, tangents: Mapping[str, Any], **inputs: Any
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Forward mode: the outputs and, per float output, its Jacobian times the ``tangents``
    (a dict input name -> array of its shape; the inputs it names are differentiated, the
    others held)."""
    if not isinstance(tangents, Mapping) or not tangents:
        raise ContractError(f"interpret_jvp: expected a non-empty dict input name -> tangent, found {tangents!r}")
    wrt = check_wrt(graph, list(tangents))
    derived = jvp_graph(graph, wrt)
    record = records.derived_record(derived)
    vec = vector_arrays(graph, wrt, tangents, "tangent")
    values = interpret(derived, **inputs, **{record.vectors[w]: v for w, v in vec.items()})
    outs = {o.name: values[o.name] for o in graph.outputs}
    return outs, {o: values[p] for o, p in record.products.items()}


def interpret_hvp(
    graph: Graph, wrt: Sequence[str] | str, vectors: Mapping[str, Any], loss: str | None = None, **inputs: Any
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
    """The outputs, the gradients of output ``loss`` (default: the only scalar float output)
    with respect to ``wrt``, and its Hessian times ``vectors`` (a dict ``wrt`` input -> array;
    missing: zero)."""
    wrt = check_wrt(graph, [wrt] if isinstance(wrt, str) else wrt)
    derived = hvp_graph(graph, wrt, default_loss(graph) if loss is None else loss)
    record = records.derived_record(derived)
    vec = vector_arrays(graph, wrt, vectors, "vector")
    values = interpret(derived, **inputs, **{record.vectors[w]: v for w, v in vec.items()})
    outs = {o.name: values[o.name] for o in graph.outputs}
    grads = {w: values[g] for w, g in record.gradients.items()}
    return outs, grads, {w: values[p] for w, p in record.products.items()}

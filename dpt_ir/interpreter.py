"""The NumPy reference interpreter: the oracle every other result is compared against.

`interpret` evaluates a graph node by node with each op's NumPy reference, in the
declared dtypes. `interpret_grad` builds the joint forward/backward graph from the
derivative table (`dpt_ir.autodiff`) and evaluates it the same way.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dpt_ir.autodiff import check_wrt, joint_graph, seed_arrays
from dpt_ir.errors import ContractError
from dpt_ir.graph import Graph


def check_inputs(graph: Graph, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """Inputs as NumPy arrays of exactly the declared shapes and dtypes; ContractError
    naming the input otherwise. Nothing is converted silently."""
    declared = {i.name: i for i in graph.inputs}
    missing = [n for n in declared if n not in inputs]
    extra = [n for n in inputs if n not in declared]
    if missing or extra:
        parts = []
        if missing:
            parts.append(f"missing input(s) {missing}")
        if extra:
            parts.append(f"unexpected input(s) {extra}")
        raise ContractError(f"graph {graph.name!r}: {'; '.join(parts)}; expected exactly {list(declared)}")
    out = {}
    for name, inp in declared.items():
        value = inputs[name]
        arr = _as_array(name, value)
        if arr.shape != inp.type.shape:
            raise ContractError(f"input {name!r}: expected shape {list(inp.type.shape)}, found {list(arr.shape)}")
        if arr.dtype != np.dtype(inp.type.dtype):
            if isinstance(value, np.ndarray | np.generic):
                raise ContractError(f"input {name!r}: expected dtype {inp.type.dtype}, found {arr.dtype}")
            arr = _convert_python(name, value, inp.type.dtype)
        out[name] = arr
    return out


def _as_array(name: str, value: Any) -> np.ndarray:
    """``value`` as an array of bools or real numbers; ContractError naming the input otherwise."""
    try:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    except ValueError:
        raise ContractError(
            f"input {name!r}: expected a rectangular array, found a ragged {type(value).__name__}"
        ) from None
    if arr.dtype.kind not in "biuf":
        raise ContractError(
            f"input {name!r}: expected an array of bools or real numbers, found {type(value).__name__} "
            f"of dtype {arr.dtype}"
        )
    return arr


def _convert_python(name: str, value: Any, dtype: str) -> np.ndarray:
    """Python numbers and lists take the declared dtype when that loses nothing."""
    arr = np.asarray(value)
    converted = arr.astype(dtype)
    if not np.array_equal(converted, arr, equal_nan=arr.dtype.kind == "f"):
        raise ContractError(f"input {name!r}: value cannot be represented as {dtype} exactly")
    return converted


def evaluate(graph: Graph, inputs: Mapping[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Every value of ``graph`` by name, given already checked inputs."""
    env: dict[str, np.ndarray] = dict(inputs)
    with np.errstate(all="ignore"):
        for node in graph.nodes:
            attrs = node.opdef.parse_attrs(node.attrs, f"node {node.name!r}")
            result = node.opdef.reference(attrs, *(env[i] for i in node.inputs))
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
    cts = joint.meta["cotangents"]
    env = evaluate(joint, {**checked, **{cts[k]: v for k, v in seeds.items()}})
    grads = joint.meta["gradients"]
    return {w: env[joint.output_value(grads[w])] for w in wrt}

"""Inputs and reference results of a CUDA bundle (``ref.npz``).

Assumes: a graph, the plans being exported and the program they were compiled from.
Guarantees: inputs are the caller's arrays, or drawn from a seed exactly as
``benchmarks/gpu_check.py`` draws them on the device (`draw`); reference outputs and
gradients come from the NumPy interpreter (``dp.interpret`` / ``dp.interpret_grad``: the
oracle of the CPU tests), or, with ``reference="program"``, from the compiled CPU program
(`program_results`: no float64 temporaries of the whole arrays, which is what makes a
2^26-element bundle affordable; the CPU program equals the interpreter at the bundle's
tolerances in the CPU tests); whether a plan's run raises a `NumericalError` comes from running
the compiled program itself on the same inputs, since the interpreter computes NaN where a
kernel raises a flag. Arrays larger than `SAMPLE` elements are stored at `SAMPLE` evenly
spaced flat positions (``<key>@at``), which keeps a GPU-sized bundle small.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dpt_ir.export.bundle import InputSpec
from dpt_ir.ir import records
from dpt_ir.ir.errors import ContractError, NumericalError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.types import is_float

SAMPLE = 65536
DEFAULT_RANGE = (0.5, 2.0)


def draw(spec: InputSpec) -> np.ndarray:
    """A seeded input, as the runner draws it: float32 uniform in ``[low, high)``, cast to the
    input's dtype (an integer input: truncated toward zero, e.g. a 0/1 mask from ``[0.9, 2)``)."""
    size = int(np.prod(spec.shape, dtype=np.int64))
    u = np.random.default_rng(spec.seed).random(size, dtype=np.float32)
    return (u * np.float32(spec.high - spec.low) + np.float32(spec.low)).astype(spec.dtype).reshape(spec.shape)


def input_specs(
    graph: Graph, inputs: dict[str, np.ndarray] | None, seed: int | None, ranges: dict[str, tuple[float, float]]
) -> tuple[list[InputSpec], dict[str, np.ndarray]]:
    """The bundle's input table and the arrays themselves (given, or drawn from ``seed``)."""
    if inputs is None and seed is None:
        raise ContractError(f"export of {graph.name!r}: expected inputs=... or seed=..., found neither")
    specs, arrays = [], {}
    for k, i in enumerate(graph.inputs):
        t = i.type
        if inputs is not None:
            if i.name not in inputs:
                raise ContractError(f"export of {graph.name!r}: input {i.name!r} is missing from the inputs given")
            arrays[i.name] = np.array(inputs[i.name], dtype=t.dtype, order="C")  # ascontiguousarray makes 0-d 1-d
            specs.append(InputSpec(name=i.name, dtype=t.dtype, shape=list(t.shape)))  # type: ignore[arg-type]
            continue
        low, high = ranges.get(i.name, DEFAULT_RANGE)
        if t.dtype == "bool" or (not is_float(t.dtype) and low < 0):
            raise ContractError(
                f"export of {graph.name!r}: input {i.name!r} ({t.dtype}, range [{low}, {high})) cannot be drawn: "
                "expected a float input, or an integer one with a range >= 0 (drawn floats truncate); pass inputs"
            )
        spec = InputSpec(name=i.name, dtype=t.dtype, shape=list(t.shape), seed=seed + k, low=low, high=high)  # type: ignore[arg-type, operator]
        specs.append(spec)
        arrays[i.name] = draw(spec)
    return specs, arrays


def cotangents(graph: Graph, plan_graph: Graph, seed: int) -> dict[str, np.ndarray]:
    """Cotangent seeds of a tape plan, output name -> array in ``[-1, 1)`` (not all ones, so
    an indexing slip in the backward shows)."""
    rng = np.random.default_rng(seed)
    out = {}
    for name in records.cotangents(plan_graph):
        t = graph.types[graph.output_value(name)]
        out[name] = (rng.random(t.shape) * 2.0 - 1.0).astype(t.dtype)
    return out


def store(ref: dict[str, np.ndarray], key: str, value: np.ndarray) -> None:
    """``value`` at ``key``, sampled when large (see the module docstring)."""
    value = np.asarray(value)
    if value.size <= SAMPLE:
        ref[key] = value
        return
    at = np.unique(np.linspace(0, value.size - 1, SAMPLE).astype(np.int64))
    ref[key + "@at"], ref[key] = at, value.reshape(-1)[at]


def program_results(
    program: Any, plan: str, inputs: dict[str, np.ndarray], seeds: dict[str, np.ndarray]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """Outputs and gradients of ``plan`` from the compiled (CPU) program itself, the cheap
    reference of a GPU-sized bundle; a plan that raises a NumericalError there has none."""
    try:
        if plan == "run":
            return program.run(**inputs), {}
        if plan == "value_and_grad":
            return program.value_and_grad(**inputs)
        graph = program.graph
        with program.tape_pass() as tp:  # wp.arrays: a 0-d value comes back of shape (1,)
            got = tp.forward(**inputs)
        outs = {k: v.numpy().reshape(graph.types[graph.output_value(k)].shape) for k, v in got.items()}
        grads = {k: v.numpy().reshape(inputs[k].shape) for k, v in tp.backward(seed=seeds).items()}
        tp.close()
        return outs, grads
    except NumericalError as exc:
        raise ContractError(
            f"export of {program.graph.name!r}: plan {plan!r} raises on these inputs ({exc}); expected finite "
            "results for reference='program'; use reference='interpreter'"
        ) from None


def raises(call: Callable[[], Any]) -> bool:
    """Whether ``call`` (the compiled program on the bundle's inputs) raises a NumericalError."""
    try:
        call()
    except NumericalError:
        return True
    return False


def tape_call(program: Any, inputs: dict[str, np.ndarray], seeds: dict[str, np.ndarray]) -> Callable[[], None]:
    def call() -> None:
        tp = program.tape_pass()
        try:
            with tp:
                tp.forward(**inputs)
            tp.backward(seed=seeds)
        finally:
            if tp.state != "closed":
                tp.close()

    return call

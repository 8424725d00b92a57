"""What the PyTorch, JAX and SciPy adapters share: the forward and the vector-Jacobian
product of a compiled program on host (NumPy) arrays, through its public API only.

A compiled program is anything `CompiledProgram` describes: `dpt_ir.runtime.program.Program` and
the loop program of a graph with ``dp.scan`` (`dpt_ir.runtime.loop_program.LoopProgram`)
both are. The adapters accept one through `require_program`, and ask nothing else of it.

Assumes: the program was compiled with ``wrt`` for `vjp`; inputs are a dict input name
-> NumPy array or ``wp.array`` on the program's device, which the caller keeps unchanged
during the call.
Guarantees: every result is a fresh NumPy array owned by the caller (never a program
buffer), so a later evaluation cannot change it. A `vjp` either scales loss gradients the
caller kept from this call's own forward, or runs complete, closed evaluations of its
own (a fused ``value_and_grad``, or a tape pass: forward with the given inputs, then
backward with the given cotangents); two calls never share saved values, which is what
makes the adapters reentrant. Errors are the program's own (`ContractError`,
`NumericalError`).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Protocol, runtime_checkable

import numpy as np

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.types import is_float


@runtime_checkable
class CompiledProgram(Protocol):
    """What the adapters use of a compiled program (``dp.compile``'s result, with or
    without loops): its graph, ``wrt``, loss, device and module name, ``run``,
    ``value_and_grad``, ``tape_pass``, ``jvp`` and ``hvp`` (DESIGN §2 and §6 semantics)."""

    graph: Graph
    wrt: tuple[str, ...]
    loss: str | None
    device: str
    module_name: str

    def run(self, **inputs: Any) -> dict[str, np.ndarray]: ...

    def value_and_grad(self, **inputs: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]: ...

    def tape_pass(self, tape: Any = None) -> Any: ...

    def jvp(self, tangents: Any, **inputs: Any) -> Any: ...

    def hvp(self, vectors: Any, **inputs: Any) -> Any: ...


def require_program(program: object, where: str) -> CompiledProgram:
    """``program`` if it is a compiled program, else a `ContractError` naming ``where``."""
    if not isinstance(program, CompiledProgram):
        raise ContractError(
            f"{where}: expected a compiled program (the result of dp.compile), found {type(program).__name__}"
        )
    return program


def input_names(graph: Graph) -> list[str]:
    """The graph's inputs in declaration order (the positional order of the adapters)."""
    return [i.name for i in graph.inputs]


def output_names(graph: Graph) -> list[str]:
    """The graph's outputs in declaration order."""
    return [o.name for o in graph.outputs]


def output_type(graph: Graph, name: str) -> Any:
    """The `TensorType` of output ``name``."""
    return graph.types[graph.output_value(name)]


def differentiable_outputs(graph: Graph) -> list[str]:
    """The outputs that take a cotangent: those of a float dtype."""
    return [n for n in output_names(graph) if is_float(output_type(graph, n).dtype)]


def bind_arguments(graph: Graph, args: tuple[Any, ...], kwargs: Mapping[str, Any], where: str) -> dict[str, Any]:
    """Map positional (declaration order) and keyword arguments to input names.

    A name given twice, an unknown name or too many positionals is a `ContractError`;
    a missing one is left for the program's own check, so its message is `run`'s."""
    names = input_names(graph)
    if len(args) > len(names):
        raise ContractError(f"{where}: graph {graph.name!r} takes {len(names)} inputs {names}, found {len(args)}")
    bound = dict(zip(names, args, strict=False))
    for name, value in kwargs.items():
        if name in bound:
            raise ContractError(f"{where}: input {name!r} given both by position and by keyword")
        bound[name] = value
    return bound


def forward(program: CompiledProgram, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """``program.run``: a dict output name -> fresh NumPy array."""
    return program.run(**inputs)


def has_scalar_loss(program: CompiledProgram) -> bool:
    """Whether ``program.value_and_grad`` applies: a loss output that is a scalar."""
    return program.loss is not None and output_type(program.graph, program.loss).shape == ()


def forward_and_loss_grads(
    program: CompiledProgram, inputs: Mapping[str, Any]
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """One fused ``value_and_grad``: the outputs, and the loss gradients a later `vjp`
    with a cotangent on the loss alone scales instead of evaluating anything."""
    return program.value_and_grad(**inputs)


def vjp(
    program: CompiledProgram,
    inputs: Mapping[str, Any],
    cotangents: Mapping[str, np.ndarray | None],
    loss_grads: Mapping[str, np.ndarray] | None = None,
) -> dict[str, np.ndarray]:
    """Gradients wrt ``program.wrt`` of ``sum_k <cotangent_k, output_k>``.

    ``cotangents``: output name -> array of the output's shape, or None (zero); outputs
    not named get zero. When only the (scalar) loss output has a non-zero cotangent (the
    common ``loss.backward()``), the loss gradients are scaled by it (the VJP is linear
    in the cotangent): ``loss_grads`` when the caller kept them from
    `forward_and_loss_grads` at these inputs, else from a fused ``value_and_grad`` run.
    Otherwise one complete tape pass runs with every cotangent as its seed."""
    live = {n: np.asarray(c) for n, c in cotangents.items() if c is not None and np.any(c)}
    if not live:
        return {w: np.zeros(program.graph.types[w].shape, dtype=program.graph.types[w].dtype) for w in program.wrt}
    loss = program.loss
    if has_scalar_loss(program) and set(live) == {loss}:
        grads = dict(loss_grads) if loss_grads is not None else program.value_and_grad(**inputs)[1]
        scale = live[loss]
        return {w: (g * scale).astype(g.dtype, copy=False) for w, g in grads.items()}  # fresh, even for 1
    return _tape_vjp(program, inputs, live)


def _tape_vjp(
    program: CompiledProgram, inputs: Mapping[str, Any], seeds: dict[str, np.ndarray]
) -> dict[str, np.ndarray]:
    tp = program.tape_pass()
    try:
        with tp:
            tp.forward(**inputs)
        grads = tp.backward(seed=seeds)
        graph = program.graph
        return {w: g.numpy().reshape(graph.types[w].shape).copy() for w, g in grads.items()}
    finally:
        if tp.state != "closed":
            tp.close()

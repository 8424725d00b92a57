"""`function(program)`: a compiled program as a differentiable JAX function.

Assumes: JAX 0.10 (the ``[jax]`` extra); arguments are arrays of the declared shapes and
dtypes, positional in declaration order or by keyword. A float64 program needs
``jax_enable_x64`` (e.g. ``with jax.enable_x64(True):``); otherwise JAX has no float64
arrays to give it, and that is a `ContractError`.
Guarantees: the result is a ``jax.custom_vjp`` function that works under ``jax.jit``,
``jax.grad``, ``jax.vjp`` and ``jax.vmap`` (one program call per batch element). The
program runs in a host callback (``jax.pure_callback``): the primal is ``Program.run``;
when JAX differentiates, the forward is one fused ``value_and_grad`` (for a scalar loss)
whose loss gradients are residuals, so a cotangent on the loss alone only scales them;
other cotangents run a complete, closed tape pass of its own on the saved inputs
(`dpt_ir.interop.vjp`). Residuals are each call's own, so calls are reentrant. Inputs
outside ``program.wrt`` get a zero cotangent. A CUDA program runs through the same
callback, so its arrays cross the host (Warp's JAX FFI is not used). One call returns
one array for a single output, a tuple for several. Shape and dtype errors are raised
when the call is traced, with `run`'s wording.
"""

from __future__ import annotations

try:
    import jax
    import jax.numpy as jnp
except ImportError as _exc:  # the optional extra is missing
    raise ImportError(
        "dpt_ir.jax needs JAX, which is not installed; install the extra: pip install 'dpt_ir[jax]'"
    ) from _exc

from typing import Any

import numpy as np

from dpt_ir.interop import (
    CompiledProgram,
    bind_arguments,
    differentiable_outputs,
    forward,
    forward_and_loss_grads,
    has_scalar_loss,
    input_names,
    output_names,
    output_type,
    require_program,
    vjp,
)
from dpt_ir.ir.errors import ContractError


def function(program: CompiledProgram) -> Any:
    """The program as a JAX function (see the module docstring)."""
    require_program(program, "dpt_ir.jax.function")
    graph = program.graph
    names, outs, cot_outs = input_names(graph), output_names(graph), differentiable_outputs(graph)
    where = f"dpt_ir.jax.function({graph.name!r})"

    def run_host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        results = forward(program, dict(zip(names, arrays, strict=True)))
        return tuple(results[n] for n in outs)

    def forward_grads_host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        results, grads = forward_and_loss_grads(program, dict(zip(names, arrays, strict=True)))
        return (*(results[n] for n in outs), *(grads[w] for w in program.wrt))

    def vjp_host(*arrays: np.ndarray) -> tuple[np.ndarray, ...]:
        k, m = len(names), len(names) + len(cot_outs)
        inputs = dict(zip(names, arrays[:k], strict=True))
        kept = dict(zip(program.wrt, arrays[m:], strict=True)) if keep else None
        grads = vjp(program, inputs, dict(zip(cot_outs, arrays[k:m], strict=True)), kept)
        return tuple(grads[w] for w in program.wrt)

    keep = has_scalar_loss(program)  # the forward of a derivative is one fused value_and_grad
    out_shapes = tuple(_struct(output_type(graph, n)) for n in outs)
    grad_shapes = tuple(_struct(graph.types[w]) for w in program.wrt)

    @jax.custom_vjp
    def evaluate(*args: Any) -> tuple[Any, ...]:
        return jax.pure_callback(run_host, out_shapes, *args, vmap_method="sequential")

    def evaluate_fwd(*args: Any) -> tuple[tuple[Any, ...], tuple[Any, ...]]:
        if not keep:
            return evaluate(*args), (args, ())
        both = jax.pure_callback(forward_grads_host, out_shapes + grad_shapes, *args, vmap_method="sequential")
        return tuple(both[: len(outs)]), (args, tuple(both[len(outs) :]))

    def evaluate_bwd(saved: tuple[tuple[Any, ...], tuple[Any, ...]], cts: tuple[Any, ...]) -> tuple[Any, ...]:
        args, kept = saved
        by_name = dict(zip(outs, cts, strict=True))
        operands = (*args, *(by_name[n] for n in cot_outs), *kept)
        grads = jax.pure_callback(vjp_host, grad_shapes, *operands, vmap_method="sequential")
        by_input = dict(zip(program.wrt, grads, strict=True))
        return tuple(by_input.get(n) for n in names)  # None: a zero cotangent

    evaluate.defvjp(evaluate_fwd, evaluate_bwd)

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = bind_arguments(graph, args, kwargs, where)
        missing = [n for n in names if n not in bound]
        if missing:
            raise ContractError(f"graph {graph.name!r}: missing input(s) {missing}; expected exactly {names}")
        ordered = [_checked(n, bound[n], graph.types[n]) for n in names]
        results = evaluate(*ordered)
        return results[0] if len(results) == 1 else results

    call.__doc__ = f"Graph {graph.name!r} as a JAX function of {names}, returning {outs}."
    call.program = program  # type: ignore[attr-defined]
    return call


def _struct(t: Any) -> jax.ShapeDtypeStruct:
    dtype = np.dtype(t.dtype)
    if jax.dtypes.canonicalize_dtype(dtype) != dtype:
        raise ContractError(
            f"dpt_ir.jax: the program uses {t.dtype}, which JAX gives only with jax_enable_x64 "
            "(jax.config.update('jax_enable_x64', True) or `with jax.enable_x64(True):`)"
        )
    return jax.ShapeDtypeStruct(t.shape, dtype)


def _checked(name: str, value: Any, t: Any) -> Any:
    """The argument as a JAX array of the declared shape and dtype, else `run`'s error."""
    _struct(t)
    arr = value if isinstance(value, jax.Array) else jnp.asarray(value)
    if tuple(arr.shape) != t.shape:
        raise ContractError(f"input {name!r}: expected shape {list(t.shape)}, found {list(arr.shape)}")
    if np.dtype(arr.dtype) != np.dtype(t.dtype):
        raise ContractError(f"input {name!r}: expected dtype {t.dtype}, found {arr.dtype}")
    return arr

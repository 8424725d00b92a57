"""`function(program)`: a compiled program as a differentiable JAX function.

Assumes: JAX 0.10 (the ``[jax]`` extra); arguments are arrays of the declared shapes and
dtypes, positional in declaration order or by keyword. A float64 program needs
``jax_enable_x64`` (e.g. ``with jax.enable_x64(True):``); otherwise JAX has no float64
arrays to give it, and that is a `ContractError`.
Guarantees: the result works under ``jax.jit``, ``jax.grad``, ``jax.vjp``, ``jax.jvp``,
``jax.vmap`` (one program call per batch element), ``jax.jacfwd``, ``jax.jacrev`` and, for the
loss, ``jax.hessian``, grad of grad and jvp of grad. The program call and its derivatives are
JAX primitives (`dpt_ir.adapters.jax_rules`) whose jvp, transpose and batching rules are each
other, each run in a host callback (``jax.pure_callback``): the primal is ``Program.run``; the
tangent ``program.jvp``; when JAX differentiates a program with a scalar loss, the forward is one
fused ``value_and_grad`` whose loss gradients are residuals, so a cotangent on the loss alone only
scales them; other cotangents run a complete, closed tape pass of its own on the saved inputs
(`dpt_ir.interop.vjp`); a second derivative of the loss is ``program.hvp``. Residuals are each
call's own, so calls are reentrant. Inputs outside ``program.wrt`` get a zero cotangent; a
tangent on one is a `ContractError`, and so are the derivatives dpt_ir does not derive (a second
derivative of another output, forward over forward, third order), raised when traced. Trade-off:
``jax.jvp`` of a program with a scalar loss runs ``value_and_grad`` besides its jvp plan (a jvp
rule cannot tell a ``jax.jvp`` from the linearization of a ``jax.grad``). A CUDA program runs
through the same callback, so its arrays cross the host (Warp's JAX FFI is not used). One call
returns one array for a single output, a tuple for several. Shape and dtype errors are raised
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

from dpt_ir.adapters import jax_rules
from dpt_ir.interop import (
    CompiledProgram,
    bind_arguments,
    has_scalar_loss,
    input_names,
    output_names,
    output_type,
    require_program,
)
from dpt_ir.ir.errors import ContractError


def function(program: CompiledProgram) -> Any:
    """The program as a JAX function (see the module docstring)."""
    require_program(program, "dpt_ir.jax.function")
    graph = program.graph
    names, outs = input_names(graph), output_names(graph)
    where = f"dpt_ir.jax.function({graph.name!r})"

    host = jax_rules.Host(program, keep=has_scalar_loss(program))
    for n in outs:
        _struct(output_type(graph, n))  # float64 needs x64, from dpt_ir.jax.function on

    def call(*args: Any, **kwargs: Any) -> Any:
        bound = bind_arguments(graph, args, kwargs, where)
        missing = [n for n in names if n not in bound]
        if missing:
            raise ContractError(f"graph {graph.name!r}: missing input(s) {missing}; expected exactly {names}")
        ordered = [_checked(n, bound[n], graph.types[n]) for n in names]
        results = tuple(jax_rules.call(host, ordered))
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

"""`function(program)`: a compiled program as a differentiable PyTorch operator.

Assumes: PyTorch 2.13 (the ``[torch]`` extra); the program's inputs arrive as
``torch.Tensor``s, positional in declaration order or by keyword.
Guarantees:

- One call returns one tensor for a single output, a tuple in output order for several.
- The program is registered as two ``torch.library.custom_op``s (forward, and the
  backward it needs) with fake implementations and ``register_autograd``, so
  ``torch.compile(fullgraph=True)`` sees one opaque op, without graph breaks. The op
  names are unique per program (``dpt_ir::<module name>_<device>``); the ops are
  ``TorchFunction.forward_op`` / ``vjp_op``. Eager calls run the same two
  implementations through a ``torch.autograd.Function`` instead: the custom op's Python
  dispatch costs ~0.1 ms a call on this machine, several times the per-call goal.
  Double backward: a gradient taken with ``create_graph=True`` of the loss alone (a cotangent
  on ``program.loss``, none on the other outputs) is differentiable once more, through the
  program's Hessian-vector product (`Program.hvp`: ``d/dx <g ∇L, v> = g H v`` and
  ``d/dg = <∇L, v>``; loop programs too). Any other second derivative (a cotangent on another
  output) and third order carry a node whose backward raises a `ContractError` saying so
  (instead of torch's silent constant or its "does not require grad" error).
- ``torch.func`` (``jvp``, ``grad``, ``vjp``, ``vmap``, ``jacfwd``, ``jacrev``, ``hessian`` of the
  loss): a call made while a functorch transform is active goes to the ``setup_context``-style
  Functions of `dpt_ir.adapters.torch_func` (forward mode through ``program.jvp``, second
  derivatives of the loss through ``program.hvp``); other calls keep the two routes above.
- Gradients reach every input in ``program.wrt`` for cotangents on any subset of the
  outputs; a tensor that requires grad on an input outside ``wrt`` is a `ContractError`
  (a silent zero gradient would be wrong).
- Reentrant: each call saves only its own input tensors (and, eagerly, its own loss
  gradients); its backward scales those gradients (a cotangent on the scalar loss alone)
  or runs complete, closed evaluations of its own (see `dpt_ir.interop.vjp`). Trade-off:
  an eager forward that needs a gradient runs the fused ``value_and_grad`` (more work
  than ``run`` if no backward follows), and other cotangents, and every backward under
  ``torch.compile``, recompute the forward.
- Memory: CPU tensors are read in place (a NumPy view; the program copies only a
  non-contiguous one); CUDA tensors through ``wp.from_torch`` on torch's current stream.
  Results come back through the host (``Program.run`` returns NumPy arrays): one copy
  on CPU, a device round trip on CUDA. Torch's grad buffers are never handed to Warp
  (inputs are detached, gradients are fresh tensors torch accumulates itself), which
  avoids the Warp bridge's doubled gradients.
- Bad tensors (shape, dtype, device, missing or extra inputs) raise `run`'s `ContractError`s;
  every tensor must be on the program's device.
"""

from __future__ import annotations

try:
    import torch
except ImportError as _exc:  # the optional extra is missing
    raise ImportError(
        "dpt_ir.torch needs PyTorch, which is not installed; install the extra: pip install 'dpt_ir[torch]'"
    ) from _exc

import contextlib
import re
import threading
from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.adapters import torch_func
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

TORCH_DTYPES: dict[str, torch.dtype] = {
    "float32": torch.float32,
    "float64": torch.float64,
    "int32": torch.int32,
    "uint8": torch.uint8,
    "bool": torch.bool,
}
_FUNCTIONS: dict[str, TorchFunction] = {}  # op name -> its function: torch.library names are process-global
_REGISTERING = threading.Lock()  # two threads wrapping one program must not register its ops twice


def function(program: CompiledProgram) -> TorchFunction:
    """The program as a callable on ``torch.Tensor``s (see the module docstring).

    Calling it twice for the same program returns the same function (one registration)."""
    require_program(program, "dpt_ir.torch.function")
    base = re.sub(r"\W", "_", f"{program.module_name}_{program.device}")
    with _REGISTERING:
        name, k = base, 1
        while name in _FUNCTIONS:
            if _FUNCTIONS[name].program is program:
                return _FUNCTIONS[name]
            k += 1
            name = f"{base}_{k}"
        _FUNCTIONS[name] = TorchFunction(program, name)
        return _FUNCTIONS[name]


class TorchFunction:
    """A program registered as ``dpt_ir::<name>`` (forward) and ``dpt_ir::<name>_vjp``."""

    def __init__(self, program: CompiledProgram, name: str) -> None:
        self.program = program
        self.name = name
        self.inputs = input_names(program.graph)
        self.outputs = output_names(program.graph)
        self.cotangent_outputs = differentiable_outputs(program.graph)
        self.device = torch.device(program.device)
        self.forward_op = _register_forward(self, f"dpt_ir::{name}")
        self.vjp_op = _register_vjp(self, f"dpt_ir::{name}_vjp")
        self.forward_op.register_autograd(self._backward, setup_context=_save_inputs)

    def __repr__(self) -> str:
        return f"dpt_ir.torch.function({self.program!r}) as dpt_ir::{self.name}"

    def __call__(self, *args: Any, **kwargs: Any) -> torch.Tensor | tuple[torch.Tensor, ...]:
        where = f"dpt_ir.torch.function({self.program.graph.name!r})"
        bound = bind_arguments(self.program.graph, args, kwargs, where)
        missing = [n for n in self.inputs if n not in bound]
        if missing:
            raise ContractError(
                f"graph {self.program.graph.name!r}: missing input(s) {missing}; expected exactly {self.inputs}"
            )
        for name, value in bound.items():
            if not isinstance(value, torch.Tensor):
                raise ContractError(f"{where}: input {name!r}: expected a torch.Tensor, found {type(value).__name__}")
            if value.device != self.device:
                raise ContractError(
                    f"input {name!r}: expected an array on {self.program.device}, found one on {value.device}"
                )
            if value.requires_grad and torch.is_grad_enabled() and name not in self.program.wrt:
                raise ContractError(
                    f"{where}: input {name!r} requires grad but is not in the program's wrt "
                    f"{list(self.program.wrt)}; compile with wrt including it, or pass it detached"
                )
        ordered = [bound[n] for n in self.inputs]
        if torch.compiler.is_compiling():  # the registered op: opaque to the compiler, with its fake
            results = self.forward_op(ordered)
        elif torch._C._are_functorch_transforms_active():  # torch.func: setup_context-style Functions
            results = torch_func.apply(self, ordered)
        else:  # eager: the same implementations without the custom op's dispatch (~0.1 ms a call here)
            keep = has_scalar_loss(self.program) and torch.is_grad_enabled()
            keep = keep and any(bound[w].requires_grad for w in self.program.wrt)
            results = _Eager.apply(self, keep, *ordered)
        return results[0] if len(results) == 1 else tuple(results)

    # -- the two ops' implementations --
    def forward_impl(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        inputs = self._program_inputs(tensors)
        with self._stream():
            outs = forward(self.program, inputs)
        return [self._tensor(outs[n]) for n in self.outputs]

    def forward_fake(self, tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return [self._empty(output_type(self.program.graph, n)) for n in self.outputs]

    def forward_keeping_grads(self, tensors: list[torch.Tensor]) -> tuple[list[torch.Tensor], dict[str, np.ndarray]]:
        """The outputs by one fused ``value_and_grad``, and the loss gradients it gave."""
        inputs = self._program_inputs(tensors)
        with self._stream():
            outs, grads = forward_and_loss_grads(self.program, inputs)
        return [self._tensor(outs[n]) for n in self.outputs], grads

    def vjp_impl(
        self,
        tensors: list[torch.Tensor],
        cotangents: list[torch.Tensor],
        loss_grads: dict[str, np.ndarray] | None = None,
    ) -> list[torch.Tensor]:
        inputs = self._program_inputs(tensors)
        cts = {n: c.detach().cpu().numpy() for n, c in zip(self.cotangent_outputs, cotangents, strict=True)}
        with self._stream():
            grads = vjp(self.program, inputs, cts, loss_grads)
        return [self._tensor(grads[w]) for w in self.program.wrt]

    def vjp_fake(self, tensors: list[torch.Tensor], cotangents: list[torch.Tensor]) -> list[torch.Tensor]:
        return [self._empty(self.program.graph.types[w]) for w in self.program.wrt]

    def cotangents(self, grads: Sequence[torch.Tensor | None]) -> list[torch.Tensor]:
        """The float outputs' cotangents from torch's grads of all outputs (None: zero)."""
        by_name = dict(zip(self.outputs, grads, strict=True))
        return [
            torch.zeros_like(self._empty(output_type(self.program.graph, n))) if by_name[n] is None else by_name[n]
            for n in self.cotangent_outputs
        ]

    def input_grads(self, wrt_grads: list[torch.Tensor]) -> list[torch.Tensor | None]:
        """One gradient per input in declaration order (None outside ``wrt``)."""
        by_name = dict(zip(self.program.wrt, wrt_grads, strict=True))
        return [by_name.get(n) for n in self.inputs]

    def _backward(self, ctx: Any, grads: list[torch.Tensor | None]) -> tuple[list[torch.Tensor | None]]:
        return (self.input_grads(self.vjp_op(list(ctx.saved_tensors), self.cotangents(grads))),)

    # -- conversions --
    def _stream(self) -> contextlib.AbstractContextManager[Any]:
        """Warp launches on torch's current CUDA stream, so they are ordered after the work
        that produced the inputs; nothing to do on CPU."""
        if self.device.type != "cuda":
            return contextlib.nullcontext()
        return wp.ScopedStream(wp.stream_from_torch(self.device))

    def _program_inputs(self, tensors: list[torch.Tensor]) -> dict[str, Any]:
        return {n: self._program_input(n, t.detach()) for n, t in zip(self.inputs, tensors, strict=True)}

    def _program_input(self, name: str, t: torch.Tensor) -> Any:
        declared = self.program.graph.types[name]
        if t.device.type == "cpu":
            t = t.resolve_conj().resolve_neg()
            if t.dtype in _NUMPY_DTYPES:
                return host_view(t)  # zero copy
            try:
                return t.numpy()  # a dtype no program input has: run refuses it with its own message
            except TypeError:  # a dtype NumPy lacks (bfloat16, complex32, ...)
                raise ContractError(f"input {name!r}: expected dtype {declared.dtype}, found {t.dtype}") from None
        flat = t.contiguous().reshape(-1) if t.dim() == 0 else t.contiguous()
        try:
            return wp.from_torch(flat, requires_grad=False)  # never torch's grad buffers
        except RuntimeError:  # a dtype Warp lacks
            raise ContractError(f"input {name!r}: expected dtype {declared.dtype}, found {t.dtype}") from None

    def _tensor(self, arr: np.ndarray) -> torch.Tensor:
        return torch.from_numpy(arr).to(self.device)  # arr is fresh (interop's guarantee): no copy on CPU

    def _empty(self, t: Any) -> torch.Tensor:
        return torch.empty(t.shape, dtype=TORCH_DTYPES[t.dtype], device=self.device)


_NUMPY_DTYPES = {dtype: np.dtype(name) for name, dtype in TORCH_DTYPES.items()}


class _TensorMemory:
    """The memory of a CPU tensor as NumPy's array interface; holds the tensor, so the
    array built on it keeps the memory alive."""

    def __init__(self, t: torch.Tensor) -> None:
        self.tensor = t
        self.__array_interface__ = {
            "data": (t.data_ptr(), False),
            "shape": tuple(t.shape),
            "strides": tuple(k * t.element_size() for k in t.stride()),
            "typestr": _NUMPY_DTYPES[t.dtype].str,
            "version": 3,
        }


def host_view(t: torch.Tensor) -> np.ndarray:
    """A NumPy view of a CPU tensor's memory (no copy) that leaves its storage as it was.

    ``Tensor.numpy()`` marks the storage non-resizable for good, and FSDP, which frees a
    gathered parameter by resizing its storage to zero, then fails ("Trying to resize
    storage that is not resizable"). An empty tensor may have no memory: a fresh empty array."""
    if t.numel() == 0:
        return np.empty(tuple(t.shape), _NUMPY_DTYPES[t.dtype])
    return np.asarray(_TensorMemory(t))


class _Eager(torch.autograd.Function):
    """The eager route: `TorchFunction.forward_impl` / `vjp_impl` as an autograd.Function.

    With ``keep`` (a gradient will likely be taken, and the program has a scalar loss) the
    forward is one fused ``value_and_grad`` whose loss gradients this call keeps: a
    backward with a cotangent on the loss alone then only scales them, so a training
    step evaluates the program once, not twice. Other cotangents run a tape pass."""

    @staticmethod
    def forward(ctx: Any, fn: TorchFunction, keep: bool, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.fn = fn
        ctx.save_for_backward(*tensors)  # this call's own inputs
        if keep:
            outs, ctx.loss_grads = fn.forward_keeping_grads(list(tensors))
        else:
            outs, ctx.loss_grads = fn.forward_impl(list(tensors)), None
        fixed = [o for o, n in zip(outs, fn.outputs, strict=True) if n not in fn.cotangent_outputs]
        ctx.mark_non_differentiable(*fixed)  # bool and integer outputs
        return tuple(outs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        fn: TorchFunction = ctx.fn
        with torch.no_grad():
            wrt_grads = fn.vjp_impl(list(ctx.saved_tensors), fn.cotangents(grads), ctx.loss_grads)
        input_grads = fn.input_grads(wrt_grads)
        if torch.is_grad_enabled():  # create_graph=True: the caller may differentiate these gradients
            seed = _loss_seed(fn, grads)
            if seed is not None:  # the loss alone: differentiable again through program.hvp
                wrt = _LossGradient.apply(fn, seed, *ctx.saved_tensors)
                by_name = dict(zip(fn.program.wrt, wrt, strict=True))
                return (None, None, *[by_name.get(n) for n in fn.inputs])
            # They depend on the inputs (and the cotangents), so they must not look constant to torch.
            depends = [t for t in (*ctx.saved_tensors, *grads) if t is not None and t.requires_grad]
            why = "of outputs other than the loss"
            input_grads = [g if g is None else _Refused.apply(fn, why, g, *depends) for g in input_grads]
        return (None, None, *input_grads)


def _loss_seed(fn: TorchFunction, grads: Sequence[torch.Tensor | None]) -> torch.Tensor | None:
    """The loss's cotangent when it is the only nonzero one and the program has a Hessian-vector
    product (a `Program` with a loss), else None."""
    loss = fn.program.loss
    if loss is None or not hasattr(fn.program, "hvp"):
        return None
    by_name = dict(zip(fn.outputs, grads, strict=True))
    others = [g for n, g in by_name.items() if n != loss and g is not None]
    if by_name[loss] is None or any(bool(torch.any(g != 0)) for g in others):
        return None
    return by_name[loss]


class _LossGradient(torch.autograd.Function):
    """``g ∇L(x)`` per ``wrt`` input (``g``: the loss's cotangent), differentiable once more:
    its backward of cotangents ``v`` is ``g H v`` per ``wrt`` input (`Program.hvp`) and
    ``<∇L, v>`` for ``g``. Its own gradients are refused (third order)."""

    @staticmethod
    def forward(ctx: Any, fn: TorchFunction, seed: torch.Tensor, *tensors: torch.Tensor) -> tuple[torch.Tensor, ...]:
        ctx.fn = fn
        ctx.save_for_backward(seed, *tensors)
        with torch.no_grad():
            grads = fn.vjp_impl(
                list(tensors), fn.cotangents([seed if n == fn.program.loss else None for n in fn.outputs])
            )
        return tuple(grads)

    @staticmethod
    def backward(ctx: Any, *vs: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        fn: TorchFunction = ctx.fn
        seed, *tensors = ctx.saved_tensors
        wrt = list(fn.program.wrt)
        vectors = {w: (torch.zeros_like(tensors[fn.inputs.index(w)]) if v is None else v).detach().cpu().numpy()
                   for w, v in zip(wrt, vs, strict=True)}  # fmt: skip
        with torch.no_grad(), fn._stream():
            _, grads, hvps = fn.program.hvp(vectors, **fn._program_inputs(list(tensors)))
        g = seed.detach()
        d_seed = sum(float(np.vdot(grads[w], vectors[w])) for w in wrt)
        d_inputs = {w: g * fn._tensor(hvps[w]) for w in wrt}
        out = [d_inputs.get(n) for n in fn.inputs]
        if torch.is_grad_enabled():  # third order: refused, not a silent constant
            depends = [t for t in (seed, *tensors, *vs) if t is not None and t.requires_grad]
            out = [d if d is None else _Refused.apply(fn, "of third order", d, *depends) for d in out]
        return (None, torch.as_tensor(d_seed, dtype=seed.dtype, device=seed.device), *out)


class _Refused(torch.autograd.Function):
    """A gradient, passed through, whose own backward refuses (``why``: which derivative dpt_ir
    does not derive): without this node torch would treat it as a constant (a wrong zero
    derivative) or fail with a message that hides why."""

    @staticmethod
    def forward(ctx: Any, fn: TorchFunction, why: str, grad: torch.Tensor, *depends: torch.Tensor) -> torch.Tensor:
        ctx.fn, ctx.why = fn, why
        return grad.clone()  # a new tensor: an autograd.Function must not return its input as is

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[None, ...]:
        raise ContractError(
            f"dpt_ir.torch.function({ctx.fn.program.graph.name!r}): differentiating this gradient (a derivative "
            f"{ctx.why}) is not supported yet; dpt_ir derives second derivatives of the loss alone (Program.hvp)"
        )


def _save_inputs(ctx: Any, inputs: tuple[list[torch.Tensor]], output: Any) -> None:
    """Each call keeps its own inputs (torch's version counters catch in-place changes)."""
    ctx.save_for_backward(*inputs[0])


def _register_forward(fn: TorchFunction, qualname: str) -> Any:
    def impl(tensors: list[torch.Tensor]) -> list[torch.Tensor]:
        return fn.forward_impl(tensors)

    op = torch.library.custom_op(qualname, impl, mutates_args=())
    op.register_fake(fn.forward_fake)
    return op


def _register_vjp(fn: TorchFunction, qualname: str) -> Any:
    def impl(tensors: list[torch.Tensor], cotangents: list[torch.Tensor]) -> list[torch.Tensor]:
        return fn.vjp_impl(tensors, cotangents)

    op = torch.library.custom_op(qualname, impl, mutates_args=())
    op.register_fake(fn.vjp_fake)
    return op

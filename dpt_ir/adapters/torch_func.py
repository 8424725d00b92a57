"""The route of `dpt_ir.torch.function` under ``torch.func`` transforms (``jvp``, ``grad``,
``vjp``, ``vmap``, ``jacfwd``, ``jacrev``, ``hessian``).

Assumes: PyTorch 2.13; ``fn`` is a `dpt_ir.torch.TorchFunction`; a call reaches `apply` only
while a functorch transform is active (``torch._C._are_functorch_transforms_active()``).
Guarantees:

- Every rule is a ``setup_context``-style ``autograd.Function`` (the only kind ``torch.func``
  accepts). Its forward receives plain tensors, because functorch unwraps an
  ``autograd.Function``'s operands level by level before its forward runs; so every program
  call reads its tensors in place (`TorchFunction._program_inputs`), never through a
  functorch wrapper (whose data pointer is unreachable) and never through a copy. A rule's
  ``jvp`` / ``backward`` receives wrapped tensors and only applies the next Function to them.
- The Functions and their derivatives, with ``x`` the inputs, ``u`` cotangents of the float
  outputs and ``v``, ``w`` vectors on the ``wrt`` inputs:
  ``_Call(x) = y`` (``program.run``); ``_Tangents(x, v) = J v`` (``program.jvp``);
  ``_Cotangents(x, u) = Jᵀ u`` (`dpt_ir.interop.vjp`); ``_Curvature(x, u, v) = Σ_k u_k ∇²y_k v``,
  which dpt_ir derives when ``u`` is on the loss alone (``u_loss · H v``, ``program.hvp``).
  ``d _Call = _Tangents`` (jvp) and ``_Cotangents`` (backward);
  ``d _Cotangents = _Curvature(x, u, dx) + _Cotangents(x, du)``, backward
  ``(_Curvature(x, u, w), _Tangents(x, w))``; ``_Tangents``' backward is
  ``(_Curvature(x, w, v), _Cotangents(x, w))``. So ``torch.func.hessian`` of the loss
  (``jacfwd(jacrev)``), ``jacrev(jacrev)``, ``grad`` of ``grad`` and ``jvp`` of ``grad`` work.
  Refused with a `ContractError` naming the program and the derivative: a second derivative of
  an output other than the loss (``_Curvature`` with such a ``u``, found from the values), the
  forward-mode derivative of ``_Tangents`` (forward over forward) and any derivative of
  ``_Curvature`` (third order); a tangent on an input outside ``wrt``.
- ``vmap``: every Function has a sequential rule (one program call per batch element, like
  the JAX adapter's ``vmap_method="sequential"``); results are stacked on dimension 0.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import torch

from dpt_ir.interop import vjp
from dpt_ir.ir.errors import ContractError

if TYPE_CHECKING:
    from dpt_ir.torch import TorchFunction


def apply(fn: TorchFunction, tensors: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    """The program's outputs at ``tensors`` (declaration order), differentiable by torch.func."""
    return _Call.apply(fn, *tensors)


# -- the program evaluations, on plain tensors --
def _tangents(fn: TorchFunction, x: list[torch.Tensor], v: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    vectors = {w: fn._program_input(w, t) for w, t in zip(fn.program.wrt, v, strict=True)}
    with fn._stream():
        _, tangents = fn.program.jvp(vectors, **fn._program_inputs(x))
    return tuple(fn._tensor(tangents[n]) for n in fn.cotangent_outputs)


def _cotangents(fn: TorchFunction, x: list[torch.Tensor], u: list[torch.Tensor]) -> tuple[torch.Tensor, ...]:
    cts = {n: t.detach().cpu().numpy() for n, t in zip(fn.cotangent_outputs, u, strict=True)}
    with fn._stream():
        grads = vjp(fn.program, fn._program_inputs(x), cts)
    return tuple(fn._tensor(grads[w]) for w in fn.program.wrt)


def _curvature(
    fn: TorchFunction, x: list[torch.Tensor], u: list[torch.Tensor], v: list[torch.Tensor]
) -> tuple[torch.Tensor, ...]:
    """``Σ_k u_k ∇²y_k v`` per ``wrt`` input: zero when ``u`` or ``v`` is, ``u_loss · H v`` when
    ``u`` is on the loss alone, else a `ContractError`."""
    wrt, loss = fn.program.wrt, fn.program.loss
    live = {n: t for n, t in zip(fn.cotangent_outputs, u, strict=True) if bool(torch.any(t != 0))}
    if not live or not any(bool(torch.any(t != 0)) for t in v):
        return tuple(torch.zeros_like(fn._empty(fn.program.graph.types[w])) for w in wrt)
    if set(live) != {loss} or not hasattr(fn.program, "hvp"):
        refuse(fn, f"of outputs other than the loss (cotangents on {sorted(live)})")
    vectors = {w: fn._program_input(w, t) for w, t in zip(wrt, v, strict=True)}
    with fn._stream():
        _, _, hvps = fn.program.hvp(vectors, **fn._program_inputs(x))
    scale = live[loss].detach()
    return tuple(scale * fn._tensor(hvps[w]) for w in wrt)


def refuse(fn: TorchFunction, why: str) -> None:
    raise ContractError(
        f"dpt_ir.torch.function({fn.program.graph.name!r}) under torch.func: a derivative {why} is not "
        "supported; dpt_ir derives the first derivatives of every float output (program.jvp, its vjp) and "
        "the second derivatives of the loss alone (Program.hvp)"
    )


# -- helpers --
def _split(fn: TorchFunction, args: tuple[Any, ...], *sizes: int) -> list[list[Any]]:
    parts, k = [], 0
    for n in sizes:
        parts.append(list(args[k : k + n]))
        k += n
    return parts


def _zero_or(fn: TorchFunction, name: str, t: torch.Tensor | None) -> torch.Tensor:
    return torch.zeros_like(fn._empty(fn.program.graph.types[name])) if t is None else t


def _wrt_tensors(fn: TorchFunction, x: list[torch.Tensor]) -> list[torch.Tensor]:
    return [x[fn.inputs.index(w)] for w in fn.program.wrt]


def _on_inputs(fn: TorchFunction, per_wrt: tuple[torch.Tensor, ...]) -> list[torch.Tensor | None]:
    by_name = dict(zip(fn.program.wrt, per_wrt, strict=True))
    return [by_name.get(n) for n in fn.inputs]


def _add(a: tuple[torch.Tensor, ...] | None, b: tuple[torch.Tensor, ...] | None) -> tuple[torch.Tensor, ...]:
    if a is None or b is None:
        return a if b is None else b  # type: ignore[return-value]
    return tuple(p + q for p, q in zip(a, b, strict=True))


def _sequential(function: Any, info: Any, in_dims: tuple[Any, ...], *args: Any) -> tuple[Any, Any]:
    """A vmap rule: ``function.apply`` per batch element, the results stacked on dimension 0."""
    per_element = []
    for b in range(info.batch_size):
        sliced = [a if d is None else a.select(d, b) for a, d in zip(args, in_dims, strict=True)]
        per_element.append(function.apply(*sliced))
    outputs = tuple(torch.stack(parts) for parts in zip(*per_element, strict=True))
    return outputs, (0,) * len(outputs)


class _Rule(torch.autograd.Function):
    """What the four Functions share: their first argument is the `TorchFunction`, the other
    arguments are all tensors, and ``vmap`` is sequential."""

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        ctx.fn = inputs[0]
        ctx.set_materialize_grads(False)  # None, not zeros, for an input without a tangent
        ctx.save_for_backward(*inputs[1:])
        ctx.save_for_forward(*inputs[1:])

    @classmethod
    def vmap(cls, info: Any, in_dims: tuple[Any, ...], fn: TorchFunction, *args: torch.Tensor) -> tuple[Any, Any]:
        return _sequential(cls, info, in_dims, fn, *args)


class _Call(_Rule):
    """``y = program(x)``: every output; bool and integer outputs are not differentiable."""

    @staticmethod
    def forward(fn: TorchFunction, *x: torch.Tensor) -> tuple[torch.Tensor, ...]:
        return tuple(fn.forward_impl(list(x)))

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: Any) -> None:
        _Rule.setup_context(ctx, inputs, output)
        fn: TorchFunction = inputs[0]
        fixed = [o for o, n in zip(output, fn.outputs, strict=True) if n not in fn.cotangent_outputs]
        ctx.mark_non_differentiable(*fixed)

    @staticmethod
    def jvp(ctx: Any, _fn: None, *dx: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        fn: TorchFunction = ctx.fn
        given = [n for n, t in zip(fn.inputs, dx, strict=True) if t is not None and n not in fn.program.wrt]
        if given:
            raise ContractError(
                f"dpt_ir.torch.function({fn.program.graph.name!r}): input(s) {given} have a tangent but are not "
                f"in the program's wrt {list(fn.program.wrt)}; compile with wrt including them"
            )
        x = list(ctx.saved_tensors)
        v = [_zero_or(fn, w, dx[fn.inputs.index(w)]) for w in fn.program.wrt]
        by_name = dict(zip(fn.cotangent_outputs, _Tangents.apply(fn, *x, *v), strict=True))
        return tuple(by_name.get(n) for n in fn.outputs)

    @staticmethod
    def backward(ctx: Any, *grads: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        fn: TorchFunction = ctx.fn
        u = fn.cotangents(grads)
        return (None, *_on_inputs(fn, _Cotangents.apply(fn, *ctx.saved_tensors, *u)))


class _Tangents(_Rule):
    """``J v`` per float output (``program.jvp``)."""

    @staticmethod
    def forward(fn: TorchFunction, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, v = _split(fn, args, len(fn.inputs), len(fn.program.wrt))
        return _tangents(fn, x, v)

    @staticmethod
    def jvp(ctx: Any, *_: Any) -> Any:
        refuse(ctx.fn, "in forward mode of a forward-mode derivative (jvp of jvp)")

    @staticmethod
    def backward(ctx: Any, *w: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        fn: TorchFunction = ctx.fn
        x, v = _split(fn, tuple(ctx.saved_tensors), len(fn.inputs), len(fn.program.wrt))
        u = [_zero_or_output(fn, n, t) for n, t in zip(fn.cotangent_outputs, w, strict=True)]
        d_x = _on_inputs(fn, _Curvature.apply(fn, *x, *u, *v))
        return (None, *d_x, *_Cotangents.apply(fn, *x, *u))


class _Cotangents(_Rule):
    """``Jᵀ u`` per ``wrt`` input (`dpt_ir.interop.vjp`)."""

    @staticmethod
    def forward(fn: TorchFunction, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, u = _split(fn, args, len(fn.inputs), len(fn.cotangent_outputs))
        return _cotangents(fn, x, u)

    @staticmethod
    def jvp(ctx: Any, _fn: None, *tangents: torch.Tensor | None) -> tuple[torch.Tensor, ...]:
        fn: TorchFunction = ctx.fn
        x, u = _split(fn, tuple(ctx.saved_tensors), len(fn.inputs), len(fn.cotangent_outputs))
        dx, du = _split(fn, tangents, len(fn.inputs), len(fn.cotangent_outputs))
        curved = None
        if any(t is not None for t in _wrt_tensors(fn, dx)):
            v = [_zero_or(fn, w, t) for w, t in zip(fn.program.wrt, _wrt_tensors(fn, dx), strict=True)]
            curved = _Curvature.apply(fn, *x, *u, *v)
        linear = None
        if any(t is not None for t in du):
            dus = [_zero_or_output(fn, n, t) for n, t in zip(fn.cotangent_outputs, du, strict=True)]
            linear = _Cotangents.apply(fn, *x, *dus)
        if curved is None and linear is None:
            return tuple(torch.zeros_like(fn._empty(fn.program.graph.types[w])) for w in fn.program.wrt)
        return _add(curved, linear)

    @staticmethod
    def backward(ctx: Any, *w: torch.Tensor | None) -> tuple[torch.Tensor | None, ...]:
        fn: TorchFunction = ctx.fn
        x, u = _split(fn, tuple(ctx.saved_tensors), len(fn.inputs), len(fn.cotangent_outputs))
        ws = [_zero_or(fn, name, t) for name, t in zip(fn.program.wrt, w, strict=True)]
        d_x = _on_inputs(fn, _Curvature.apply(fn, *x, *u, *ws))
        return (None, *d_x, *_Tangents.apply(fn, *x, *ws))


class _Curvature(_Rule):
    """``Σ_k u_k ∇²y_k v`` per ``wrt`` input (`_curvature`); its derivatives are third order."""

    @staticmethod
    def forward(fn: TorchFunction, *args: torch.Tensor) -> tuple[torch.Tensor, ...]:
        x, u, v = _split(fn, args, len(fn.inputs), len(fn.cotangent_outputs), len(fn.program.wrt))
        return _curvature(fn, x, u, v)

    @staticmethod
    def jvp(ctx: Any, *_: Any) -> Any:
        refuse(ctx.fn, "of third order")

    @staticmethod
    def backward(ctx: Any, *_: Any) -> Any:
        refuse(ctx.fn, "of third order")


def _zero_or_output(fn: TorchFunction, name: str, t: torch.Tensor | None) -> torch.Tensor:
    return torch.zeros_like(fn._empty(fn.program.graph.types[fn.program.graph.output_value(name)])) if t is None else t

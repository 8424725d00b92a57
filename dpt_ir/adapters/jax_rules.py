"""The JAX primitives of `dpt_ir.jax.function`: a program call and its derivatives, each a
primitive whose rules (jvp, transpose, batching) are the others, so JAX composes them into
``jax.jvp``, ``jax.grad``, ``jax.vjp``, ``jax.vmap``, ``jax.jacfwd``, ``jax.jacrev`` and
``jax.hessian``.

Assumes: JAX 0.10 (``jax.extend.core.Primitive``, ``jax.interpreters.ad`` / ``batching`` /
``mlir``); a `Host` holds the program and its names; arguments were checked by the caller.
Guarantees:

- Every primitive runs its program call in one ``jax.pure_callback`` (the host, NumPy arrays;
  eager, under ``jax.jit`` alike). With ``x`` the inputs, ``u`` cotangents of the float outputs
  named by the static ``live``, ``v`` vectors on the ``wrt`` inputs and ``g`` the loss gradients:
  ``call(x) = y`` (``Program.run``; with ``keep``, also ``g`` by one fused ``value_and_grad``);
  ``tangents(x, v, g) = J v`` (``program.jvp``); ``cotangents(x, u, g) = Jᵀ u`` (`interop.vjp`,
  which scales ``g`` for a cotangent on the loss alone); ``curvature(x, u, v) = u_loss H v``
  (``program.hvp``; ``live`` must be the loss alone).
- Rules: ``call``'s jvp binds ``call`` with ``keep`` (a scalar loss: the gradients become the
  residuals a later ``cotangents`` scales) and ``tangents``; ``tangents`` is linear in ``v``
  (transpose: ``cotangents``), ``cotangents`` in ``u`` (transpose: ``tangents``), ``curvature``
  in ``v`` (transpose: itself, the Hessian is symmetric). The jvp of ``cotangents`` in ``x`` is
  ``curvature``; ``g``'s tangent in a nested jvp is ``curvature`` with ``u = 1`` on the loss.
- Refused when traced, with a `ContractError` naming the program and the derivative: a tangent
  on an input outside ``wrt``; a second derivative of an output other than the loss (JAX's
  symbolic zeros tell which cotangents are live); the jvp of ``tangents`` in ``x`` (forward over
  forward); third order (any derivative of ``curvature`` in ``x`` or of its ``u``).
- Batching: one program call per batch element (``jax.lax.map`` of the primitive), which keeps
  every batched call differentiable.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np
from jax.extend.core import Primitive
from jax.interpreters import ad, batching, mlir

from dpt_ir.interop import (
    CompiledProgram,
    differentiable_outputs,
    forward,
    forward_and_loss_grads,
    input_names,
    output_names,
    output_type,
    vjp,
)
from dpt_ir.ir.errors import ContractError


class Host:
    """A program and its names, the static parameter of every primitive (hashed by identity)."""

    def __init__(self, program: CompiledProgram, keep: bool) -> None:
        graph = program.graph
        self.program, self.keep = program, keep
        self.inputs, self.outputs = input_names(graph), output_names(graph)
        self.float_outputs, self.wrt = differentiable_outputs(graph), list(program.wrt)
        self.where = f"dpt_ir.jax.function({graph.name!r})"

    def output_aval(self, name: str) -> jax.core.ShapedArray:
        t = output_type(self.program.graph, name)
        return jax.core.ShapedArray(t.shape, np.dtype(t.dtype))

    def input_aval(self, name: str) -> jax.core.ShapedArray:
        t = self.program.graph.types[name]
        return jax.core.ShapedArray(t.shape, np.dtype(t.dtype))

    def refuse(self, why: str) -> None:
        raise ContractError(
            f"{self.where}: a derivative {why} is not supported; dpt_ir derives the first derivatives of "
            "every float output (program.jvp, its vjp) and the second derivatives of the loss alone (Program.hvp)"
        )


def call(host: Host, args: Sequence[Any]) -> list[Any]:
    """The program's outputs at ``args`` (declaration order), differentiable by JAX."""
    return call_p.bind(*args, host=host, keep=False)


# -- the host side --
def _split(args: Sequence[Any], *sizes: int) -> list[list[Any]]:
    parts, k = [], 0
    for n in sizes:
        parts.append(list(args[k : k + n]))
        k += n
    return parts


def _host_call(host: Host, *x: np.ndarray, keep: bool) -> tuple[np.ndarray, ...]:
    inputs = dict(zip(host.inputs, x, strict=True))
    if not keep:
        outs = forward(host.program, inputs)
        return tuple(outs[n] for n in host.outputs)
    outs, grads = forward_and_loss_grads(host.program, inputs)
    return (*(outs[n] for n in host.outputs), *(grads[w] for w in host.wrt))


def _host_tangents(host: Host, *args: np.ndarray, kept: bool) -> tuple[np.ndarray, ...]:
    x, v = _split(args, len(host.inputs), len(host.wrt))
    _, tangents = host.program.jvp(dict(zip(host.wrt, v, strict=True)), **dict(zip(host.inputs, x, strict=True)))
    return tuple(tangents[n] for n in host.float_outputs)


def _host_cotangents(host: Host, *args: np.ndarray, live: tuple[str, ...], kept: bool) -> tuple[np.ndarray, ...]:
    x, u, g = _split(args, len(host.inputs), len(live), len(host.wrt) if kept else 0)
    inputs = dict(zip(host.inputs, x, strict=True))
    grads = vjp(
        host.program, inputs, dict(zip(live, u, strict=True)), dict(zip(host.wrt, g, strict=True)) if kept else None
    )
    return tuple(grads[w] for w in host.wrt)


def _host_curvature(host: Host, *args: np.ndarray, live: tuple[str, ...]) -> tuple[np.ndarray, ...]:
    x, (u,), v = _split(args, len(host.inputs), 1, len(host.wrt))
    _, _, hvps = host.program.hvp(dict(zip(host.wrt, v, strict=True)), **dict(zip(host.inputs, x, strict=True)))
    return tuple((np.asarray(u) * hvps[w]).astype(hvps[w].dtype, copy=False) for w in host.wrt)


# -- the primitives --
def _primitive(name: str, avals: Callable[..., list[Any]], host_fn: Callable[..., tuple[np.ndarray, ...]]) -> Primitive:
    prim = Primitive(f"dpt_ir_{name}")
    prim.multiple_results = True

    def impl(*args: Any, **params: Any) -> list[Any]:
        shapes = [jax.ShapeDtypeStruct(a.shape, a.dtype) for a in avals(*args, **params)]
        host = params.pop("host")
        result = jax.pure_callback(lambda *a: host_fn(host, *a, **params), shapes, *args, vmap_method="sequential")
        return list(result)

    prim.def_impl(impl)
    prim.def_abstract_eval(avals)
    mlir.register_lowering(prim, mlir.lower_fun(impl, multiple_results=True))
    batching.primitive_batchers[prim] = _sequential(prim)
    return prim


def _sequential(prim: Primitive) -> Callable[..., tuple[list[Any], list[int]]]:
    def rule(args: Sequence[Any], dims: Sequence[int | None], **params: Any) -> tuple[list[Any], list[int]]:
        mapped = [jnp.moveaxis(a, d, 0) for a, d in zip(args, dims, strict=True) if d is not None]

        def one(batched: list[Any]) -> list[Any]:
            it = iter(batched)
            return prim.bind(*[a if d is None else next(it) for a, d in zip(args, dims, strict=True)], **params)

        outs = jax.lax.map(one, mapped)
        return list(outs), [0] * len(outs)

    return rule


def _call_avals(*x: Any, host: Host, keep: bool) -> list[Any]:
    grads = [host.input_aval(w) for w in host.wrt] if keep else []
    return [host.output_aval(n) for n in host.outputs] + grads


def _tangent_avals(*args: Any, host: Host, kept: bool) -> list[Any]:
    return [host.output_aval(n) for n in host.float_outputs]


def _grad_avals(*args: Any, host: Host, **params: Any) -> list[Any]:
    return [host.input_aval(w) for w in host.wrt]


call_p = _primitive("call", _call_avals, _host_call)
tangents_p = _primitive("tangents", _tangent_avals, _host_tangents)
cotangents_p = _primitive("cotangents", _grad_avals, _host_cotangents)
curvature_p = _primitive("curvature", _grad_avals, _host_curvature)


# -- the rules --
def _zero(t: Any) -> bool:
    return type(t) is ad.Zero


def _dense(t: Any, aval: Any) -> Any:
    return jnp.zeros(aval.shape, aval.dtype) if _zero(t) else t


def _no_tangent(host: Host, name: str) -> Any:
    return ad.Zero(host.output_aval(name).to_tangent_aval())


def _curvature(host: Host, x: list[Any], u: list[Any], live: tuple[str, ...], v: list[Any]) -> list[Any]:
    if live != (host.program.loss,) or not hasattr(host.program, "hvp"):
        host.refuse(f"of second order of outputs other than the loss (cotangents on {list(live)})")
    return curvature_p.bind(*x, *u, *v, host=host, live=live)


def _call_jvp(
    primals: Sequence[Any], tangents: Sequence[Any], *, host: Host, keep: bool
) -> tuple[list[Any], list[Any]]:
    given = [n for n, t in zip(host.inputs, tangents, strict=True) if not _zero(t) and n not in host.wrt]
    if given:
        raise ContractError(
            f"{host.where}: input(s) {given} have a tangent but are not in the program's wrt {host.wrt}; "
            "compile with wrt including them"
        )
    x = list(primals)
    dx = [_dense(tangents[host.inputs.index(w)], host.input_aval(w)) for w in host.wrt]
    kept = host.keep or keep  # a scalar loss: its gradients are the residuals of a later transpose
    results = call_p.bind(*x, host=host, keep=kept)
    outs, grads = results[: len(host.outputs)], results[len(host.outputs) :]
    primal_out = results if keep else outs
    by_name = dict(zip(host.float_outputs, tangents_p.bind(*x, *dx, *grads, host=host, kept=kept), strict=True))
    out_tangents = [by_name[n] if n in by_name else _no_tangent(host, n) for n in host.outputs]
    if keep:  # this call's own gradients, differentiated (a nested jvp): the Hessian of the loss
        loss = host.program.loss
        one = jnp.ones(host.output_aval(loss).shape, host.output_aval(loss).dtype)
        out_tangents += list(_curvature(host, x, [one], (loss,), dx))
    return primal_out, out_tangents


def _tangents_jvp(
    primals: Sequence[Any], tangents: Sequence[Any], *, host: Host, kept: bool
) -> tuple[list[Any], list[Any]]:
    n = len(host.inputs)
    if not all(_zero(t) for t in tangents[:n]):
        host.refuse("in forward mode of a forward-mode derivative (jvp of jvp)")
    x, v, g = _split(primals, n, len(host.wrt), len(primals) - n - len(host.wrt))
    dv = [_dense(t, host.input_aval(w)) for t, w in zip(tangents[n : n + len(host.wrt)], host.wrt, strict=True)]
    return tangents_p.bind(*primals, host=host, kept=kept), tangents_p.bind(*x, *dv, *g, host=host, kept=kept)


def _tangents_transpose(cts: Sequence[Any], *args: Any, host: Host, kept: bool) -> list[Any]:
    n, m = len(host.inputs), len(host.wrt)
    x, g = list(args[:n]), list(args[n + m :])
    if any(ad.is_undefined_primal(a) for a in (*x, *g)):
        host.refuse("of a forward-mode derivative with respect to the inputs")
    live = tuple(name for name, c in zip(host.float_outputs, cts, strict=True) if not _zero(c))
    u = [c for c in cts if not _zero(c)]
    if not live:
        return [None] * n + [ad.Zero(host.input_aval(w)) for w in host.wrt] + [None] * len(g)
    grads = cotangents_p.bind(*x, *u, *g, host=host, live=live, kept=kept)
    return [None] * n + list(grads) + [None] * len(g)


def _cotangents_jvp(
    primals: Sequence[Any], tangents: Sequence[Any], *, host: Host, live: tuple[str, ...], kept: bool
) -> tuple[list[Any], list[Any]]:
    n, k = len(host.inputs), len(live)
    x, u, g = _split(primals, n, k, len(primals) - n - k)
    dx, du = tangents[:n], tangents[n : n + k]
    out = cotangents_p.bind(*primals, host=host, live=live, kept=kept)
    parts = []
    if not all(_zero(dx[host.inputs.index(w)]) for w in host.wrt):
        v = [_dense(dx[host.inputs.index(w)], host.input_aval(w)) for w in host.wrt]
        parts.append(_curvature(host, x, u, live, v))
    if not all(_zero(t) for t in du):
        dus = [_dense(t, host.output_aval(name)) for t, name in zip(du, live, strict=True)]
        parts.append(cotangents_p.bind(*x, *dus, host=host, live=live, kept=False))
    if not parts:
        return out, [ad.Zero(host.input_aval(w)) for w in host.wrt]
    return out, [sum(ts[1:], ts[0]) for ts in zip(*parts, strict=True)]


def _cotangents_transpose(cts: Sequence[Any], *args: Any, host: Host, live: tuple[str, ...], kept: bool) -> list[Any]:
    n, k = len(host.inputs), len(live)
    x, rest = list(args[:n]), list(args[n + k :])
    if any(ad.is_undefined_primal(a) for a in (*x, *rest)):
        host.refuse("of a gradient with respect to the inputs, in reverse mode, of a linearized gradient")
    w = [_dense(c, host.input_aval(name)) for c, name in zip(cts, host.wrt, strict=True)]
    by_name = dict(zip(host.float_outputs, tangents_p.bind(*x, *w, host=host, kept=False), strict=True))
    return [None] * n + [by_name[name] for name in live] + [None] * len(rest)


def _curvature_jvp(
    primals: Sequence[Any], tangents: Sequence[Any], *, host: Host, live: tuple[str, ...]
) -> tuple[list[Any], list[Any]]:
    n = len(host.inputs)
    if not all(_zero(t) for t in tangents[: n + 1]):
        host.refuse("of third order")
    x, u, v = _split(primals, n, 1, len(host.wrt))
    out = curvature_p.bind(*primals, host=host, live=live)
    if all(_zero(t) for t in tangents[n + 1 :]):
        return out, [ad.Zero(host.input_aval(w)) for w in host.wrt]
    dv = [_dense(t, host.input_aval(w)) for t, w in zip(tangents[n + 1 :], host.wrt, strict=True)]
    return out, curvature_p.bind(*x, *u, *dv, host=host, live=live)


def _curvature_transpose(cts: Sequence[Any], *args: Any, host: Host, live: tuple[str, ...]) -> list[Any]:
    n = len(host.inputs)
    if any(ad.is_undefined_primal(a) for a in args[: n + 1]):
        host.refuse("of third order")
    w = [_dense(c, host.input_aval(name)) for c, name in zip(cts, host.wrt, strict=True)]
    return [None] * (n + 1) + list(curvature_p.bind(*args[: n + 1], *w, host=host, live=live))


ad.primitive_jvps[call_p] = _call_jvp
ad.primitive_jvps[tangents_p] = _tangents_jvp
ad.primitive_transposes[tangents_p] = _tangents_transpose
ad.primitive_jvps[cotangents_p] = _cotangents_jvp
ad.primitive_transposes[cotangents_p] = _cotangents_transpose
ad.primitive_jvps[curvature_p] = _curvature_jvp
ad.primitive_transposes[curvature_p] = _curvature_transpose

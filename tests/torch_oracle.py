"""PyTorch as a second oracle of the random graphs (`tests/strategies.py`): a graph evaluated
node by node with torch ops, gradients by autograd.

`evaluate(graph, inputs, wrt, seeds)` gives every output's value and the gradient of
``sum(sum(out * seed))`` over the seeded outputs wrt ``wrt``, both as NumPy arrays of the
graph's dtypes; `compare_with_torch(batch)` compares a compiled `Batch`
(`tests/backend/harness.py`) with it. It knows the ops the strategies draw (`OPS`); any other op is a KeyError
naming it. Zero-size tensors go through as torch takes them. Assumes torch is installed
(the ``[torch]`` extra): import this module only where torch is.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any

import numpy as np
import torch

import dpt_ir as dp
from tests.backend.harness import MODERATE_TOLERANCES, Batch, mismatch, mixed_precision, prefixed

DTYPES = {"float32": torch.float32, "float64": torch.float64, "int32": torch.int32, "uint8": torch.uint8}
DTYPES["bool"] = torch.bool
Fn = Callable[[dict[str, Any], list[torch.Tensor]], torch.Tensor]


def _axes(a: dict[str, Any]) -> list[int]:
    return [int(k) for k in a["axes"]]


def _reduce(fn: Callable[..., torch.Tensor]) -> Fn:
    """A reduction over ``axes`` (none: the value itself, as the IR's empty axis list)."""

    def apply(a: dict[str, Any], x: list[torch.Tensor]) -> torch.Tensor:
        axes = _axes(a)
        return fn(x[0], dim=axes, keepdim=bool(a["keepdims"])) if axes else x[0]

    return apply


def _arg(fn: Callable[..., torch.Tensor]) -> Fn:
    """argmax / argmin over one axis, or over all (flattened, as NumPy's axis=None)."""

    def apply(a: dict[str, Any], x: list[torch.Tensor]) -> torch.Tensor:
        v, axes = x[0], _axes(a)
        if len(axes) == 1 and v.ndim > 1:
            return fn(v, dim=axes[0], keepdim=bool(a["keepdims"]))
        out = fn(v.reshape(-1))
        return out.reshape([1] * v.ndim) if a["keepdims"] else out

    return apply


def _slice(a: dict[str, Any], x: list[torch.Tensor]) -> torch.Tensor:
    v = x[0]
    for axis, (start, stop, step) in enumerate(zip(a["starts"], a["stops"], a["steps"], strict=True)):
        picked = torch.tensor(list(range(int(start), int(stop), int(step))), dtype=torch.long)
        v = torch.index_select(v, axis, picked)
    return v


def _expand_dims(a: dict[str, Any], x: list[torch.Tensor]) -> torch.Tensor:
    v = x[0]
    for axis in sorted(_axes(a)):
        v = torch.unsqueeze(v, axis)
    return v


def _squeeze(a: dict[str, Any], x: list[torch.Tensor]) -> torch.Tensor:
    v = x[0]
    for axis in sorted(_axes(a), reverse=True):
        v = torch.squeeze(v, axis)
    return v


def _unary(fn: Callable[[torch.Tensor], torch.Tensor]) -> Fn:
    return lambda a, x: fn(x[0])


def _binary(fn: Callable[[torch.Tensor, torch.Tensor], torch.Tensor]) -> Fn:
    return lambda a, x: fn(x[0], x[1])


OPS: dict[str, Fn] = {
    **{
        name: _unary(getattr(torch, name))
        for name in ("sin", "cos", "tanh", "sigmoid", "erf", "exp", "expm1", "log", "log1p", "sqrt", "rsqrt")
        + ("reciprocal", "abs", "relu", "sign", "floor", "ceil", "square", "neg", "logical_not")
    },
    "softplus": _unary(torch.nn.functional.softplus),
    "stop_gradient": _unary(torch.Tensor.detach),
    **{name: _binary(getattr(torch, name)) for name in ("add", "sub", "mul", "div", "pow", "atan2", "maximum")},
    **{name: _binary(getattr(torch, name)) for name in ("minimum", "eq", "ne", "lt", "le", "gt", "ge")},
    **{name: _binary(getattr(torch, name)) for name in ("logical_and", "logical_or")},
    "where": lambda a, x: torch.where(x[0], x[1], x[2]),
    "clamp": lambda a, x: torch.clamp(x[0], min=a["lo"], max=a["hi"]),
    "cast": lambda a, x: x[0].to(DTYPES[a["dtype"]]),
    "sum": _reduce(torch.sum),
    "mean": _reduce(torch.mean),
    "logsumexp": _reduce(torch.logsumexp),
    "max": _reduce(torch.amax),
    "min": _reduce(torch.amin),
    "argmax": _arg(torch.argmax),
    "argmin": _arg(torch.argmin),
    "reshape": lambda a, x: x[0].reshape([int(n) for n in a["shape"]]),
    "transpose": lambda a, x: x[0].permute(_axes(a)),
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "broadcast_to": lambda a, x: torch.broadcast_to(x[0], [int(n) for n in a["shape"]]),
    "slice": _slice,
    "concat": lambda a, x: torch.cat(x, dim=int(a["axis"])),
    "constant": lambda a, x: torch.full([int(n) for n in a["shape"]], a["value"], dtype=DTYPES[a["dtype"]]),
}


def evaluate(
    graph: dp.Graph,
    inputs: Mapping[str, np.ndarray],
    wrt: Sequence[str],
    seeds: Mapping[str, np.ndarray],
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
    """(outputs, gradients wrt ``wrt`` of ``sum(out * seed)`` over ``seeds``), as NumPy."""
    env: dict[str, torch.Tensor] = {}
    leaves = {}
    for inp in graph.inputs:
        t = torch.tensor(np.asarray(inputs[inp.name]), requires_grad=inp.name in wrt)
        env[inp.name] = leaves[inp.name] = t
    for node in graph.nodes:
        out = OPS[node.op](dict(node.attrs), [env[i] for i in node.inputs])
        env[node.name] = out.to(DTYPES[node.type.dtype]).reshape(tuple(node.type.shape))
    values = {o.name: env[o.value] for o in graph.outputs}
    grads: dict[str, np.ndarray] = {}
    if wrt:
        terms = [torch.sum(values[k] * torch.tensor(np.asarray(s))) for k, s in seeds.items()]
        total = torch.stack([t.to(torch.float64) for t in terms]).sum() if terms else None
        found: Sequence[torch.Tensor | None] = [None] * len(wrt)
        if total is not None and total.requires_grad:  # else no seeded output reads a wrt input
            found = torch.autograd.grad(total, [leaves[w] for w in wrt], allow_unused=True)
        for w, g in zip(wrt, found, strict=True):
            grads[w] = (torch.zeros_like(leaves[w]) if g is None else g).detach().numpy()
    return {k: v.detach().numpy() for k, v in values.items()}, grads


def compare_with_torch(batch: Batch) -> dict[str, list[str]]:
    """The compiled ``value_and_grad`` of ``batch`` against each graph evaluated in PyTorch
    (the same seeds), with the interpreter's tolerances (`MODERATE_TOLERANCES`, float32's
    where a graph holds float32): id -> mismatches."""
    program = batch.program
    assert program is not None
    feed = batch.feed()
    outs, grads = program.value_and_grad(**feed) if program.loss is not None else (program.run(**feed), {})
    problems: dict[str, list[str]] = {}
    for pid, graph in batch.graphs.items():
        table = mixed_precision(graph, MODERATE_TOLERANCES)
        wrt = list(batch.wrt[pid]) if grads else []
        values, want = evaluate(graph, batch.inputs[pid], wrt, batch.seeds[pid])
        msgs = [mismatch(outs[prefixed(pid, k)], v, f"torch: output {k!r}", table) for k, v in values.items()]
        msgs += [mismatch(grads[prefixed(pid, w)], g, f"torch: gradient wrt {w!r}", table) for w, g in want.items()]
        problems[pid] = [m for m in msgs if m]
    return problems

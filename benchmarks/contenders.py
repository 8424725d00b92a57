"""The contenders of `dpt-ir bench`: each turns a benchmark case into a ``step`` that
computes the loss and its gradient once.

A contender's ``make(case, graph, inputs, device)`` does all one-time work (compiling,
converting inputs, allocating) and returns the step, or None when it has no
implementation of that case. A step returns ``(loss, gradient)`` in the contender's own
array type; `as_numpy` converts them for the correctness check, outside the timings. A
step of a Warp contender also has ``launches()``: its kernel launches per step.
Imports of optional peers (PyTorch, JAX) happen inside ``make``, so a missing peer only
removes its column.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

import dpt_ir as dp
from benchmarks.cases import Case, Inputs

Step = Callable[[], tuple[Any, Any]]
Maker = Callable[[Case, dp.Graph, Inputs, str], Step | None]


@dataclass(frozen=True)
class Contender:
    """One column of the benchmark table. ``requires`` names the modules it imports;
    ``loss_rtol`` is the relative loss tolerance of its correctness check."""

    name: str
    note: str
    make: Maker
    requires: tuple[str, ...] = ()
    loss_rtol: float = 1e-4

    def available(self) -> bool:
        return all(importlib.util.find_spec(module) is not None for module in self.requires)


def as_numpy(value: Any) -> np.ndarray:
    """A float64 NumPy copy of a loss or gradient from any contender."""
    if hasattr(value, "detach"):  # torch
        value = value.detach().cpu()
    if hasattr(value, "numpy") and not isinstance(value, np.ndarray):
        value = value.numpy()  # torch, wp.array
    return np.array(value, dtype=np.float64)


def _program_step(program: Any, case: Case, inputs: Inputs) -> Step:
    def step() -> tuple[Any, Any]:
        out, grads = program.value_and_grad(**inputs)
        return out["loss"], grads[case.wrt]

    step.launches = lambda: program.launch_count  # type: ignore[attr-defined]
    return step


def make_dpt_ir(case: Case, graph: dp.Graph, inputs: Inputs, device: str) -> Step:
    return _program_step(dp.compile(graph, wrt=[case.wrt], device=device), case, inputs)


def make_dpt_ir_unfused(case: Case, graph: dp.Graph, inputs: Inputs, device: str) -> Step:
    return _program_step(dp.compile(graph, wrt=[case.wrt], device=device, fuse=False), case, inputs)


def make_warp_tape(case: Case, graph: dp.Graph, inputs: Inputs, device: str) -> Step | None:
    from benchmarks import unfused_warp

    if case.name not in unfused_warp.BASELINES:
        return None
    tape_graph = unfused_warp.make(case.name, inputs, device=device)
    # Copied out to NumPy, as dpt_ir's value_and_grad returns NumPy arrays (and the tape's
    # adjoints are zeroed for the next step).
    def step() -> tuple[Any, Any]:
        return tape_graph.value_and_grad(to_numpy=True)

    step.launches = lambda: tape_graph.forward_launches + tape_graph.backward_launches  # type: ignore[attr-defined]
    return step


def make_numpy(case: Case, graph: dp.Graph, inputs: Inputs, device: str) -> Step | None:
    from benchmarks import peers_numpy

    fn = peers_numpy.VALUE_AND_GRAD.get(case.name)
    return None if fn is None else (lambda: fn(**inputs))


def make_torch(case: Case, graph: dp.Graph, inputs: Inputs, device: str) -> Step | None:
    from benchmarks import peers_torch

    return _torch_step(peers_torch, case, inputs, device, compiled=False)


def make_torch_compile(case: Case, graph: dp.Graph, inputs: Inputs, device: str) -> Step | None:
    from benchmarks import peers_torch

    return _torch_step(peers_torch, case, inputs, device, compiled=True)


def _torch_step(module: Any, case: Case, inputs: Inputs, device: str, compiled: bool) -> Step | None:
    if case.name not in module.LOSSES:
        return None
    import torch

    torch_device = device if device.startswith("cuda") and torch.cuda.is_available() else "cpu"
    return module.make_value_and_grad(case.name, inputs, case.wrt, compiled=compiled, device=torch_device)


def make_jax(case: Case, graph: dp.Graph, inputs: Inputs, device: str) -> Step | None:
    from benchmarks import peers_jax

    if case.name not in peers_jax.LOSSES:
        return None
    return peers_jax.make_value_and_grad(case.name, inputs, case.wrt)


CONTENDERS: dict[str, Contender] = {
    c.name: c
    for c in (
        Contender("dpt_ir", "dp.compile(...).value_and_grad: fused Warp kernels", make_dpt_ir),
        Contender("dpt_ir-unfused", "the same program with fuse=False: one Warp kernel per op", make_dpt_ir_unfused),
        Contender(
            "warp-tape",
            "hand-written Warp, one kernel per op on a wp.Tape, Warp's adjoints (beer, chain16)",
            make_warp_tape,
            # its sum is a float32 atomic_add over every element: ~1e-2 relative error
            loss_rtol=5e-2,
        ),
        Contender("numpy", "NumPy (SciPy for the blur), backward written by hand", make_numpy),
        Contender("torch", "PyTorch eager, autograd", make_torch, requires=("torch",)),
        Contender("torch.compile", "torch.compile of forward + autograd", make_torch_compile, requires=("torch",)),
        Contender("jax.jit", "jax.jit(jax.value_and_grad(loss))", make_jax, requires=("jax",)),
    )
}

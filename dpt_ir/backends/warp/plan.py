"""Execution plans: the launches of one scheduled graph, bound to buffers allocated once.

A plan owns its workspace (the schedule's buffers, reused across values with disjoint
live ranges), reduction partials and gradient buffers. Steady-state evaluation
allocates no device memory: inputs are bound by reference (or copied into staging
arrays allocated on first use), launches reuse the same buffers.
"""

from __future__ import annotations

from dataclasses import dataclass
from types import ModuleType
from typing import Any

import warp as wp

from dpt_ir.backends.warp.codegen import STATUS, KernelSource
from dpt_ir.contracts import check_names, check_warp_array, host_array, is_warp_array
from dpt_ir.errors import ContractError
from dpt_ir.graph import Graph

WP_DTYPES = {
    "float32": wp.float32,
    "float64": wp.float64,
    "int32": wp.int32,
    "uint8": wp.uint8,
    "bool": wp.bool,
}


@dataclass
class Launch:
    kernel: Any
    dim: int
    params: list[str]
    phase: str


class ExecutionPlan:
    """Launches and buffers of one compiled pipeline (run, value_and_grad or tape)."""

    def __init__(
        self,
        graph: Graph,
        kernels: list[KernelSource],
        module: ModuleType,
        device: str,
        status: wp.array | None,
        grad_outputs: bool = False,
    ) -> None:
        self.graph = graph
        self.device = device
        self.status = status
        phases = {g["id"]: g["phase"] for g in graph.meta["groups"]}
        self.launches = [Launch(getattr(module, k.name), k.dim, k.params, phases[k.group]) for k in kernels]
        self.buffers: dict[str, wp.array] = {}  # flat views, as kernels take them
        self.shaped: dict[str, wp.array] = {}  # output values, in their own shape
        for buf in graph.meta["schedule"]["buffers"]:
            dtype = WP_DTYPES[buf["dtype"]]
            if buf["output"]:
                (value,) = buf["values"]
                shape = graph.types[value].shape or (1,)
                arr = wp.zeros(shape, dtype=dtype, device=device, requires_grad=grad_outputs)
                self.shaped[value] = arr
                self.buffers[value] = arr.flatten()
                continue
            arr = wp.zeros(buf["size"], dtype=dtype, device=device)
            for v in buf["values"]:
                self.buffers[v] = arr
        for k in kernels:
            for p, (dtype, values) in k.constants.items():
                self.buffers[p] = wp.array(values, dtype=getattr(wp, dtype.split(".")[1]), device=device)
            for p, (dtype, size) in k.partials.items():
                if p not in self.buffers:
                    self.buffers[p] = wp.zeros(size, dtype=getattr(wp, dtype.split(".")[1]), device=device)
        # An output whose value is, after the passes, a program or cotangent input (``x * 1.0``;
        # the gradient of ``sum(x * w)`` wrt ``x`` is ``w``) has no kernel writing it: it gets its
        # own array all the same, filled from the bound input when a phase runs (`run`).
        self.copies: dict[str, wp.array] = {}  # input value -> flat view of its output array
        for o in graph.outputs:
            if o.value not in self.shaped and o.value in graph.input_map:
                t = graph.types[o.value]
                arr = wp.zeros(t.shape or (1,), dtype=WP_DTYPES[t.dtype], device=device, requires_grad=grad_outputs)
                self.shaped[o.value] = arr
                self.copies[o.value] = self.buffers[f"$copy:{o.value}"] = arr.flatten()
        self.outputs = {o.name: o.value for o in graph.outputs}
        self.cotangents: dict[str, str] = graph.meta.get("cotangents", {})
        self.gradients: dict[str, str] = graph.meta.get("gradients", {})
        self.staging: dict[str, wp.array] = {}

    # -- arrays --
    def output_array(self, name: str) -> wp.array:
        """The program-owned array of output ``name``, in the output's shape (a scalar
        output is a 1-element array)."""
        return self.shaped[self.outputs[name]]

    def launches_of(self, phase: str) -> list[Launch]:
        return [launch for launch in self.launches if launch.phase == phase]

    def run(self, phase: str, bound: dict[str, wp.array]) -> int:
        """Launch every kernel of ``phase`` with inputs ``bound``; returns the launch count."""
        for value, dst in self.copies.items():
            if value in bound:
                wp.copy(dst, bound[value])
        count = 0
        for launch in self.launches_of(phase):
            if launch.dim == 0:
                continue
            args = [self._resolve(p, bound) for p in launch.params]
            wp.launch(launch.kernel, dim=launch.dim, inputs=args, device=self.device, record_tape=False)
            count += 1
        return count

    def _resolve(self, param: str, bound: dict[str, wp.array]) -> wp.array:
        if param == STATUS:
            return self.status
        if param in bound:
            return bound[param]
        return self.buffers[param]

    # -- inputs --
    def bind(self, values: dict[str, Any], names: dict[str, Any], what: str = "input") -> dict[str, wp.array]:
        """Check user arrays against the declared ``names`` (name -> TensorType) and return
        flat Warp arrays on the plan's device. The checks are `dpt_ir.contracts`' (the same
        as the interpreter's); ContractError names the offending input."""
        check_names(self.graph.name, values, names, what)
        return {n: self._flat(n, values[n], t, what) for n, t in names.items()}

    def _flat(self, name: str, value: Any, t: Any, what: str) -> wp.array:
        if is_warp_array(value):
            return self._check_warp(name, value, t, what)
        arr = host_array(name, value, t, what)
        flat = arr.reshape(-1)
        if self.device == "cpu":
            return wp.array(flat, dtype=WP_DTYPES[t.dtype], device="cpu", copy=False)
        stage = self.staging.get(name)
        if stage is None:
            stage = self.staging[name] = wp.empty(flat.size, dtype=WP_DTYPES[t.dtype], device=self.device)
        wp.copy(stage, wp.array(flat, dtype=WP_DTYPES[t.dtype], device="cpu", copy=False))
        return stage

    def _check_warp(self, name: str, value: wp.array, t: Any, what: str) -> wp.array:
        check_warp_array(name, value, t, what, device=self.device)
        for buf in self.buffers.values():
            if buf.ptr is not None and buf.ptr == value.ptr:
                raise ContractError(
                    f"{what} {name!r}: the array is one of the program's own output or workspace buffers; "
                    "copy it first (an output buffer is overwritten by the next evaluation)"
                )
        return value.reshape((t.size,)) if value.ndim != 1 or value.shape[0] != t.size else value

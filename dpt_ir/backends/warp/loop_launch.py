"""`Replay`: a loop body's launches recorded once and replayed every step.

Assumes: one `ExecutionPlan` and one of its `Workspace`s, used by one loop (one thread at
a time: loop programs serialise their evaluations); a step binds arrays (by value name)
for some of the plan's parameters, the others are the workspace's.
Guarantees: the launches are those of ``plan.run("forward", bound, ws)``, in the same
order, with the same arguments (so the results are bit-identical to it); the kernels'
commands are recorded once (``wp.launch(..., record_cmd=True)``) at the first step, and a
later step only re-sets the parameters whose array is not the one already set (the
carries, the per-step ``xs`` views, the cotangents), from a descriptor packed once per
array and evaluation (`begin` starts one), then replays the commands: no per-step
argument lists, no per-launch argument checks (the arrays a loop binds are its own or
views of checked inputs, of the types the commands were recorded with). A plan this module does not
drive (a segment) keeps `ExecutionPlan.run`.
"""

from __future__ import annotations

from typing import Any

import warp as wp

from dpt_ir.backends.warp.launches import STATUS
from dpt_ir.backends.warp.plan import SCALARS, scalar_argument


class Replay:
    """The forward launches of ``plan`` in workspace ``ws``, recorded at the first `run`."""

    def __init__(self, plan: Any, ws: Any) -> None:
        self.plan = plan
        self.ws = ws
        self.commands: list[Any] = []
        self.params: dict[str, list[tuple[Any, int]]] = {}  # value name -> (command, argument index)
        self.current: dict[str, wp.array] = {}  # value name -> the array its arguments hold now
        self.packed: dict[int, tuple[wp.array, Any]] = {}  # id(array) -> (array, its packed descriptor)

    def begin(self) -> None:
        """Start an evaluation: forget the descriptors packed for the last one's arrays."""
        self.packed = {}

    def _descriptor(self, arr: wp.array) -> Any:
        """``arr``'s kernel-argument descriptor, packed once per evaluation (the array is
        kept alongside, so its id stays its own)."""
        entry = self.packed.get(id(arr))
        if entry is None:
            entry = self.packed[id(arr)] = (arr, arr.__ctype__())
        return entry[1]

    def _array(self, name: str, bound: dict[str, wp.array]) -> wp.array:
        return bound[name] if name in bound else self.ws.buffers[name]

    def _record(self, bound: dict[str, wp.array]) -> None:
        for launch in self.plan.launches_of("forward"):
            if launch.dim == 0:
                continue
            args: list[Any] = []
            named: list[tuple[str, int]] = []
            for index, p in enumerate(launch.params):
                if p in SCALARS:  # a C++ kernel's first task is 0: the replay runs every task on this thread
                    args.append(scalar_argument(p, launch))
                elif p == STATUS:
                    args.append(self.ws.status)
                else:
                    args.append(self._array(p, bound))
                    named.append((p, index))
            command = wp.launch(launch.kernel, dim=launch.dim, inputs=args, device=self.plan.device, record_cmd=True)
            for p, index in named:
                self.params.setdefault(p, []).append((command, index))
            self.commands.append(command)
        self.current = {p: self._array(p, bound) for p in self.params}

    def run(self, bound: dict[str, wp.array]) -> None:
        """One step: ``plan.run("forward", bound, ws)`` through the recorded commands."""
        for value, dst in self.ws.copies.items():  # outputs that are inputs: as ExecutionPlan.run
            if value in bound:
                wp.copy(dst, bound[value])
        if not self.commands:
            self._record(bound)
        else:
            for name, where in self.params.items():
                arr = self._array(name, bound)
                if arr is not self.current[name]:
                    descriptor = self._descriptor(arr)
                    for command, index in where:
                        command.set_param_at_index_from_ctype(index, descriptor)
                    self.current[name] = arr
        for command in self.commands:
            command.launch()

"""Recorded launches: one phase of an `ExecutionPlan`, recorded once for one `Workspace`
and replayed by every later call that checks that workspace out. The one recorded-launch
mechanism: program calls use it, and so does every step of a compiled loop (`Loop` runs
its body and body vjp through `ExecutionPlan.run` in a workspace it holds).

Assumes: the plan's module is built (`ExecutionPlan.ready`); the workspace is used by one
call at a time (`ExecutionPlan.checkout`; a loop holds its own); a call binds, by value
name, an array for every plan input the phase reads, and may bind a value of
``plan.direct_values`` (which falls back to the workspace's own buffer when it does not);
every bound array has the value's declared type (flat, contiguous, of the value's dtype
and size), as a `wp.array` on the plan's device or, on the CPU, a C-contiguous NumPy
array: checked by `ExecutionPlan.bind`, or a loop's own array or a view of a checked one
(a carry, an ``xs`` or ``y`` row, a cotangent).

Guarantees: the launches, their order, their arguments and their task ranges are those of
``wp.launch`` over the phase's launches with the same arrays (one launch per launch, or on
a multi-threaded CPU plan one per `tasks.ranges` range of a task-partitioned kernel, run by
`tasks.SplitLaunch`), so the results are bit-identical to them. The commands are recorded with
``wp.launch(..., record_cmd=True)`` the first time the workspace runs the phase, which is
also when Warp checks every argument's type; the workspace's own buffers stay bound. A CPU
command is replayed as a call of its kernel's entry point with an argument structure built
once (what ``Launch.launch`` rebuilds at every replay); a CUDA command by ``Launch.launch``.
Every descriptor of a value a call may bind (a field of a CPU command's structure, or one
descriptor shared by the CUDA commands) has its data pointer rewritten by `run` before any
command runs, from the call's array or, for a direct value the call does not bind, from the
workspace's buffer: no stale pointer of an earlier call survives into a launch. A replay
packs no arguments and allocates nothing.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.backends.cxx.units import TASK0
from dpt_ir.backends.launches import STATUS, STATUS_BASE
from dpt_ir.backends.warp import tasks
from dpt_ir.backends.warp.buffers import flat_view
from dpt_ir.ir.errors import ContractError

array_t = wp._src.types.array_t


def _data_field_offset() -> int | None:
    """The offset of the data pointer in a NumPy array object (``PyArrayObject.data``, right
    after the object header in NumPy's ABI), where it is found there for arrays and views;
    None otherwise (`address` then asks ``ndarray.ctypes``)."""
    offset = ctypes.sizeof(ctypes.c_ssize_t) + ctypes.sizeof(ctypes.c_void_p)  # ob_refcnt, ob_type
    probes = [np.empty(3), np.zeros((4, 5), np.float32)[1:], np.arange(7)[::2]]
    ok = all(ctypes.c_void_p.from_address(id(a) + offset).value == a.ctypes.data for a in probes)
    return offset if ok else None


_DATA_OFFSET = _data_field_offset()
_pointer_at = ctypes.c_void_p.from_address


def address(value: Any) -> int:
    """The data pointer of a bound array (a `wp.array` or a NumPy array). A NumPy array's is read
    from its object (`_data_field_offset`): ``ndarray.ctypes.data`` builds a helper object per
    call, about 1.2 us here, which at a small size was a fifth of a call's time."""
    if type(value) is np.ndarray and _DATA_OFFSET is not None:
        return _pointer_at(id(value) + _DATA_OFFSET).value or 0
    if isinstance(value, np.ndarray):
        return value.ctypes.data
    return value.ptr or 0


class RecordedPhase:
    """The launches of ``phase`` of ``plan`` in workspace ``ws``, recorded with the arrays of
    the first call's ``bound``. ``count``: the plan's launches it runs (a split launch counts once)."""

    def __init__(self, plan: Any, phase: str, ws: Any, bound: Mapping[str, Any]) -> None:
        self.targets: dict[str, list[Any]] = {}  # value name -> the descriptors that bind it
        self.fallback: dict[str, int] = {}  # direct value -> the workspace buffer's pointer
        self.modules: list[Any] = []  # the loaded modules the commands run, held loaded
        self.steps: list[Callable[[], None]] = []
        # Each step as a native entry point or split launch, for a loop that replays the phase
        # from native code (`dpt_ir.runtime.loop_native`); None where a step is not one (CUDA).
        natives: list[tasks.Part | tasks.SplitLaunch | None] = []
        launches = plan.launches_of(phase)
        self.count = len(launches)
        for launch in launches:
            split = plan.threads > 1 and launch.dim > 1 and TASK0 in launch.params
            parts = tasks.ranges(launch.dim, plan.threads) if split else [(0, launch.dim)]
            steps = [self._record(plan, launch, ws, bound, first, count) for first, count in parts]
            if len(steps) == 1:
                part = steps[0] if isinstance(steps[0], tasks.Part) else None
                self.steps.append(part.call if part is not None else steps[0])
                natives.append(part)
            else:
                self.steps.append(tasks.SplitLaunch(_entry_points(launch, steps), plan.threads, self.modules[-1]))
                natives.append(self.steps[-1])
        self.natives = natives if all(n is not None for n in natives) else None
        self.names = list(self.targets.items())

    def _record(
        self, plan: Any, launch: Any, ws: Any, bound: Mapping[str, Any], first: int, count: int
    ) -> tasks.Part | Callable[[], None]:
        args: list[Any] = []
        shared: list[tuple[int, str]] = []
        for index, p in enumerate(launch.params):
            if p == STATUS_BASE:
                args.append(launch.status_base)
            elif p == TASK0:
                args.append(first)
            elif p == STATUS:
                args.append(ws.status)
            elif p in plan.rebindable:
                args.append(_as_warp(bound[p]) if p in bound else ws.buffers[p])
                shared.append((index, p))
                if p in ws.buffers:
                    self.fallback[p] = ws.buffers[p].ptr or 0
            else:
                args.append(ws.buffers[p])
        command = wp.launch(launch.kernel, dim=count, inputs=args, device=plan.device, record_cmd=True)
        self.modules.append(command.module_exec)
        if plan.device == "cpu" and command.block_dim == 1:
            return self._entry_point(command, shared)
        for index, p in shared:  # one private descriptor per value, shared by its commands
            if p not in self.targets:
                desc = array_t.from_buffer_copy(command.params[index + 1])
                desc.grad, desc.flags = 0, 0  # the generated kernels have no adjoint
                self.targets[p] = [desc]
            command.set_param_at_index_from_ctype(index, self.targets[p][0])
        return command.launch

    def _entry_point(self, command: Any, shared: list[tuple[int, str]]) -> tasks.Part:
        """A CPU command as a call of its kernel's entry point with one argument structure,
        built here once (``Launch.launch`` builds the same structure from its parameters at
        every replay); the fields of the values a call binds are its targets. The command
        itself is dropped: it holds the first call's arrays."""
        fields = [(a.label, type(v)) for a, v in zip(command.kernel.adj.args, command.params[1:], strict=True)]
        arguments = type("Arguments", (ctypes.Structure,), {"_fields_": fields})(*command.params[1:])
        for index, p in shared:
            view = getattr(arguments, fields[index][0])  # a view into ``arguments``
            view.grad, view.flags = 0, 0  # the generated kernels have no adjoint
            self.targets.setdefault(p, []).append(view)
        return tasks.Part(command.hooks.forward, command.bounds, arguments)

    def run(self, bound: Mapping[str, Any]) -> int:
        """Point every target descriptor at this call's array (or the workspace's), then
        replay the commands; returns `count`. A NumPy array's pointer is `address`'s, read here
        without its call (a 64² product's call spent 1.0 us on its three values)."""
        for name, targets in self.names:
            value = bound.get(name)
            if value is None:
                ptr = self.fallback[name]
            elif type(value) is np.ndarray and _DATA_OFFSET is not None:
                ptr = _pointer_at(id(value) + _DATA_OFFSET).value or 0
            else:
                ptr = address(value)
            for desc in targets:
                desc.data = ptr
        for step in self.steps:
            step()
        return self.count


def _as_warp(value: Any) -> wp.array:
    """A record-time view of a bound array as a `wp.array` (NumPy arrays on the CPU, as
    `buffers.flat_view`: 2-D past Warp's per-axis limit), so that ``wp.launch`` checks its
    type against the kernel's parameter once."""
    if isinstance(value, np.ndarray):
        return flat_view(value, value.size)
    return value


def _entry_points(launch: Any, steps: list[tasks.Part | Callable[[], None]]) -> list[tasks.Part]:
    """The ranges of a split launch, each a CPU entry point (a C++ kernel's CPU command has a
    block of one thread, so `_record` makes every one a `tasks.Part`)."""
    parts = [s for s in steps if isinstance(s, tasks.Part)]
    if len(parts) != len(steps):
        raise ContractError(
            f"launch of kernel {launch.kernel.key!r}: expected every range of a split CPU launch to be an"
            f" entry point, found {len(steps) - len(parts)} of {len(steps)} that are not"
        )
    return parts

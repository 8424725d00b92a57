"""Execution plans: the launches of one scheduled graph, and the workspaces they run in.

A plan is immutable after construction (its launches and the layout of its buffers); the
arrays a call writes live in a `Workspace`: the schedule's buffers (reused across values
with disjoint live ranges), reduction partials, output and gradient arrays, staging arrays
for numpy inputs on CUDA, and the status word. A call checks a workspace out of the plan's
pool and returns it after (`ExecutionPlan.workspace`), so concurrent calls never share
arrays. The pool starts empty: `dp.compile` allocates no data-sized array. The first call
allocates a workspace (and the constant tables), and the pool grows only when calls
overlap; a single-threaded steady state therefore allocates no device memory after the
first call. A workspace that cannot be allocated is a ContractError naming the program, the
bytes asked for and the device (`ExecutionPlan.checkout`): the shapes the program was
compiled for do not fit the device, which is what the user gave; nothing has run.

A plan's Warp module is built on the plan's first launch (`ExecutionPlan.ready`), not when
the plan is made: its launches, counts and workspaces exist before, their kernels after.
"""

from __future__ import annotations

import math
import threading
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.backends.launches import KernelSource, StatusSlot
from dpt_ir.backends.warp.buffers import copy_into, flat_view, flat_zeros, host_view, shaped_view
from dpt_ir.backends.warp.spelling import AXIS_LIMIT, array_shape
from dpt_ir.ir import records
from dpt_ir.ir.contracts import check_names, check_warp_array, host_array, is_warp_array
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import Schedule, plan_of
from dpt_ir.runtime.modules import GeneratedModule
from dpt_ir.runtime.recorded import RecordedPhase

WP_DTYPES = {
    "float32": wp.float32,
    "float64": wp.float64,
    "int32": wp.int32,
    "uint8": wp.uint8,
    "bool": wp.bool,
}


@dataclass
class Launch:
    """One launch: the (possibly shared) Warp kernel (``function`` in the plan's module;
    ``kernel`` once the module is built, `ExecutionPlan.ready`), the buffers this launch
    binds to its parameters, and where its flags start in the status word."""

    name: str
    function: str
    dim: int
    params: list[str]
    phase: str
    status_base: int = 0
    kernel: Any = None


class Workspace:
    """The arrays one call of a plan writes: flat views as kernels take them (``buffers``),
    outputs in their own shape (``shaped``), output copies of inputs (``copies``), CUDA
    staging arrays (``staging``) and the status word (None without checks), whose flags
    ``slots`` describes; each phase's launches once recorded here (``phases``, by
    `ExecutionPlan.run`). On the CPU, NumPy views of the status word (``flags``) and of the
    outputs in their declared shapes (``host``), made once."""

    def __init__(self, plan: ExecutionPlan) -> None:
        graph, device = plan.graph, plan.device
        self.slots = plan.slots
        self.buffers: dict[str, wp.array] = {}
        self.shaped: dict[str, wp.array] = {}
        self.copies: dict[str, wp.array] = {}  # input value -> flat view of its output array
        self.staging: dict[str, wp.array] = {}
        self.phases: dict[str, RecordedPhase] = {}
        self.host_run: Any = None  # `runtime.host_run.host_run`, made by the first `run` or `value_and_grad` here
        self.status = wp.zeros(plan.status_size, dtype=wp.int32, device=device) if plan.status_size else None
        cpu = device == "cpu"
        self.flags = self.status.numpy() if cpu and self.status is not None else None
        self._clear = bytes(4 * plan.status_size)
        for buf in plan_of(graph).scheduled().buffers:
            dtype = WP_DTYPES[buf.dtype]
            if buf.output:
                (value,) = buf.values
                shape = graph.types[value].shape or (1,)
                self.shaped[value], self.buffers[value] = _output(shape, dtype, device, plan.grad_outputs)
                continue
            arr = flat_zeros(buf.size, dtype, device)
            for v in buf.values:
                self.buffers[v] = arr
        self.buffers.update(plan.constants)  # read-only: shared by every workspace
        for k in plan.kernels:
            for p, (dtype, size) in k.partials.items():
                if p not in self.buffers:
                    self.buffers[p] = wp.zeros(size, dtype=getattr(wp, dtype), device=device)
        # An output whose value is, after the passes, a program or cotangent input (``x * 1.0``;
        # the gradient of ``sum(x * w)`` wrt ``x`` is ``w``) has no kernel writing it: it gets its
        # own array all the same, filled from the bound input when a phase runs (`ExecutionPlan.run`).
        for o in graph.outputs:
            if o.value not in self.shaped and o.value in graph.input_map:
                t = graph.types[o.value]
                shaped, flat = _output(t.shape or (1,), WP_DTYPES[t.dtype], device, plan.grad_outputs)
                self.shaped[o.value] = shaped
                self.copies[o.value] = self.buffers[f"$copy:{o.value}"] = flat
        self.host = {v: self._host(v, graph.types[v].shape) for v in self.shaped} if cpu else {}

    def _host(self, value: str, shape: tuple[int, ...]) -> np.ndarray:
        """The NumPy view of output ``value``'s array (CPU), in its declared shape."""
        flat = self.copies.get(value, self.buffers.get(value))
        return host_view(flat, shape) if flat.size > AXIS_LIMIT else self.shaped[value].numpy().reshape(shape)

    def clear_status(self) -> None:
        """Lower every flag of the status word (before a phase runs)."""
        if self.flags is not None:
            self.flags.fill(0)
        elif self.status is not None:
            self.status.zero_()

    def raised(self) -> list[int]:
        """The indices of the raised flags of the status word (none without checks); they
        stay raised."""
        if self.flags is not None:
            return [] if self.flags.tobytes() == self._clear else np.flatnonzero(self.flags).tolist()
        return [] if self.status is None else np.flatnonzero(self.status.numpy()).tolist()


class ExecutionPlan:
    """Launches of one compiled pipeline (run, value_and_grad or tape) and its pool of
    workspaces. Thread-safe: `workspace` hands each call its own arrays, and the first
    launches of concurrent calls build the module once (`ready`).

    ``slots``: the status flags of the plan's module (its launches' ``status_base`` index
    them); ``checks`` False: compiled without a status word."""

    def __init__(
        self,
        graph: Graph,
        kernels: list[KernelSource],
        module: GeneratedModule,
        device: str,
        slots: list[StatusSlot],
        checks: bool,
        grad_outputs: bool = False,
        threads: int = 1,
    ) -> None:
        self.graph = graph
        self.device = device
        self.kernels = kernels
        self.module = module
        self.slots = slots
        self.status_size = max(len(slots), 1) if checks else 0  # 0: compiled without checks
        self.grad_outputs = grad_outputs
        self.threads = threads if device == "cpu" else 1
        self._constants: dict[str, wp.array] | None = None  # made with the first workspace
        self._tables_lock = threading.Lock()
        kplan = plan_of(graph)
        phases = {g.id: g.phase for g in kplan.groups}
        self.launches = [Launch(k.name, k.function, k.dim, k.params, phases[k.group], k.status_base) for k in kernels]
        self.direct_values = _direct_values(graph, kplan.scheduled(), self.launches)
        # The values a call binds arrays for (`run`'s ``bound``): the inputs (and cotangents), and
        # the direct values; the recorded launches re-point exactly these at every call.
        self.rebindable = frozenset(graph.input_map) | self.direct_values
        self._phases = {
            phase: tuple(launch for launch in self.launches if launch.phase == phase and launch.dim > 0)
            for phase in dict.fromkeys(launch.phase for launch in self.launches)
        }
        self._ready = False
        self.outputs = {o.name: o.value for o in graph.outputs}
        self.cotangents: dict[str, str] = records.cotangents(graph)
        self.gradients: dict[str, str] = records.gradients(graph)
        # The gradients a CPU call gives fresh arrays of their own (`runtime._direct_results`).
        gradient_values = dict.fromkeys(self.outputs[g] for g in self.gradients.values())
        self.direct_gradients = tuple(v for v in gradient_values if v in self.direct_values and device == "cpu")
        # The outputs a CPU `run` gives fresh arrays of their own, the same way.
        output_values = dict.fromkeys(self.outputs.values())
        self.direct_run_outputs = tuple(v for v in output_values if v in self.direct_values and device == "cpu")
        # Each such value's shape and NumPy dtype, resolved once (`np.empty` of a dtype name parses it)
        self.fresh = {
            v: (graph.types[v].shape, np.dtype(graph.types[v].dtype))
            for v in (*self.direct_gradients, *self.direct_run_outputs)
        }
        self._lock = threading.Lock()
        self._all: weakref.WeakSet[Workspace] = weakref.WeakSet()  # every live workspace (alias checks)
        self._free: list[Workspace] = []  # allocated at the first call, not at compile
        self._host_specs: dict[str, tuple[Any, tuple[int, ...], np.dtype, tuple[int, ...]]] = {}  # `bind`'s

    # -- workspaces --
    @property
    def constants(self) -> dict[str, wp.array]:
        """The launches' constant tables (parameter -> array on the plan's device, shared by
        every workspace: read-only), made at the first use."""
        with self._tables_lock:  # concurrent first calls make them once
            if self._constants is None:
                made: dict[int, wp.array] = {}  # launches binding one (shared) NumPy array share its wp.array
                out: dict[str, wp.array] = {}
                for k in self.kernels:
                    for p, (dtype, values) in k.constants.items():
                        if id(values) not in made:
                            made[id(values)] = wp.array(
                                values, dtype=getattr(wp, dtype), device=self.device
                            )
                        out[p] = made[id(values)]
                self._constants = out
            return self._constants

    def workspace_bytes(self) -> int:
        """The bytes one workspace allocates: the schedule's buffers, the reduction partials,
        the output copies of inputs and the status word (the constant tables come once)."""
        graph = self.graph
        total = sum(b.size * np.dtype(b.dtype).itemsize for b in plan_of(graph).scheduled().buffers)
        partials = {p: v for k in self.kernels for p, v in k.partials.items()}
        total += sum(size * np.dtype(dtype).itemsize for dtype, size in partials.values())
        copies = {o.value for o in graph.outputs if o.value in graph.input_map}
        total += sum(graph.types[v].size * np.dtype(graph.types[v].dtype).itemsize for v in copies)
        return total + 4 * self.status_size

    def _new_workspace(self) -> Workspace:
        try:
            ws = Workspace(self)
        except (MemoryError, RuntimeError) as exc:  # Warp's allocators raise RuntimeError
            raise ContractError(
                f"program {self.graph.name!r}: could not allocate its workspace of {self.workspace_bytes()} bytes "
                f"on device {self.device!r} ({type(exc).__name__}: {exc}); expected a device with that much free "
                "memory: compile smaller shapes, or free memory"
            ) from None
        with self._lock:
            self._all.add(ws)
        return ws

    def checkout(self) -> Workspace:
        """A workspace no other call uses: a free one from the pool, else a new one (the
        only allocation, when calls overlap). Give it back with `checkin`. The pool is a list
        whose ``pop`` and ``append`` are each atomic under the GIL, so no lock is taken on a
        call's path: two threads never pop the same workspace."""
        try:
            return self._free.pop()
        except IndexError:
            return self._new_workspace()

    def checkin(self, ws: Workspace) -> None:
        """Return ``ws`` to the pool; the caller no longer reads or writes its arrays."""
        self._free.append(ws)

    def workspace(self) -> Lease:
        """A workspace checked out for a ``with`` block and returned after it, even on error."""
        return Lease(self)

    def owned_arrays(self) -> Iterator[wp.array]:
        """Every array of every live workspace, for `bind`'s refusal of a program-owned
        array as an input."""
        with self._lock:
            spaces = list(self._all)
        for ws in spaces:
            yield from ws.buffers.values()

    # -- launches --
    def ready(self) -> None:
        """Build the plan's module if it is not built yet, and bind each launch's kernel.
        Called before every run; after the first, a flag read."""
        if self._ready:
            return
        module = self.module.built()
        with self._lock:
            for launch in self.launches:
                launch.kernel = getattr(module, launch.function)
            self._ready = True

    def launches_of(self, phase: str) -> tuple[Launch, ...]:
        """The launches of ``phase`` that run (launch size above 0), in order."""
        return self._phases.get(phase, ())

    def ready_to_bind(self, bound: dict[str, Any]) -> None:
        """`ready`, and every value of ``bound`` is one a run may rebind (an input)."""
        self.ready()
        if not self.rebindable.issuperset(bound):
            unknown = sorted(set(bound) - self.rebindable)
            raise ContractError(f"plan of {self.graph.name!r}: values {unknown} cannot be bound (not inputs)")

    def run(self, phase: str, bound: dict[str, Any], ws: Workspace) -> int:
        """Launch every kernel of ``phase`` with the arrays ``bound`` (value name -> a
        `wp.array` on the plan's device or, on the CPU, a C-contiguous NumPy array, of the
        value's type: `bind`'s, or a loop step's) in workspace ``ws``, through the launches
        recorded for ``ws`` (`RecordedPhase`, recorded at its first run of the phase);
        returns the launch count."""
        return self.recorded_phase(phase, bound, ws).run(bound)

    def recorded_phase(
        self, phase: str, bound: dict[str, Any], ws: Workspace, copy: Callable[[Any, Any, int], None] = copy_into
    ) -> RecordedPhase:
        """What `run` does before it launches: checks ``bound`` (`ready_to_bind`), ``copy``s
        each bound input that ``ws`` holds a copy of (``copy(dst, src, elements)``; a native
        loop records it instead), and returns ``ws``'s recorded ``phase``, recording it at
        its first use."""
        self.ready_to_bind(bound)
        for value, dst in ws.copies.items():
            if value in bound:
                copy(dst, bound[value], self.graph.types[value].size)
        recorded = ws.phases.get(phase)
        if recorded is None:
            recorded = ws.phases[phase] = RecordedPhase(self, phase, ws, bound)
        return recorded

    def direct_outputs(self, names: list[str]) -> dict[int, str]:
        """The outputs ``names`` (by position) whose value is a direct value (`_direct_values`),
        to their values: a caller that binds each to a destination of its own gets it written
        there, and copies the others out of the workspace."""
        return {k: v for k, v in enumerate(self.outputs[n] for n in names) if v in self.direct_values}

    def output_array(self, name: str, ws: Workspace) -> wp.array:
        """The array of output ``name`` in ``ws``, in the output's shape (a scalar output is
        a 1-element array)."""
        return ws.shaped[self.outputs[name]]

    def output_copy(self, name: str, ws: Workspace) -> np.ndarray:
        """A host copy of output ``name`` in ``ws``, in its declared shape."""
        value = self.outputs[name]
        view = ws.host.get(value)
        if view is None:  # a device array: read back
            view = ws.shaped[value].numpy().reshape(self.graph.types[value].shape)
        return view.copy()

    # -- inputs --
    def bind(self, values: dict[str, Any], names: dict[str, Any], ws: Workspace, what: str = "input") -> dict[str, Any]:
        """Check user arrays against the declared ``names`` (name -> TensorType) and return
        what `run` binds: flat Warp arrays on the plan's device, or on the CPU the checked
        C-contiguous NumPy arrays themselves (NumPy inputs for CUDA are staged into ``ws``).
        The checks are `dpt_ir.ir.contracts`' (the same as the interpreter's); ContractError
        names the offending input. On the CPU, a NumPy array of the type's shape, dtype and C
        strides (so C-contiguous) is bound as it is, the case `host_array` returns as it is,
        without its call: the type's shape, dtype and strides are resolved once per input
        (``_host_specs``; a 64² product's call spent 1.5 us here, 0.3 per input in calls)."""
        check_names(self.graph.name, values, names, what)
        if self.device != "cpu":
            return {n: self._flat(n, values[n], t, what, ws.staging) for n, t in names.items()}
        out: dict[str, Any] = {}
        specs = self._host_specs
        for n, t in names.items():
            value = values[n]
            spec = specs.get(n)
            if spec is None or spec[0] is not t:
                spec = specs[n] = _host_spec(t)
            _, shape, dtype, strides = spec
            if type(value) is np.ndarray and value.shape == shape and value.strides == strides and value.dtype == dtype:
                out[n] = value
            else:
                out[n] = self._flat(n, value, t, what, ws.staging)
        return out

    def _flat(self, name: str, value: Any, t: Any, what: str, staging: dict[str, wp.array]) -> Any:
        if type(value) is not np.ndarray and is_warp_array(value):  # the NumPy case first: the common one
            return self._check_warp(name, value, t, what)
        arr = host_array(name, value, t, what)
        if self.device == "cpu":
            return arr
        stage = staging.get(name)
        if stage is None:
            stage = staging[name] = wp.empty(array_shape(t.size), dtype=WP_DTYPES[t.dtype], device=self.device)
        copy_into(stage, arr, t.size)
        return stage

    def _check_warp(self, name: str, value: wp.array, t: Any, what: str) -> wp.array:
        check_warp_array(name, value, t, what, device=self.device)
        for buf in self.owned_arrays():
            if buf.ptr is not None and buf.ptr == value.ptr:
                raise ContractError(
                    f"{what} {name!r}: the array is one of the program's own output or workspace buffers; "
                    "copy it first (an output buffer is overwritten by the next evaluation)"
                )
        return flat_view(value, t.size)


def _host_spec(t: Any) -> tuple[Any, tuple[int, ...], np.dtype, tuple[int, ...]]:
    """``t`` (a TensorType), its shape, its NumPy dtype and the C strides of that shape."""
    dtype = np.dtype(t.dtype)
    strides, step = [], dtype.itemsize
    for d in reversed(t.shape):
        strides.append(step)
        step *= d
    return t, t.shape, dtype, tuple(reversed(strides))


class Lease:
    """``with plan.workspace() as ws``: `ExecutionPlan.checkout` on entry, `checkin` on exit
    (a class, not a generator: it is on every call's path)."""

    __slots__ = ("plan", "ws")

    def __init__(self, plan: ExecutionPlan) -> None:
        self.plan = plan

    def __enter__(self) -> Workspace:
        self.ws = self.plan.checkout()
        return self.ws

    def __exit__(self, *exc: object) -> None:
        self.plan.checkin(self.ws)


def _direct_values(graph: Graph, schedule: Schedule, launches: list[Launch]) -> frozenset[str]:
    """The values a call may bind to an array of its own instead of the workspace's buffer,
    so that the kernels write them there: each is launched, has a buffer of its own (a
    graph output's) and is the value of exactly one output (binding it moves that output
    alone). The one rule for every caller that binds results: `runtime._direct_results`
    (fresh gradient arrays), a loop step (its carries and ``y`` rows, `Loop`), and the
    recorded launches, which re-point these (and the inputs) at every call and fall back
    to the workspace's buffer when a call binds none (`RecordedPhase`)."""
    own = {b.id for b in schedule.buffers if b.output}
    launched = {p for launch in launches for p in launch.params}
    named = [o.value for o in graph.outputs]
    return frozenset(v for v in launched if schedule.assignment.get(v) in own and named.count(v) == 1)


def _output(shape: tuple[int, ...], dtype: Any, device: Any, grad: bool) -> tuple[wp.array, wp.array]:
    """An output's array in ``shape`` and its flat kernel view (`buffers`: past Warp's
    per-axis limit, a padded flat buffer and a view of it in ``shape``, without a gradient)."""
    if math.prod(shape) <= AXIS_LIMIT:
        arr = wp.zeros(shape, dtype=dtype, device=device, requires_grad=grad)
        return arr, arr.flatten()
    flat = flat_zeros(math.prod(shape), dtype, device, requires_grad=grad)
    return shaped_view(flat, shape), flat

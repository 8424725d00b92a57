"""``plan.json`` of a CUDA bundle: the versioned contract between `dpt_ir.export` (which
writes it) and ``benchmarks/gpu_check.py`` (which reads it with NumPy alone).

Assumes nothing about the reader beyond JSON. Guarantees: a `Bundle` is validated on
construction (unknown fields refused, roles and dtypes from fixed sets, every launch
argument naming a buffer of its plan's table, status bases inside the status word);
`BUNDLE_VERSION` changes whenever a field changes meaning, and the runner refuses any
other version.

Buffers are flat arrays of ``size`` elements (``shape`` is the logical shape of what they
hold). A plan is an ordered list of stages over its one buffer table; the status word is
cleared before each stage and read after it, as `dpt_ir.runtime.program.Program` reads it after
each checkpoint and a loop program after each segment and loop node. A `SegmentStage` runs
its launches once; a `LoopStage` (`dpt_ir.export.stages`) runs its body's launches once per
step, moving carries, ``xs`` rows and ``ys`` rows with `Copy` slices, and a ``scan_vjp``
replays its checkpoint schedule (`dpt_ir.ops.revolve.Action`s) with the body vjp's launches.
Version 2 made plans stage lists (version 1: one launch list with ``checkpoints``).
"""

from __future__ import annotations

from typing import Annotated, Literal

from pydantic import Field, model_validator

from dpt_ir.ir.types import FrozenModel

BUNDLE_FORMAT = "dpt_ir.cuda_bundle"
BUNDLE_VERSION = 2
Role = Literal["input", "cotangent", "output", "gradient", "saved", "workspace", "partial", "status", "constant"]
Dtype = Literal["float32", "float64", "int32", "uint8", "bool", "uint32"]


class _Model(FrozenModel):
    """Frozen, no extra fields; a bad field raises ContractError; `FrozenModel.with_` for a
    validated update."""


class BufferSpec(_Model):
    """One array a plan binds: inputs and cotangents are uploaded (from ``ref.npz`` or a
    seed), constants (a launch's sparse rows or scatter table) from ``ref.npz`` field
    ``constant/<plan>/<name>``, the others allocated zeroed."""

    name: str
    role: Role
    dtype: Dtype
    shape: list[int]
    size: int = Field(ge=1)


class LaunchSpec(_Model):
    """One launch: ``kernel`` names the C++ unit; its entry points in ``kernels.cu`` are
    ``k_<kernel>`` (``extern "C" __global__``, thread ``t`` < ``dim``) and ``h_<kernel>``
    (host, tasks ``[t0, t1)``). ``args``: the buffers bound to its pointer parameters, in
    order; the status word and ``status_base`` follow them. ``host_tasks``: the tasks of the
    unit's CPU driver (its CPU partition; ``dim``, the CUDA threads, is the CUDA driver's)."""

    name: str
    kernel: str
    group: str
    ops: list[str]
    phase: Literal["forward", "backward"]
    dim: int = Field(ge=0)
    host_tasks: int = Field(ge=0)
    grid: int = Field(ge=0)
    block: int = Field(ge=1)
    args: list[str]
    status_base: int = Field(ge=0)


class Copy(_Model):
    """``dst[dst_at + i * dst_step : ... + size] = src[src_at + i * src_step : ... + size]`` at
    step ``i`` of a loop (``i`` is 0 outside one): a carry, an ``xs`` or ``ys`` row, an
    output that is an input after the passes."""

    dst: str
    src: str
    size: int = Field(ge=1)
    dst_at: int = Field(default=0, ge=0)
    dst_step: int = Field(default=0, ge=0)
    src_at: int = Field(default=0, ge=0)
    src_step: int = Field(default=0, ge=0)


class Launches(_Model):
    """One piece's launches in order (a plan, a segment, a loop body or body vjp), after its
    ``copies`` (an output that is, after the passes, an input: filled from it first, as
    `ExecutionPlan.run` does)."""

    piece: str
    launches: list[LaunchSpec]
    copies: list[Copy] = []


class SegmentStage(_Model):
    """Launches run once (a whole ordinary plan, one of its checkpoints' phases, or a loop
    program's segment of ordinary nodes)."""

    kind: Literal["segment"]
    name: str
    run: Launches


class Action(_Model):
    """One step of a reverse sweep's schedule, `dpt_ir.ops.revolve.Action` as the runtime runs
    it: ``store`` the current carry in ``slot``, ``restore`` it from ``slot`` (0: the initial
    carry), ``advance`` ``count`` body steps from step ``at``, ``reverse``: step ``at``'s vjp."""

    kind: Literal["store", "restore", "advance", "reverse"]
    at: int = Field(ge=0)
    slot: int = Field(default=0, ge=0)
    count: int = Field(default=0, ge=0)


class LoopStage(_Model):
    """A ``scan`` (``op`` scan) or its reverse (``scan_vjp``), as `dpt_ir.runtime.loop.Loop`
    runs it. The current carry starts as ``init``; a body step copies it into ``carry_in``,
    applies ``feed`` (``xs`` rows, the step index), runs ``body`` and makes ``carry_out`` the
    current carry. ``scan``: ``length`` steps, ``emit`` after each (``ys`` rows into the packed
    result), ``keep[i]`` <- the carry after step ``i`` (``i < length - 1``) when the reverse
    reads the forward's carries, then ``final``. ``scan_vjp``: ``zero`` cleared and ``begin``
    copied first, then ``actions`` in order (``slots[k - 1]`` holds slot ``k``); a ``reverse`` at
    step ``i`` copies the current carry into ``vjp_carry_in``, applies ``vjp_feed``, runs ``vjp``
    and then ``after_vjp``; ``final`` last."""

    kind: Literal["loop"]
    name: str
    node: str
    op: Literal["scan", "scan_vjp"]
    length: int = Field(ge=1)
    body: Launches
    init: list[str]
    carry_in: list[str]
    carry_out: list[str]
    feed: list[Copy] = []
    emit: list[Copy] = []
    keep: list[list[str]] = []
    final: list[Copy] = []
    vjp: Launches | None = None
    vjp_carry_in: list[str] = []
    vjp_feed: list[Copy] = []
    after_vjp: list[Copy] = []
    zero: list[str] = []
    begin: list[Copy] = []
    slots: list[list[str]] = []
    actions: list[Action] = []
    policy: str = ""  # the schedule's policy, as saved.txt states it


Stage = Annotated[SegmentStage | LoopStage, Field(discriminator="kind")]


class Result(_Model):
    """A value the plan returns: ``key`` in ``ref.npz`` is ``<plan>/<key>``."""

    key: str
    buffer: str
    shape: list[int]


class PlanSpec(_Model):
    name: Literal["run", "value_and_grad", "tape"]
    buffers: list[BufferSpec]
    stages: list[Stage]
    results: list[Result]
    cotangents: dict[str, str] = {}  # output name -> cotangent buffer (tape)
    bytes_moved: int = Field(ge=0)  # each bound input, output and saved buffer once: the traffic floor
    expect_flags: bool = False  # the reference run raised a NumericalError: flags, not values, are checked

    def launches(self) -> list[LaunchSpec]:
        """Every launch of the plan's pieces (each once, however many steps run it)."""
        out = []
        for s in self.stages:
            out += s.run.launches if isinstance(s, SegmentStage) else s.body.launches
            if isinstance(s, LoopStage) and s.vjp is not None:
                out += s.vjp.launches
        return out

    @model_validator(mode="after")
    def _bound(self) -> PlanSpec:
        names = {b.name for b in self.buffers}
        for launch in self.launches():
            missing = [a for a in launch.args if a not in names]
            if missing:
                raise ValueError(f"launch {launch.name!r} binds {missing}, which the buffer table lacks")
        for r in self.results:
            if r.buffer not in names:
                raise ValueError(f"result {r.key!r} reads buffer {r.buffer!r}, which the buffer table lacks")
        return self


class StatusSpec(_Model):
    index: int = Field(ge=0)
    kernel: str
    node: str
    op: str
    kind: Literal["domain", "nonfinite"]
    message: str


class InputSpec(_Model):
    """A graph input: shipped in ``ref.npz`` as ``input/<name>`` (``seed`` None), or drawn on
    the device: ``numpy.random.default_rng(seed).random(size, dtype=float32)`` scaled to
    ``[low, high)`` (then cast: an integer input truncates toward zero), checked against
    ``ref.npz``'s ``input/<name>@sum`` (a float64 sum)."""

    name: str
    dtype: Dtype
    shape: list[int]
    seed: int | None = None
    low: float = 0.0
    high: float = 1.0


class Tolerance(_Model):
    """The CPU tests' comparison: ``|a - e| <= atol + rtol |e|``, ``atol`` = ``atol_rel``
    times the reference's largest finite magnitude (``tests/backend/harness.py``)."""

    rtol: float
    atol_rel: float


class Bundle(_Model):
    format: Literal["dpt_ir.cuda_bundle"] = BUNDLE_FORMAT
    version: int
    graph: str
    dpt_ir: str
    checks: bool
    inputs: list[InputSpec]
    status_size: int = Field(ge=0)
    status: list[StatusSpec]
    plans: list[PlanSpec]
    tolerance: Tolerance
    reference: Literal["interpreter", "program"] = "interpreter"  # what computed ref.npz's results

    @model_validator(mode="after")
    def _slots(self) -> Bundle:
        for plan in self.plans:
            for launch in plan.launches():
                if self.status_size and launch.status_base > self.status_size:
                    raise ValueError(f"launch {launch.name!r}: status base {launch.status_base} > {self.status_size}")
        return self

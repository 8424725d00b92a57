"""``plan.json`` of a CUDA bundle: the versioned contract between `dpt_ir.export` (which
writes it) and ``benchmarks/gpu_check.py`` (which reads it with NumPy alone).

Assumes nothing about the reader beyond JSON. Guarantees: a `Bundle` is validated on
construction (unknown fields refused, roles and dtypes from fixed sets, every launch
argument naming a buffer of its plan's table, status bases inside the status word);
`BUNDLE_VERSION` changes whenever a field changes meaning, and the runner refuses any
other version.

Buffers are flat arrays of ``size`` elements (``shape`` is the logical shape of what they
hold); a plan's launches run in order, and the status word is cleared before each
checkpoint's phases and read after them, as `dpt_ir.runtime.Program` does.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

BUNDLE_FORMAT = "dpt_ir.cuda_bundle"
BUNDLE_VERSION = 1
Role = Literal["input", "cotangent", "output", "gradient", "saved", "workspace", "partial", "status", "constant"]
Dtype = Literal["float32", "float64", "int32", "uint8", "bool", "uint32"]


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BufferSpec(_Model):
    """One array a plan binds: inputs and cotangents are uploaded (from ``ref.npz`` or a
    seed), constants (a launch's sparse rows or scatter table) from ``ref.npz`` field
    ``constant/<plan>/<name>``, the others allocated zeroed; ``copy_of``: an output that is, after the passes, an
    input (the runner copies the input into it before each checkpoint's phases)."""

    name: str
    role: Role
    dtype: Dtype
    shape: list[int]
    size: int = Field(ge=1)
    copy_of: str | None = None


class LaunchSpec(_Model):
    """One launch: ``kernel`` names the C++ unit; its entry points in ``kernels.cu`` are
    ``k_<kernel>`` (``extern "C" __global__``, thread ``t`` < ``dim``) and ``h_<kernel>``
    (host, tasks ``[t0, t1)``). ``args``: the buffers bound to its pointer parameters, in
    order; the status word and ``status_base`` follow them."""

    name: str
    kernel: str
    group: str
    ops: list[str]
    phase: Literal["forward", "backward"]
    dim: int = Field(ge=0)
    grid: int = Field(ge=0)
    block: int = Field(ge=1)
    args: list[str]
    status_base: int = Field(ge=0)


class Checkpoint(_Model):
    """Phases run between two reads of the status word, and the read's name."""

    name: str
    phases: list[Literal["forward", "backward"]]


class Result(_Model):
    """A value the plan returns: ``key`` in ``ref.npz`` is ``<plan>/<key>``."""

    key: str
    buffer: str
    shape: list[int]


class PlanSpec(_Model):
    name: Literal["run", "value_and_grad", "tape"]
    buffers: list[BufferSpec]
    launches: list[LaunchSpec]
    checkpoints: list[Checkpoint]
    results: list[Result]
    cotangents: dict[str, str] = {}  # output name -> cotangent buffer (tape)
    bytes_moved: int = Field(ge=0)  # each bound input, output and saved buffer once: the traffic floor
    expect_flags: bool = False  # the reference run raised a NumericalError: flags, not values, are checked

    @model_validator(mode="after")
    def _bound(self) -> PlanSpec:
        names = {b.name for b in self.buffers}
        for launch in self.launches:
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
            for launch in plan.launches:
                if self.status_size and launch.status_base > self.status_size:
                    raise ValueError(f"launch {launch.name!r}: status base {launch.status_base} > {self.status_size}")
        return self

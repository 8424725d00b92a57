"""`Program.report` and `LoopProgram.report` as typed models: what a compile made, how long it
took, where it came from (cache) and, as plans are first called, which modules are built.

Assumes: the figures are filled in by the compile driver (`dpt_ir.driver.compile`) and the loop
program. Guarantees: every field is validated; ``model_dump(mode="json")`` is the
``report.json`` a dump writes (``program`` entry), so the file and the object agree.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, JsonValue

CacheState = Literal["miss", "disk", "memory"]


class ReportModel(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class BuildRow(ReportModel):
    """A plan's generated module: its name, whether it is built yet and its build seconds."""

    module: str
    built: bool
    build_seconds: float | None


class PlanRow(ReportModel):
    """One plan: its launches (``kernels``), the distinct kernels they run, the forward and
    backward launches, the saved bytes and the workspace bytes."""

    kernels: int
    distinct_kernels: int
    forward_launches: int
    backward_launches: int
    saved_bytes: int
    workspace_bytes: int


class ProgramReport(ReportModel):
    """A program: its graph and device, the options every plan compiled with, its module stem,
    where it came from (``cache``: a fresh compile, the disk cache or this process's cache),
    the compile seconds, the launches and distinct kernels of all plans, per plan its figures
    (``plans``) and its module's build (``builds``, filled in as each is built)."""

    graph: str
    device: str
    options: dict[str, JsonValue]
    module: str
    cache: CacheState
    compile_seconds: float
    launches: int
    distinct_kernels: int
    plans: dict[str, PlanRow]
    builds: dict[str, BuildRow]


class LoopRow(ReportModel):
    """One loop node of a loop program: its op and length, what its reverse sweep holds and
    recomputes (`dpt_ir.ops.revolve.CheckpointPlan`), and its body's and vjp's launches.
    ``kept_bytes``: the carries the forward kept, for a sweep that reads them."""

    node: str
    op: str
    length: int
    policy: str
    slots: int
    bytes_held: int
    advances: int
    recompute_factor: float
    carry_bytes: int
    carry_bytes_held: int
    workspace_bytes: int
    kept_bytes: int | None = None
    body_kernels: int
    vjp_kernels: int


class LoopCost(ReportModel):
    """One loop node's sweep as last measured (`LoopProgram.loop_costs`): its wall seconds
    (None before its first run) and seconds per step; for a reverse sweep, the forward steps
    it reruns to rebuild carries and what they cost at its forward's measured seconds per step
    (None when its forward has not run in the same evaluation's program: no forward to time)."""

    node: str
    op: str
    length: int
    seconds: float | None
    seconds_per_step: float | None
    steps_rerun: int = 0
    rerun_seconds: float | None = None


class LoopProgramReport(ReportModel):
    """A loop program: its graph and device, the options its pieces compiled with, the compile
    seconds, its modules, the distinct kernels in them and each loop's row."""

    graph: str
    device: str
    options: dict[str, JsonValue]
    compile_seconds: float
    modules: tuple[str, ...]
    distinct_kernels: int
    loops: tuple[LoopRow, ...]

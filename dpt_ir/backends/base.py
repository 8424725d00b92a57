"""`Target`: the device facts a compilation plans with, in one validated model.

Assumes: nothing (a pure model; the backend modules and the compiler import it, the passes
never do: `dp.compile` hands the budgets to them through `CompileOptions`).
Guarantees: `Target.for_device` gives the facts of a device kind (``cpu`` or ``cuda``) with
the budgets the user left unset filled in, the numbers every plan and kernel was built with
before they moved here (so plans are unchanged): the halo, recompute and row-set budgets the
passes use, the CPU threads a launch may use, how a reduction is split into partials, the C++
CPU driver's element block and task size, the CUDA launch block, and whether a differentiated
op is expanded into the pieces its derivative shares (`expand`). `dp.compile` makes one
`Target` per program and passes the object itself to code generation
(`dpt_ir.backends.warp.codegen.generate`), which hands it to every driver that reads a device
fact: no backend module keeps one as a constant. `Target.fingerprint` is the part of the cache
key that covers them. `target_for(kind)` is the default target of a kind (for builds not made
by `dp.compile`: loop-program pieces, the CUDA export, tests).
"""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import FrozenModel

TargetKind = Literal["cpu", "cuda"]


class Target(FrozenModel):
    """What a device kind asks of the plan.

    - ``kind``: ``cpu`` or ``cuda``; ``threads``: CPU threads per launch (results never
      depend on it: the task partition is fixed by shapes).
    - ``halo_budget``: work per element a stencil may spend recomputing its producers
      rather than reading them (`CompileOptions.halo_budget`): the CPU is compute bound, a
      GPU bandwidth bound, so recomputing over the halo pays longer there.
    - ``recompute_budget``: work per element the backward may spend recomputing one forward
      value before saving it (None: no limit, saved bytes alone decide; a GPU's cost is
      memory traffic).
    - ``partials_from``, ``partial_threads``, ``partial_chunk``: a reduction of at least
      ``partials_from`` elements per output is split into partials (CUDA: enough threads in
      flight, about ``partial_threads`` in all, each partial at least ``partial_chunk``
      elements), combined in order by a final kernel; the CPU runs one partial per output.
    - ``row_budget``: bytes of one row of every full-shape value a row set (row-local
      fusion, `CompileOptions.row_budget`) may read or write: what one task keeps in L1/L2
      between the set's members (the study measured row-local normalisation with 4 KiB
      rows, 16 KiB of live values per row).
    - ``combine_group``: CUDA combines more than this many partials of an output in two
      levels: a combine kernel folds each run of ``combine_group`` consecutive partials in
      order into a group partial, the final kernel folds the group partials in order (a fixed
      order, so the same bits for any launch; about sqrt(parts) serial steps per level).
    - ``expand``: whether the `expand` pass rebuilds a differentiated op that declares an
      expansion (logsumexp) from the pieces its derivative reads (`CompileOptions.expand`).
      It pays where one launch keeps a piece for the derivative: the CPU runs a row set as
      one row kernel whose gradient stage reads the forward's ``exp(x - m)`` from a row
      buffer. A CUDA plan launches the set's members one by one, so there the expansion
      turns the fused reduction into two (one launch more) and still evaluates the exp
      twice: CUDA keeps the fused op and its own derivative.
    - ``product_epilogues``: the largest matrix product (elements of its output) whose pointwise
      consumer runs inside the product's kernel (`fusion_products`,
      `CompileOptions.product_epilogues`; None: any size). CUDA: any size. A thread runs the
      epilogue on the element it has just stored, so fusing saves a launch and the result's
      round trip through global memory. The CPU: 64² (4096 elements). There the epilogue runs on
      each task's block, one call per block row (64 elements on the packed kernel), while the
      block is in L2. Its work is compute (a `tanh`), and the product is cache-resident either
      way, so fusing saves no traffic. What it saves is one launch, which is worth more than the
      calls only for small products. `benchmarks/bench_gemm.py --epilogue`, `tanh(x @ W + b)`,
      one thread, 2026-12-08, fused over unfused: float32 1.02x at 32² and 64², then 0.94x at 96²
      and 128² and 0.91x at 192²; float64 1.07x and 1.04x, then 0.95x at 96² (docs/backend.md).
    - ``loop_batches``: whether a loop whose carries hold a leading batch axis runs as one loop
      per batch element (`dpt_ir.passes.loop_batches`). The CPU does: a batched step's kernels
      each sweep the whole batch, so its fields leave the core's caches. The wave benchmark,
      8 shots, one thread, 2026-12-08: a shot took 1.3x as long as alone; as 8 loops it took
      1.09x (docs/loops.md). CUDA does not: a GPU wants the whole batch in one launch.
    - ``block``: elements per block of the C++ CPU driver (stack buffers, column blocks);
      ``cpu_task``: elements per task of its fixed partition; ``cuda_block``: threads per
      block of a CUDA launch.
    - ``flat_rows``: the widest rows of a pointwise stencil nest that the CPU driver runs as
      flat runs of consecutive rows (`dpt_ir.backends.cxx.flat_rows`; 0: never). One thread,
      rows of 128 and 256 (a 2-D wave's step) ran faster flat (value_and_grad 16.5 -> 14.3 ms
      and 36.5 -> 35.0 ms), an imaging chain's rows of 512 and 1024 1-3% slower: the per-row
      work is a small share of a long row.
    """

    kind: TargetKind
    threads: int = Field(default=1, ge=1, le=1024)
    halo_budget: int = Field(ge=0)
    recompute_budget: int | None = Field(default=None, ge=0)
    partials_from: int = Field(default=8192, ge=1)
    partial_threads: int = Field(default=65536, ge=1)
    partial_chunk: int = Field(default=4096, ge=1)
    row_budget: int = Field(default=32 * 1024, ge=0)
    combine_group: int = Field(default=128, ge=2)
    block: int = Field(default=512, ge=8)
    cpu_task: int = Field(default=65536, ge=1)
    cuda_block: int = Field(default=256, ge=32, le=1024)
    flat_rows: int = Field(default=256, ge=0)
    expand: bool = True
    product_epilogues: int | None = Field(default=None, ge=0)
    loop_batches: bool = False

    @classmethod
    def for_device(
        cls, device: str, threads: int = 1, halo_budget: int | None = None, recompute_budget: int | None = None
    ) -> Target:
        """The target of ``device`` (``cpu`` or ``cuda[:N]``), the budgets left None at the
        kind's defaults."""
        kind = _kind(device)
        defaults = _DEFAULT_BUDGETS[kind]
        return cls(
            kind=kind,
            threads=threads,
            halo_budget=defaults[0] if halo_budget is None else halo_budget,
            recompute_budget=defaults[1] if recompute_budget is None else recompute_budget,
            expand=_EXPANDS[kind],
            product_epilogues=_PRODUCT_EPILOGUES[kind],
            loop_batches=kind == "cpu",
        )

    def fingerprint(self) -> str:
        """Every fact that shapes the generated plans and code, as canonical JSON: all fields
        but ``threads`` (results and kernels are the same for any thread count, so a disk-cache
        entry serves every count)."""
        return self.model_dump_json(exclude={"threads"})

    def partial_count(self, n_out: int, count: int) -> int:
        """How many partials each of ``n_out`` outputs of a reduction over ``count``
        elements is split into: 1 on the CPU (no combine kernel) and for small reductions."""
        if self.kind == "cpu" or count < self.partials_from:
            return 1
        want = max(1, self.partial_threads // max(n_out, 1))
        return max(1, min(want, count // self.partial_chunk))


# Halo and recompute budgets by kind (see Target): measured on the one-thread CPU backend, a
# long chain of transcendentals costs more to recompute than to save and read back.
_DEFAULT_BUDGETS: dict[str, tuple[int, int | None]] = {"cpu": (48, 16), "cuda": (160, None)}
# Whether a kind's plans expand (see Target.expand): the CPU's row kernels share the pieces.
_EXPANDS: dict[str, bool] = {"cpu": True, "cuda": False}
# The largest product whose pointwise consumer a kind runs in its kernel (see Target.product_epilogues).
_PRODUCT_EPILOGUES: dict[str, int | None] = {"cpu": 64 * 64, "cuda": None}


def _kind(device: str) -> TargetKind:
    if device == "cpu":
        return "cpu"
    if isinstance(device, str) and device.startswith("cuda"):
        return "cuda"
    raise ContractError(f"target: device must be 'cpu' or 'cuda[:N]', found {device!r}")


_DEFAULTS = {kind: Target.for_device(kind) for kind in ("cpu", "cuda")}


def target_for(device: str) -> Target:
    """The default target of ``device``'s kind (one thread, default budgets)."""
    return _DEFAULTS[_kind(device)]

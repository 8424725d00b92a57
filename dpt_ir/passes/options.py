"""`CompileOptions`: what the user asked `dp.compile` for, as one validated model (that keys
the compile caches); `PassOptions`: the base of each pass's own options model, the fields of
`CompileOptions` that pass reads with the pass's defaults (`PassOptions.of`)."""

from __future__ import annotations

import os
from typing import Literal, Self

from pydantic import BaseModel, ConfigDict, Field

from dpt_ir.api.autodiff import default_loss
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.types import is_float


class CompileOptions(BaseModel):
    """Options of one compilation.

    - ``wrt``: inputs to differentiate (empty: forward only).
    - ``seeds``: outputs that get a cotangent input (default: every float output, so a
      tape pass can seed any of them).
    - ``seed_values``: cotangents known at compile time (``value_and_grad`` seeds its loss
      with 1.0); those outputs get a constant instead of an input.
    - ``loss``: the output ``value_and_grad`` differentiates.
    - ``recompute``: let `saved_attributes` recompute cheap work in the backward.
    - ``reciprocal``: let `reciprocal` turn a division by a broadcast value (a per-row
      scale) into a multiplication by its reciprocal, computed at the divisor's shape (may
      differ from the division by about one ulp; see that pass).
    - ``factor``: let `factor` pull the factors constant along a sum's or mean's axes out of
      it, ``sum(a * c) -> sum(a) * c`` (one rounding fewer per term; see that pass).
    - ``expand``: let `expand` rebuild a differentiated op that declares an expansion
      (logsumexp) from the pieces its derivative formula builds, so both share them (off: the
      op keeps its fused node and autodiff uses its formula that reads the op's output;
      `dp.compile` sets its target's, `Target.expand`: on for the CPU, off for CUDA).
    - ``fuse``: let `fusion` group nodes (off: one kernel per node).
    - ``product_epilogues``: the largest matrix product (elements of its output) whose
      pointwise consumer `fusion` runs on the product's finished tiles, inside its kernel
      (`fusion_products`; 0: none, None: any; `dp.compile` sets its target's,
      `Target.product_epilogues`).
    - ``checks``: kernels report non-finite and out-of-domain values.
    - ``denormals``: ``keep`` (IEEE) or ``flush`` (the CPU kernels flush denormals to zero;
      read by the backend only: no pass plans with it).
    - ``max_inline_consumers``: a cheap value read by more fusion groups than this is
      materialised once instead of being recomputed in each.
    - ``halo_budget``: the work per element a stencil (or any node reading its input
      several times) may spend recomputing what it reads before that is materialised
      (None: the fusion default, suited to the CPU; compute is cheaper than memory
      traffic on GPUs, so `dp.compile` raises it for CUDA).
    - ``recompute_budget``: the op work per element the backward may spend recomputing
      one forward value before `saved_attributes` saves it instead (None: no limit, only
      saved bytes count; `dp.compile` sets a limit for the compute-bound CPU backend).
    - ``row_budget``: the bytes of one row of the full-shape values a row set
      (`fusion_rows`) may read or write (None: `fusion_rows.ROW_BUDGET`; `dp.compile` sets
      its target's, `Target.row_budget`).
    - ``threads``: CPU threads a launch of a C++ kernel may use (None: the machine's cores,
      `resolved_threads`). The kernels' task partition is fixed by the shapes, so results do
      not depend on it and it keys no compiled code, only the in-process program cache.
    """

    model_config = ConfigDict(frozen=True, extra="forbid")

    wrt: tuple[str, ...] = ()
    seeds: tuple[str, ...] | None = None
    seed_values: dict[str, float] = Field(default_factory=dict)
    loss: str | None = None
    recompute: bool = True
    reciprocal: bool = True
    factor: bool = True
    expand: bool = True
    fuse: bool = True
    product_epilogues: int | None = Field(default=None, ge=0)
    checks: bool = True
    denormals: Literal["keep", "flush"] = "keep"
    max_inline_consumers: int = 4
    halo_budget: int | None = None
    recompute_budget: int | None = None
    row_budget: int | None = Field(default=None, ge=0)
    threads: int | None = Field(default=None, ge=1, le=1024)

    def resolved_threads(self) -> int:
        """``threads``, or the number of CPU cores this process may run on."""
        if self.threads is not None:
            return self.threads
        try:
            return max(1, len(os.sched_getaffinity(0)))
        except AttributeError:  # not on Linux
            return max(1, os.cpu_count() or 1)

    def seed_outputs(self, graph: Graph) -> list[str]:
        """The outputs that receive a cotangent, checked against ``graph``."""
        if self.seeds is not None:
            names = list(self.seeds)
        else:
            names = [o.name for o in graph.outputs if is_float(graph.types[o.value].dtype)]
        for name in [*names, *self.seed_values]:
            graph.output_value(name)
        for name in self.seed_values:
            if name not in names:
                raise ContractError(f"seed_values: output {name!r} is not among the seeded outputs {names}")
        return names

    def loss_output(self, graph: Graph) -> str:
        return self.loss if self.loss is not None else default_loss(graph)


class PassOptions(BaseModel):
    """The options one pass reads: a subclass declares them as fields, with the pass's own
    defaults, named as the `CompileOptions` fields they come from."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    @classmethod
    def of(cls, options: CompileOptions | PassOptions | None) -> Self:
        """The pass's options: ``options`` itself when it is one, else the fields of the
        `CompileOptions` this model declares, validated; a field left None there (no choice
        made, e.g. ``halo_budget`` without a target) takes the pass's default."""
        if isinstance(options, cls):
            return options
        if options is None:
            return cls()
        if not isinstance(options, CompileOptions):
            raise ContractError(
                f"{cls.__name__}: expected CompileOptions or {cls.__name__}, found {type(options).__name__}"
            )
        chosen = {k: getattr(options, k) for k in cls.model_fields if getattr(options, k) is not None}
        return cls.model_validate(chosen)

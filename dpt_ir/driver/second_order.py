"""The plans of forward mode and second order (``jvp``, ``hvp``, ``gnvp``), built on first use.

`dp.compile` runs no pass for them: a `Program` holds a `DerivedPlanBuilder` (the runtime
calls it, so the runtime never imports the driver) and builds each plan at the first call of
`Program.jvp`, `Program.hvp` or `Program.gnvp` (per residual output), then keeps it. A plan's
graph is derived from the program's graph by `dpt_ir.api.second_order` and compiled through
the forward-only (``run``) pipeline: canonicalize, cse and dce drop what the derivation leaves
dead, fusion fuses forward and derivative work alike. Each plan is one generated module with
one disk-cache entry (`load_or_build`), keyed by the program's key, the kind and the residual,
so a new process skips the passes and Warp reuses its binary. With the program's dump folder,
each plan's dumps go to ``<dump_dir>/<kind>`` (``gnvp-<output>`` for gnvp).
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import TYPE_CHECKING, Any

from dpt_ir.api.second_order import derived_graph
from dpt_ir.backends.base import Target
from dpt_ir.backends.warp import codegen
from dpt_ir.driver.cache import Built, load_or_build
from dpt_ir.ir.graph import Graph
from dpt_ir.passes import dumps
from dpt_ir.passes.manager import DEFAULT_PIPELINE
from dpt_ir.runtime.modules import content_key
from dpt_ir.runtime.plan import ExecutionPlan

if TYPE_CHECKING:
    from dpt_ir.passes.manager import PipelineResult

DERIVED_PREFIX = {"jvp": "jv", "hvp": "hv", "gnvp": "gn"}  # plan kind -> the prefix of its kernels' names
# Whether a plan rebuilds each op with an expansion (logsumexp) from its pieces, as formulas and
# pipeline alike. Until 2026-12-07 second order kept them whole: the expanded formula's shift
# m = max(x) was differentiated again (its terms cancel, but an argmax was built and run; hvp on
# softmax_xent at 1024², fastest of 15, 2026-12-03: 2.26 ms whole against 2.92 ms expanded). The
# shift now passes no derivative (`stop_gradient` in `ops.reduction._lse_pieces`), so the
# expanded hvp computes exp(x - m) once per element and shares it between s, the gradient and
# the product: one thread, min of 60, three alternating runs: 1.35-1.64 ms against 1.71-1.86 ms
# whole. gnvp keeps them whole (not measured expanded).
EXPAND = {"jvp": True, "hvp": True, "gnvp": False}
# The derived plans' pipeline: the forward-only one with `factor` after `reciprocal`, so a tangent
# or a product that sums against a per-row scale (a softmax's 1 / sum(exp(x - m))) accumulates in
# the forward's pass over the row. Measured on softmax_xent at 1024², one thread, fastest of 10
# (2026-12-04 06:35 UTC): jvp 1.62 -> 1.49 ms (3 passes over each row -> 2), hvp 2.65 -> 2.38 ms.
# The first-order plans keep theirs (their generated code is pinned; normalisation's would change).
PIPELINE = tuple(p for name in DEFAULT_PIPELINE for p in ((name, "factor") if name == "reciprocal" else (name,)))


@dataclasses.dataclass(frozen=True)
class DerivedPlanBuilder:
    """What a program's derived plans are compiled from: its graph, ``wrt``, loss, device,
    shared options (`options_of`), target, cache key, module header and dump folder."""

    graph: Graph
    wrt: tuple[str, ...]
    loss: str | None
    device: str
    base: dict[str, Any]
    target: Target
    key: str
    header: str
    out_dir: Path | None

    def derive(self, kind: str, of: str | None) -> Graph:
        """The derived graph of ``kind`` (gnvp: of residual output ``of``), its formulas in the
        form `EXPAND` chooses for the kind (the pipeline then keeps that form)."""
        return derived_graph(self.graph, self.wrt, self.loss, kind, of, expand=EXPAND[kind])

    def __call__(self, kind: str, of: str | None = None) -> ExecutionPlan:
        """Compile (or read from the disk cache) the plan of ``kind``; ContractError, nothing
        built, when the derivation refuses the graph."""
        derived = self.derive(kind, of)
        from dpt_ir.passes.manager import run_pipeline
        from dpt_ir.passes.options import CompileOptions

        options = CompileOptions(**{**self.base, "expand": EXPAND[kind]})  # forward only: nothing left to differentiate
        key = content_key(self.key, kind, of or "")
        stem = f"dpt_ir_gen_{key}"
        module_name, prefix = f"{stem}_{DERIVED_PREFIX[kind]}", DERIVED_PREFIX[kind]

        def build() -> tuple[dict[str, PipelineResult], Built]:
            result = run_pipeline(derived, options, PIPELINE)
            source = codegen.generate({prefix: result.graph}, self.graph.name, self.header, self.base["checks"],
                                      self.target, self.base["denormals"])  # fmt: skip
            built = Built({kind: result.graph}, source.kernels, {module_name: source.slots},
                          {module_name: source.text})  # fmt: skip
            return {kind: result}, built

        label = f"{self.graph.name} ({kind}{'' if of is None else ' of ' + of})"
        cached = load_or_build(key, stem, self.out_dir is not None, build, title=label)
        built = cached.built
        module = cached.module(module_name, self.device)
        plan = ExecutionPlan(built.graphs[kind], built.kernels, module, self.device, built.slots[module_name],
                             self.base["checks"], threads=self.target.threads)  # fmt: skip
        if self.out_dir is not None:
            folder = self.out_dir / (kind if of is None else f"{kind}-{of}")
            shared = [dumps.SharedKernel(function=k.function, launch=k.name) for k in built.kernels]
            dumps.write_all(cached.results[kind], folder, shared)
            (folder / "kernels").mkdir(parents=True, exist_ok=True)
            (folder / "kernels" / f"{module_name}.py").write_text(built.texts[module_name])
        return plan

"""Two graphs the 2,000-graph fuzz run (issue 27, seed 0, graphs 749 and 1326) found the C++
path refusing, compiled as the fuzz compiles them (`seeded_batch`: the loss's seed an input,
every float output seeded) and compared with the interpreter:

- ``s0_749``: fusion attached to a reduction, as its epilogue, work that read a value computed
  from the finished result through a reversed slice (`embed_slice` of the gradient), i.e. at
  another output's position, where the result is not known (`fusion_groups._epilogue_fits`
  now follows what is computed from a result, not only the result's views);
- ``s0_1326``: an epilogue reading a transpose between two reshapes, affine only over a finer
  space than the reduction's output (the backend now walks it over that refinement,
  `nest._walked_after`).

Cost: one module (both graphs in one batch).
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import dpt_ir as dp

from .harness import MODERATE_TOLERANCES, compare_batch, off_cxx, seeded_batch

GRAPHS = Path(__file__).parent / "golden" / "fuzz"


def _inputs(graph: dp.Graph, rng: np.random.Generator) -> dict[str, np.ndarray]:
    return {i.name: rng.uniform(-1.5, 1.5, i.type.shape).astype(i.type.dtype) for i in graph.inputs}


def test_fuzz_epilogue_graphs_compile_on_the_cxx_path_and_match_the_interpreter() -> None:
    rng = np.random.default_rng(27)
    graphs = [dp.Graph.from_text(p.read_text()) for p in sorted(GRAPHS.glob("*.ir"))]
    assert len(graphs) == 2
    batch = seeded_batch("fuzz_epilogues", [(g, _inputs(g, rng)) for g in graphs], 0)
    program = batch.compile()
    problems = compare_batch(batch, MODERATE_TOLERANCES, mixed=True)
    assert not any(problems.values()), problems
    for plan in program.plans.values():
        off = off_cxx(plan.kernels, plan.module.text)
        assert not off, off

"""The op sampler of the CUDA bundle: one case of every op the backend lowers (float32
where the op has a float32 case, else its first dtype: the logical ops' bool), in one graph
(`sampler`), with its inputs.

Cases come from the op table's test data (``tests/op_cases.py``, inputs inside each op's
smooth domain); every CUDA plan is all C++ (the Warp-Python path is gone), and a case
whose plan cannot be exported fails here with the ContractError naming its group. The
loop ops (``scan``) compile as loop programs, exported as such (`tests/export/test_stages.py`).
``benchmarks/gpu_bundle.sh`` exports it (``python -m tests.export.sampler OUT``) and
``tests/export/test_export.py`` checks it.
"""

from __future__ import annotations

import functools
import sys
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from op_cases import CASES, compiled  # noqa: E402

import dpt_ir as dp  # noqa: E402
from dpt_ir.export import export_cuda  # noqa: E402
from dpt_ir.export.cuda import cuda_plans  # noqa: E402
from dpt_ir.passes.options import CompileOptions  # noqa: E402
from tests.backend.harness import prefixed, union  # noqa: E402

DTYPE = "float32"  # preferred: the dtype of the GPU figures


@functools.cache
def covered_cases() -> tuple[tuple[str, Any, str], ...]:
    """(id, case, dtype): each op's first case in float32, or, for an op without one, its
    first case in that case's first dtype; its CUDA forward plan is checked to export."""
    chosen: dict[str, tuple[str, Any, str]] = {}
    for prefer in (True, False):
        for k, case in enumerate(CASES):
            if case.op in chosen or not compiled(case) or (prefer and DTYPE not in case.dtypes):
                continue
            dtype = DTYPE if prefer else case.dtypes[0]
            cuda_plans(case.build(dtype), {"run": CompileOptions()}, True)
            chosen[case.op] = (f"s{k:03d}", case, dtype)
    return tuple(sorted(chosen.values(), key=lambda c: c[0]))


def sampler() -> tuple[dp.Graph, dict[str, np.ndarray], list[str]]:
    """The sampler graph, its inputs and the ops it covers."""
    cases = covered_cases()
    graph = union("op_sampler", {pid: case.build(dtype) for pid, case, dtype in cases})
    inputs = {}
    for pid, case, dtype in cases:
        rng = np.random.default_rng(int(pid[1:]))
        inputs.update({prefixed(pid, n): v for n, v in case.inputs(rng, dtype).items()})
    return graph, inputs, [case.op for _, case, _ in cases]


def main(argv: list[str]) -> int:
    """``python -m tests.export.sampler OUT``: export the sampler's forward plan to OUT."""
    graph, inputs, ops = sampler()
    program = dp.compile(graph, device="cpu")
    export_cuda(program, argv[0], inputs=inputs)
    print(f"op sampler: {len(ops)} ops -> {argv[0]}: {', '.join(sorted(ops))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

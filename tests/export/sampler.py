"""The op sampler of the CUDA bundle: one float32 case of every op whose forward is on the
C++ path for CUDA, in one graph (`sampler`), with its inputs.

Cases come from the op table's test data (``tests/op_cases.py``, inputs inside each op's
smooth domain); a case is kept when the CUDA launches of its forward plan are all C++
(`dpt_ir.export.cuda.cuda_plans` accepts it), so the sampler follows the C++ path's
coverage as it grows. ``benchmarks/gpu_bundle.sh`` exports it (``python -m
tests.export.sampler OUT``) and ``tests/export/test_export.py`` checks it.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[2]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))

from op_cases import CASES, compiled  # noqa: E402

import dpt_ir as dp  # noqa: E402
from dpt_ir.export.cuda import cuda_plans  # noqa: E402
from dpt_ir.passes.options import CompileOptions  # noqa: E402
from tests.backend.harness import prefixed, union  # noqa: E402

DTYPE = "float32"


def covered_cases() -> list[tuple[str, object]]:
    """(id, case): the first float32 case of each op (every CUDA plan is all C++: a plan that
    is not fails here, with the ContractError naming its group)."""
    chosen: dict[str, tuple[str, object]] = {}
    for k, case in enumerate(CASES):
        if case.op in chosen or DTYPE not in case.dtypes or not compiled(case):
            continue
        cuda_plans(case.build(DTYPE), {"run": CompileOptions()}, True)
        chosen[case.op] = (f"s{k:03d}", case)
    return list(chosen.values())


def sampler() -> tuple[dp.Graph, dict[str, np.ndarray], list[str]]:
    """The sampler graph, its inputs and the ops it covers."""
    cases = covered_cases()
    graph = union("op_sampler", {pid: case.build(DTYPE) for pid, case in cases})  # type: ignore[attr-defined]
    inputs = {}
    for pid, case in cases:
        rng = np.random.default_rng(int(pid[1:]))
        inputs.update({prefixed(pid, n): v for n, v in case.inputs(rng, DTYPE).items()})  # type: ignore[attr-defined]
    return graph, inputs, [case.op for _, case in cases]  # type: ignore[attr-defined]


def main(argv: list[str]) -> int:
    """``python -m tests.export.sampler OUT``: export the sampler's forward plan to OUT."""
    graph, inputs, ops = sampler()
    program = dp.compile(graph, device="cpu")
    program.export_cuda(argv[0], inputs=inputs)
    print(f"op sampler: {len(ops)} ops -> {argv[0]}: {', '.join(sorted(ops))}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))

"""The two-level combine of a CUDA reduction's partials (`kernels._combine_kernel`), without a GPU.

A whole-array reduction of 600,001 elements is split into 146 CUDA partials (600,001 // 4096),
more than `Target.combine_group` (128): the CUDA plan folds them in two fixed levels, a
``_combine`` launch of 2 threads (partials 0..127 and 128..145, in order) and a ``_final`` of
one thread (the 2 group partials, in order). The plan is exported and replayed on the CPU
(``gpu_check.py``'s host builds, CUDA drivers and CPU drivers), where the combine runs as the
same plain C++, and equals the interpreter: a sum, a float64 sum, a logsumexp (two states
rescaled across groups), and a max / argmax whose tie falls in two different groups (the
first position wins). The CUDA module builds for sm_90 with NVRTC and holds no float atomic.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.base import target_for
from dpt_ir.export import export_cuda
from dpt_ir.export.cuda import cuda_plans
from dpt_ir.passes.options import CompileOptions

from .harness import float_atomics
from .test_cuda_aot import compile_sm90, cuda_variant

N = 600_001
PARTS = N // target_for("cuda").partial_chunk  # 146
TIE = (7, 146 * 3000 + 140)  # parts 7 (group 0) and 140 (group 1)


def _graph() -> dp.Graph:
    b = dp.GraphBuilder("combine")
    x = b.input("x", (N,), "float32")
    d = b.input("d", (N,), "float64")
    b.output("total", dp.sum(x))
    b.output("total64", dp.sum(d * d))
    b.output("lse", dp.logsumexp(x, axis=0))
    b.output("top", dp.max(x))
    b.output("where", dp.argmax(x, axis=0))
    return b.build()


def _inputs() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(3)
    x = rng.normal(0.0, 1.0, N).astype(np.float32)
    x[list(TIE)] = 9.0
    return {"x": x, "d": rng.uniform(-1.0, 1.0, N)}


def test_the_cuda_plan_combines_in_two_levels() -> None:
    assert PARTS == 146 and PARTS > target_for("cuda").combine_group
    build = cuda_plans(_graph(), {"run": CompileOptions()}, True)
    names = [k.name for k in build.kernels["run"]]
    combines = [k for k in build.kernels["run"] if k.name.endswith("_combine")]
    assert combines and all(k.dim == 2 for k in combines), names
    assert all(any(p.endswith(":group") for p in k.partials) for k in combines)


@pytest.fixture(scope="module")
def replay(tmp_path_factory: pytest.TempPathFactory) -> dict[bool, tuple[dict[str, np.ndarray], list[str], list[int]]]:
    from benchmarks import gpu_check
    from benchmarks.gpu_bundle_io import inputs_of, load

    folder = tmp_path_factory.mktemp("combine_bundle")
    export_cuda(dp.compile(_graph(), device="cpu"), str(folder / "ok"), inputs=_inputs())
    doc, ref, source = load(folder / "ok")
    (plan,) = doc["plans"]
    data = inputs_of(doc, ref, folder / "ok")
    out = {}
    for cuda in (False, True):
        be = gpu_check.Host(source, cuda, folder)
        results, raised, _ = gpu_check.run_plan(be, plan, data)
        out[cuda] = (
            {k: np.array(v) for k, v in results.items()},
            gpu_check.compare(plan, results, ref, doc["tolerance"]),
            raised,
        )
    return out


def test_the_replayed_two_level_combine_equals_the_interpreter(replay) -> None:
    for cuda, (results, bad, raised) in replay.items():
        assert len(results) == 5 and not bad and not raised, (cuda, bad, raised)
        assert int(results["output/where"][0]) == TIE[0], cuda


def test_the_two_level_module_compiles_for_sm90() -> None:
    module = cuda_variant(_graph())
    source = Path(module.__file__).read_text()
    assert "_combine(" in source and "_final(" in source
    assert not float_atomics(source)
    compile_sm90(module)

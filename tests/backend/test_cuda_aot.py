"""The generated modules also compile for CUDA (sm_90) with NVRTC, without a GPU (DESIGN §6).

Two kinds of module are compiled ahead of time:

- modules this session generated for the CPU (`harness.MODULES`, every pipeline's module
  of each program, built for the CPU or not; these tests run after every other test, see
  `conftest.pytest_collection_modifyitems`): the same source runs on both devices. The
  op-table and random-graph unions are left out: at several thousand lines each, NVRTC
  takes minutes per module; their ops are covered by the sampler below. The others are
  taken in name order, every module of at most `MAX_SESSION_PROGRAMS` programs.
- the float32 math header (`dpt_ir/backends/cxx/dp_math.h`): one kernel that calls every
  function of the header (and both instantiations of the trig templates) per thread, from
  a ``wp.func_native`` snippet, with the header in the module's CUDA preamble.
- the CPU plan of `test_cxx_rows`'s graph: its row kernels (a CUDA plan has none).
- CUDA variants, generated the way ``dp.compile`` would for a GPU (reductions split into
  per-block partials plus a combine kernel): the determinism graphs (beer, softmax
  cross-entropy, normalisation; forward, ``value_and_grad`` and tape pipelines) and an op
  sampler, one forward case of every op for each combination of dtypes in the op table,
  and the stencil graph of `test_cxx_stencils` (pads in every mode: edge functions and
  their constant image tables), the column-reduction, non-adjacent-reduction and
  float64 graphs of `test_cxx_columns`, `test_cxx_spread` and `test_cxx_float64`, and the
  gathers and index tables of `test_cxx_gathers`.

Artifacts go to a directory under Warp's kernel cache, so a later run with the same
generated source skips NVRTC.
"""

from __future__ import annotations

import os
import sys
import tempfile
from pathlib import Path
from types import ModuleType

import warp as wp
from op_cases import CASES, COMPILED_CASES, compiled

import dpt_ir as dp
from benchmarks.bench_math import BINARY, FUNCTIONS
from dpt_ir.backends.base import target_for
from dpt_ir.backends.cxx import math_header
from dpt_ir.backends.warp import codegen
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions
from dpt_ir.runtime.modules import cache_root, content_key, import_source

from .conftest import case_id
from .harness import MODULES, Batch, float_atomics, module_of, union

ARCH = 90
MAX_SESSION_PROGRAMS = 8
TOO_LARGE = ("ops_", "random_")  # labels of the union modules left out (see the module docstring)


def _math_call(name: str) -> str:
    if name in BINARY:
        return f"dp_{name}(a, b)"
    return f"dp_{name}(a, big)" if name.endswith("_fast") else f"dp_{name}(a)"


MATH_CALLS = [_math_call(n) for n in FUNCTIONS] + ["dp_sin_t<false>(a, big)", "dp_cos_t<true>(a, big)"]
MATH_DRIVER = "\n".join(
    [
        "DP_FN void dp_all(const float* x, const float* y, float* o, int* flag, int i) {",
        "    const float a = x[i], b = y[i];",
        "    bool big = false;",
        *(f"    o[{len(MATH_CALLS)} * i + {k}] = {call};" for k, call in enumerate(MATH_CALLS)),
        "    flag[i] = big;",
        "}",
    ]
)
MATH_PREAMBLE = math_header() + "\n" + MATH_DRIVER + "\n"
wp.set_module_options(
    {
        "enable_backward": False,
        "extra_build_options": wp.ModuleBuildOptions(
            extra_cpu_preamble=MATH_PREAMBLE, extra_cuda_preamble=MATH_PREAMBLE
        ),
    }
)


@wp.func_native("dp_all((const float*)x.data, (const float*)y.data, (float*)o.data, (int*)flag.data, i);")
def dp_all_native(
    x: wp.array(dtype=wp.float32),
    y: wp.array(dtype=wp.float32),
    o: wp.array(dtype=wp.float32),
    flag: wp.array(dtype=wp.int32),
    i: int,
): ...


@wp.kernel
def math_header_kernel(
    x: wp.array(dtype=wp.float32),
    y: wp.array(dtype=wp.float32),
    o: wp.array(dtype=wp.float32),
    flag: wp.array(dtype=wp.int32),
):
    dp_all_native(x, y, o, flag, wp.tid())


def aot_dir() -> Path:
    base = os.environ.get("WARP_CACHE_PATH") or tempfile.gettempdir()
    path = Path(base) / f"aot_sm{ARCH}"
    path.mkdir(parents=True, exist_ok=True)
    return path


def compile_sm90(module: ModuleType) -> list[Path]:
    """AOT-compile ``module`` for sm_90; the artifact paths (a cubin or PTX each)."""
    wp.init()
    paths = [Path(p) for p in wp.compile_aot_module(module, arch=ARCH, module_dir=aot_dir())]
    assert paths and all(p.exists() and p.stat().st_size > 0 for p in paths), paths
    return paths


def cuda_variant(
    graph: dp.Graph, wrt: tuple[str, ...] = (), loss: str | None = None, device: str = "cuda"
) -> ModuleType:
    """The module ``dp.compile(graph, wrt=wrt, loss=loss)`` would generate for a GPU
    (same pipelines and options; ``device="cpu"``: the CPU plan's), imported but not built."""
    pipelines = {"run": CompileOptions()}
    if wrt:
        if loss is not None:
            pipelines["vg"] = CompileOptions(wrt=wrt, seeds=(loss,), seed_values={loss: 1.0}, loss=loss)
        pipelines["tp"] = CompileOptions(wrt=wrt)
    graphs = {prefix: run_pipeline(graph, options).graph for prefix, options in pipelines.items()}
    source = codegen.generate(graphs, graph.name, "CUDA variant for the AOT test", True, target_for(device))
    name = f"dpt_ir_cuda_{content_key(source.text)}"
    return import_source(source.text, cache_root() / "cuda_variants", name)


def sampler_graph() -> dp.Graph:
    """One case of every op per combination of the op's input and output dtypes."""
    chosen: dict[tuple, tuple[str, dp.Graph]] = {}
    for k, case in enumerate(CASES):
        for dtype in case.dtypes if compiled(case) else ():
            graph = case.build(dtype)
            nodes = [n for n in graph.nodes if n.op == case.op]
            sig = sorted({(n.op, tuple(graph.types[i].dtype for i in n.inputs), n.type.dtype) for n in nodes})
            chosen.setdefault((case.op, tuple(sig)), (f"{case_id(k)}_{dtype}", graph))
    return union("op_sampler", dict(chosen.values()))


def _program_of(module: str) -> str:
    """The program stem of a pipeline's module name (``dpt_ir_gen_<key>_<pipeline>``)."""
    return module.rsplit("_", 1)[0]


def _session_modules() -> list[str]:
    names = sorted(n for n, label in MODULES.items() if not label.startswith(TOO_LARGE))
    programs = sorted({_program_of(n) for n in names})[:MAX_SESSION_PROGRAMS]
    return [n for n in names if _program_of(n) in programs]


def test_session_modules_compile_for_sm90(beer_program: dp.Program, det_batch: Batch) -> None:
    """The CPU modules of this session (at least beer and the determinism graphs), every
    pipeline's module of each program."""
    names = _session_modules()
    beer = [m.name for m in beer_program.modules.values()]
    assert len(beer) == 3 and (set(beer) <= set(names) or len({_program_of(n) for n in names}) == MAX_SESSION_PROGRAMS)
    for name in names:
        compile_sm90(module_of(name))


def test_math_header_compiles_for_sm90() -> None:
    """Every function of dp_math.h, one element per CUDA thread (this file's Warp module)."""
    assert math_header_kernel.module.name == __name__
    compile_sm90(sys.modules[__name__])


def test_cuda_variant_of_determinism_graphs_compiles(det_batch: Batch) -> None:
    assert det_batch.full is not None and det_batch.program is not None
    module = cuda_variant(det_batch.full, det_batch.program.wrt, det_batch.program.loss)
    source = Path(module.__file__).read_text()
    assert "_final(" in source, "the 256 x 256 sums should be split into partials on CUDA"
    assert not float_atomics(source)
    compile_sm90(module)


def test_every_op_template_compiles_for_sm90() -> None:
    graph = sampler_graph()
    missing = {case.op for case in COMPILED_CASES} - {n.op for n in graph.nodes}
    assert not missing, f"ops without a case in the sampler: {sorted(missing)}"
    compile_sm90(cuda_variant(graph))


def test_cuda_variant_of_stencils_compiles() -> None:
    """Pads in every mode and their adjoints on the C++ path: the edge functions and their
    constant image tables under NVRTC (the CUDA driver calls the edge function everywhere)."""
    from .test_cxx_stencils import stencils

    module = cuda_variant(stencils(), ("x",), "loss")
    source = Path(module.__file__).read_text()
    assert "_edge<" in source and "[warp]" not in source
    compile_sm90(module)


def test_cuda_variant_of_columns_and_float64_compiles() -> None:
    """Column reductions (one thread per output column), reductions over non-adjacent axes
    (row maps; one output split into strided partials) and float64 groups (dp_math.h's
    libm overloads) on the C++ path under NVRTC."""
    from .test_cxx_columns import columns_graph
    from .test_cxx_float64 import f64_graph
    from .test_cxx_spread import spread_graph

    for graph in (columns_graph(), spread_graph(), f64_graph()):
        module = cuda_variant(graph, ("x",), "loss")
        source = Path(module.__file__).read_text()
        assert "[warp]" not in source, graph.name
        compile_sm90(module)


def test_cuda_variant_of_gathers_compiles() -> None:
    """Gathers (positions loaded per element, every mode, reshapes read at their digits) and
    constant index tables (``DP_CONST`` arrays) on the C++ path under NVRTC."""
    from .test_cxx_gathers import gathers_graph

    module = cuda_variant(gathers_graph(), ("x", "z"), "loss")
    source = Path(module.__file__).read_text()
    assert "DP_CONST int" in source and "dp_clampi(" in source
    assert not float_atomics(source)
    compile_sm90(module)


def test_row_kernels_compile_for_sm90() -> None:
    """The CPU plan's row kernels (`dpt_ir.backends.cxx.rows`: stages called row by row, their
    parts contiguous rows) under NVRTC; a CUDA plan launches the same groups one by one."""
    from .test_cxx_rows import WRT, rows_graph

    graph = rows_graph()
    cpu = cuda_variant(graph, tuple(WRT), "loss", "cpu")
    assert "row kernel of" in Path(cpu.__file__).read_text()
    gpu = cuda_variant(graph, tuple(WRT), "loss")
    assert "row kernel of" not in Path(gpu.__file__).read_text()
    compile_sm90(cpu)


def test_cuda_variant_of_64_bit_kernels_compiles() -> None:
    """Kernels past the 32-bit range (`test_wide_index`: bytes past 2**31 scaled and summed,
    its gradient; a small sum beside them keeps 32-bit ints) under NVRTC: 64-bit element
    indices, strided partials of a 2**31-element row, 2-D Warp parameters of 2**20-element rows;
    and a pointwise kernel past 2**31 elements, several per thread (task indices stay 32-bit)."""
    from .test_wide_index import _scaled_sum

    module = cuda_variant(_scaled_sum(), ("s", "small"), "loss")
    source = Path(module.__file__).read_text()
    assert "long long i" in source and "int i" in source and "wp.array2d(dtype=wp.uint8)" in source
    compile_sm90(module)
    g = dp.GraphBuilder("pointwise_past_int32")  # 2 elements per CUDA thread: 2**30 + 4 threads
    x = g.input("x", (2**31 + 8,), "float32")
    g.output("y", dp.exp(-x))
    module = cuda_variant(g.build())
    assert "const long long b = (long long)t * 2," in Path(module.__file__).read_text()
    compile_sm90(module)

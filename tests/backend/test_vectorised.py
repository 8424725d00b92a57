"""Guard against silent de-vectorisation of the C++ path (issue 11): the CPU object of a
benchmark graph's generated module must hold packed vector instructions.

Builds the ``value_and_grad`` module of ``benchmarks.graphs.chain16`` (16 transcendental and
arithmetic ops, then a sum: one C++ kernel) at Warp's shipped ``-O2``, counts the packed
AVX instructions on vector registers in its object file with ``objdump`` (a "census"), and
does the same for a build of the very same source with ``DP_VEC_LOOP`` defined as
``#pragma clang loop vectorize(disable) interleave(disable)``: the guard passes for the
first and must fail for the second. The census counts the widest registers the vectorised
build uses: ``ymm`` on an AVX2 host, ``zmm`` where Warp's ``-march=native`` lets clang pick
512-bit vectors (an AVX-512 host); a threshold that differs between the two says so. A
change that makes the element loop scalar (a div/mod of the inner index, a libm call, an
early exit, a loop-carried float) fails here.

The same census runs on the imaging blur (`gaussian_filter`, 13 taps per axis, reflect): its
interior loops (the interior/edge split of the pads, after ``DP_BOUNDED_LOOP``) must hold packed
instructions too, and its scalar build (that macro defined as the pragma above) must not.

And on normalisation's ``value_and_grad`` row kernel (`dpt_ir.backends.cxx.rows`: its five
groups as stages over each row of a task): the stages' element loops must stay packed.

And on softmax_xent (a row logsumexp and a row dot, then the gradient): its reduction lane
loops (``DP_LANE_LOOP``) must be 8-wide vector operations; a build with ``DP_LANE_LOOP``
defined empty (clang then vectorises the group loop 4 wide with shuffles: 0.7x the speed)
must fail the same count.
"""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

import pytest
import warp as wp

import dpt_ir as dp
from benchmarks.graphs import chain16, normalisation, softmax_xent
from dpt_ir.backends.base import target_for
from dpt_ir.backends.warp import codegen
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions
from dpt_ir.runtime.modules import cache_root, content_key, import_source, load, warp_cache_dir

from .harness import off_cxx

OBJDUMP = shutil.which("llvm-objdump") or shutil.which("objdump")
WIDTHS = ("zmm", "ymm")  # the widest first
MIN_PACKED = 200  # the vectorised chain16 kernel holds thousands (zmm: 906); its scalar build a handful (72)
LARGE_CHAIN = 70  # (sin, mul, add) per link: 210 element nodes and their constants, past drivers.LARGE_BODY
MIN_STENCIL = 100  # the blur's two 13-tap interior loops (measured counts: docs/backend.md; zmm 356, scalar 0)
# softmax_xent 64x64, the forward alone (its logsumexp's two lane passes, the dot's): zmm 136 packed, 100 with
# DP_LANE_LOOP empty (ymm not measured: this machine builds zmm). The two sums update two sets of lanes
# (`LanePass.fold`), and of those unrolled groups clang vectorises some 8 wide even in the plain build (its other
# lane operations 2 wide: 146 xmm vaddpd/vcvtps2pd against 14); with one set it was 132 against 60. The lane loops'
# own packed instructions:
MIN_LANE_GAIN = 24
MIN_COLUMNS = 150  # a column sum: ymm 352 vectorised, 64 (init and merge loops) scalar; zmm 373, 128
# The next two were measured under Warp's default flags (raised inlining thresholds, which copied
# the loops more often); with `cpu_flags`' -march=native (2026-12-07) the same loops, still
# vectorised and as fast, count fewer: spread zmm 107 vectorised, 59 scalar (194, 98 before);
# rows zmm 265, 106 (486, 186). The ymm bounds are the earlier ymm counts scaled by the zmm
# ratio (not measured: this machine builds zmm).
MIN_SPREAD = 85  # sum over axes (0, 2) of 8x16x256 (row map): ymm 256 vectorised, 64 scalar before
# normalisation's row kernel at 64x64: ymm 646 measured, 264 (its lane loops) scalar before
MIN_ROWS = {"ymm": 250, "zmm": 180}
SCALAR = '_Pragma("clang loop vectorize(disable) interleave(disable)")'

pytestmark = pytest.mark.skipif(OBJDUMP is None, reason="needs objdump or llvm-objdump for the census")


def census(obj: Path) -> dict[str, int]:
    """Packed single/double-precision AVX instructions in ``obj``, per register width."""
    out = subprocess.run([str(OBJDUMP), "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    packed = {w: re.compile(rf"\sv\w+p[sd]\s.*%{w}") for w in WIDTHS}
    lines = out.stdout.splitlines()
    return {w: sum(1 for line in lines if pattern.search(line)) for w, pattern in packed.items()}


def widest(counts: dict[str, int]) -> str:
    """The widest register width the vectorised build uses (``ymm`` when it uses none)."""
    return next((w for w in WIDTHS if counts[w]), "ymm")


def packed_pair(vectorised: str, scalar: str, label: str) -> tuple[str, int, int]:
    """The width of ``vectorised``'s build and the packed counts at that width of it and of
    ``scalar`` (the same source with a loop pragma changed)."""
    vec = census(build(vectorised, label))
    width = widest(vec)
    return width, vec[width], census(build(scalar, label + "_scalar"))[width]


def build(text: str, label: str, level: int = 2) -> Path:
    """Import ``text`` as a fresh module, build it for the CPU at ``level`` (default -O2, the
    shipped level: -O0 test builds never vectorise), return its object."""
    name = f"dpt_ir_vec_{label}_{content_key(text)}"
    module = import_source(text, cache_root() / "vectorised", name)
    previous = wp.config.optimization_level
    wp.config.optimization_level = level
    try:
        load(module, "cpu", name, None, purge=False)
    finally:
        wp.config.optimization_level = previous
    # The newest build: the same module text gives another Warp build when dp_math.h (the
    # preamble, imported by the module) changed since an earlier run.
    objs = [p for d in warp_cache_dir().glob(f"wp_{name}_*") for p in d.glob("*.o")]
    return max(objs, key=lambda p: p.stat().st_mtime)


def generated(graph: dp.Graph, options: CompileOptions) -> str:
    plans = {"p": run_pipeline(graph, options).graph}
    source = codegen.generate(plans, graph.name, "vectorisation guard", True, target_for("cpu"))
    off = off_cxx(source.kernels, source.text)
    assert not off, off
    return source.text


def scalar_build(text: str, macro: str = "DP_VEC_LOOP", pragma: str = SCALAR) -> str:
    """``text`` with ``macro`` (a loop macro of dp_math.h) defined as ``pragma`` first."""
    marker = "_PREAMBLE = math_header()"
    assert marker in text
    return text.replace(marker, f"_PREAMBLE = '#define {macro} {pragma}\\n' + math_header()")


@pytest.fixture(scope="module")
def chain16_text() -> str:
    options = CompileOptions(wrt=("x",), seeds=("loss",), seed_values={"loss": 1.0}, loss="loss")
    return generated(chain16((64, 64), "float32"), options)


@pytest.fixture(scope="module")
def softmax_text() -> str:
    # The forward alone: its logsumexp is one reduction whose lane loops hold the exp (a
    # differentiated one is expanded, `passes.expand`, and its exp is pointwise).
    return generated(softmax_xent((64, 64), "float32"), CompileOptions())


@pytest.fixture(scope="module")
def blur_text() -> str:
    g = dp.GraphBuilder("blur")
    x = g.input("x", (64, 64), "float32")
    g.output("y", dp.gaussian_filter(x, 2.0, mode="reflect", truncate=3.0))
    return generated(g.build(), CompileOptions())


def test_chain16_hot_loop_is_vectorised(chain16_text: str) -> None:
    width, count, _ = packed_pair(chain16_text, scalar_build(chain16_text), "chain16")
    assert count >= MIN_PACKED, f"{count} packed {width} instructions; the element loop went scalar"


def test_guard_fails_for_a_scalar_build(chain16_text: str) -> None:
    width, _, scalar = packed_pair(chain16_text, scalar_build(chain16_text), "chain16")
    assert scalar < MIN_PACKED, f"{scalar} packed {width} instructions in a build with vectorisation disabled"


def test_blur_interior_loops_are_vectorised(blur_text: str) -> None:
    assert "_edge<" in blur_text, "the pads should split rows into an interior and edges"
    assert "DP_BOUNDED_LOOP for" in blur_text, "a bounded group's element loops take DP_BOUNDED_LOOP"
    width, count, scalar = packed_pair(blur_text, scalar_build(blur_text, "DP_BOUNDED_LOOP"), "blur")
    assert count >= MIN_STENCIL, f"{count} packed {width} instructions; the blur's interior loops went scalar"
    assert scalar < MIN_STENCIL, f"{scalar} packed {width} instructions in a build with vectorisation disabled"


@pytest.fixture(scope="module")
def large_text() -> str:
    g = dp.GraphBuilder("large_body")
    x = g.input("x", (64, 64), "float32")
    y = x
    for _ in range(LARGE_CHAIN):
        y = dp.sin(y) * 1.01 + 0.5
    g.output("y", y)
    return generated(g.build(), CompileOptions())


def test_a_large_body_takes_two_vectors_in_flight_and_stays_vectorised(blur_text: str, large_text: str) -> None:
    assert "DP_LARGE_LOOP for" in large_text and "DP_VEC_LOOP for" not in large_text, "drivers.LARGE_BODY"
    assert "DP_LARGE_LOOP" not in blur_text, "a small body keeps DP_VEC_LOOP"
    width, count, scalar = packed_pair(large_text, scalar_build(large_text, "DP_LARGE_LOOP"), "large")
    assert count >= MIN_PACKED, f"{count} packed {width} instructions; the large body's loop went scalar"
    assert scalar < MIN_PACKED, f"{scalar} packed {width} instructions in a build with vectorisation disabled"


def test_reduction_lane_loops_are_vectorised(softmax_text: str) -> None:
    assert "DP_LANE_LOOP for (int l = 0; l < 8; ++l)" in softmax_text
    plain_text = scalar_build(softmax_text, "DP_LANE_LOOP", "")
    width, count, plain = packed_pair(softmax_text, plain_text, "softmax")
    assert count - plain >= MIN_LANE_GAIN, (
        f"{count} packed {width} instructions, {plain} with DP_LANE_LOOP empty: the reduction lane loops are not 8 wide"
    )


@pytest.fixture(scope="module")
def column_sum_text() -> str:
    g = dp.GraphBuilder("column_sum")
    x = g.input("x", (64, 256), "float32")
    g.output("y", dp.sum(x * x, axis=0))
    return generated(g.build(), CompileOptions())


def test_column_sum_loops_are_vectorised(column_sum_text: str) -> None:
    width, count, scalar = packed_pair(column_sum_text, scalar_build(column_sum_text), "columns")
    assert count >= MIN_COLUMNS, f"{count} packed {width} instructions; the column sum's loops went scalar"
    assert scalar < MIN_COLUMNS, f"{scalar} packed {width} instructions in a build with vectorisation disabled"


@pytest.fixture(scope="module")
def spread_sum_text() -> str:
    g = dp.GraphBuilder("spread_sum")
    x = g.input("x", (8, 16, 256), "float32")
    g.output("y", dp.sum(x * x, axis=(0, 2)))
    return generated(g.build(), CompileOptions())


def test_non_adjacent_reduction_loops_are_vectorised(spread_sum_text: str) -> None:
    """Sub-rows found through the row map (`rowmap`) run the trailing case's element and
    lane loops: they vectorise."""
    width, count, scalar = packed_pair(spread_sum_text, scalar_build(spread_sum_text), "spread")
    assert count >= MIN_SPREAD, f"{count} packed {width} instructions; the row-map reduction's loops went scalar"
    assert scalar < MIN_SPREAD, f"{scalar} packed {width} instructions in a build with vectorisation disabled"


@pytest.fixture(scope="module")
def rows_text() -> str:
    options = CompileOptions(wrt=("x",), seeds=("loss",), seed_values={"loss": 1.0}, loss="loss")
    text = generated(normalisation((64, 64), "float32"), options)
    assert "# p_rows0: [cxx] row kernel of f0, f1, f2, f3, f4" in text
    return text


def test_row_kernel_loops_are_vectorised(rows_text: str) -> None:
    width, count, scalar = packed_pair(rows_text, scalar_build(rows_text), "rows")
    assert count >= MIN_ROWS[width], f"{count} packed {width} instructions; the row kernel's stage loops went scalar"
    assert scalar < MIN_ROWS[width], f"{scalar} packed {width} instructions in a build with vectorisation disabled"


def library_calls(obj: Path) -> set[str]:
    """The memory-library functions (memcpy, memmove, memset) that ``obj`` calls, from its
    relocations."""
    out = subprocess.run([str(OBJDUMP), "-r", str(obj)], capture_output=True, text=True)
    assert out.returncode == 0, out.stderr
    return set(re.findall(r"\b(mem(?:cpy|move|set))\b", out.stdout))


@pytest.fixture(scope="module")
def wide_rows_text() -> str:
    # Rows of 1024: whole blocks of `Target.block` (512) elements, where clang turns a block
    # loop that only copies into a memcpy call (at 64 elements it keeps the loop).
    options = CompileOptions(wrt=("x",), seeds=("loss",), seed_values={"loss": 1.0}, loss="loss")
    return generated(normalisation((4, 1024), "float32"), options)


@pytest.fixture(scope="module")
def wide_columns_text() -> str:
    g = dp.GraphBuilder("column_input_sum")
    x = g.input("x", (8, 1024), "float32")
    g.output("y", dp.sum(x, axis=0))
    return generated(g.build(), CompileOptions())


def test_column_reductions_of_inputs_copy_nothing(wide_columns_text: str) -> None:
    """A column sum of an input folds each row of it from the array (`columns`), as the row
    reductions do: no block buffer, no memcpy (0.68x the time of sum(x, axis=0) at 256x4096)."""
    assert "x = a0[row * 1024 + clo + k]" in wide_columns_text, "the column loop should read the input directly"
    calls = library_calls(build(wide_columns_text, "wide_columns")) - {"memset"}  # the accumulators' zeroing
    assert not calls, f"the module calls {sorted(calls)}: a column reduction input went through a buffer copy"


def test_reductions_of_inputs_copy_nothing(wide_rows_text: str) -> None:
    """normalisation's mean(x) reduces an input as it is read: its lane loop reads the input
    itself (`ElementWriter.direct`). Through a block buffer the element loop was a copy, which
    clang turned into a memcpy call per block (13% of softmax_xent's step at 1024x1024, whose
    max(z) is the same)."""
    assert "x = a0[o * 1024 + jb + k + l]" in wide_rows_text, "the lane loop should read the input directly"
    calls = library_calls(build(wide_rows_text, "wide_rows"))
    assert not calls, f"the module calls {sorted(calls)}: a reduction input went through a buffer copy"

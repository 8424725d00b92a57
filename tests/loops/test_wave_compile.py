"""The wave program of `benchmarks/bench_wave.py` compiles to the same loop kernels for any
number of steps (issue 28: the compile time is independent of the number of steps; the time
itself is measured by `benchmarks/compile_wave.py`, not here).

At 30 and 300 steps: the body and body-vjp pieces are the same graphs (same hash), every pass
dump of theirs is byte-identical, the module holds as many kernels, and the loop's kernels are
the same functions (kernel names are hashes of their code) in both modules. Only the segments
around the loop (the misfit over the ``steps x shots x n`` data) differ, in their shapes.
"""

from __future__ import annotations

import re
from pathlib import Path

import dpt_ir as dp
from benchmarks import bench_wave
from dpt_ir.runtime.loop_program import LoopProgram

KERNEL = re.compile(r"DP_FN void (dpk_[0-9a-f]+)_cpu\(")


def _dumped(steps: int, where: Path) -> tuple[LoopProgram, Path]:
    dump = where / f"steps{steps}"
    program = dp.compile(bench_wave.wave_graph(16, steps, 2, None), wrt=["v"], threads=1, dump_dir=dump)
    assert isinstance(program, LoopProgram)
    return program, dump


def _pieces(dump: Path) -> dict[str, dict[str, bytes]]:
    """The body pieces' pass dumps (their reports hold timings, so they are left out)."""
    return {
        d.name: {f.name: f.read_bytes() for f in sorted(d.iterdir()) if f.name != "report.json"}
        for d in sorted(dump.iterdir())
        if d.name.startswith("body")
    }


def _kernels(dump: Path) -> list[str]:
    (module,) = (dump / "kernels").glob("*.py")
    return KERNEL.findall(module.read_text())


def test_wave_loop_kernels_do_not_depend_on_the_number_of_steps(tmp_path: Path) -> None:
    short, short_dump = _dumped(30, tmp_path)
    long, long_dump = _dumped(300, tmp_path)
    short_pieces, long_pieces = _pieces(short_dump), _pieces(long_dump)
    assert sorted(short_pieces) == sorted(long_pieces) and len(short_pieces) == 2, sorted(short_pieces)
    assert short_pieces == long_pieces
    assert short.kernel_count == long.kernel_count
    short_kernels, long_kernels = _kernels(short_dump), _kernels(long_dump)
    assert len(short_kernels) == len(long_kernels) == short.kernel_count
    loops = [(r.op, r.body_kernels, r.vjp_kernels) for r in short.report.loops]
    assert loops == [(r.op, r.body_kernels, r.vjp_kernels) for r in long.report.loops]
    loop_kernels = max(r.body_kernels + r.vjp_kernels for r in short.report.loops)
    assert len(set(short_kernels) & set(long_kernels)) >= loop_kernels > 0

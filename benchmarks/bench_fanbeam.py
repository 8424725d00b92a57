"""Fan-beam tomography benchmark: one least-squares step (``dp.fanbeam`` forward + its exact
transpose) against ASTRA Toolbox's CPU ``line_fanflat`` projector, and their values compared.

    LD_LIBRARY_PATH=<nvidia-cuda-runtime-cu12 lib> python benchmarks/bench_fanbeam.py [--size 256]
        [--angles 180] [--reps 5]

In one process, an N x N phantom, ``--angles`` angles over a full turn, ``1.5 N`` detectors of
width 1, source 2N and detector N from the centre (ASTRA's ``fanflat``), every contender on one
thread: dpt_ir's ``Program.value_and_grad`` of ``0.5 ||fanbeam(x) - b||²`` (float32,
``threads=1``) and ASTRA's ``FP`` then ``BP`` of the residual (float32, preallocated data
objects). Rounds interleave the contenders after a warm-up (`benchmarks.rounds.measure`);
medians of the calling thread's CPU time and of wall time, ratios per round then the median.

Values: both projectors compute line integrals with exact pixel lengths; the line reports the
largest and the median difference of ASTRA's sinogram from dpt_ir's float64 one, relative to
the largest value. ASTRA needs ``libcudart.so.12`` (PyPI's ``nvidia-cuda-runtime-cu12``) on
``LD_LIBRARY_PATH`` to import; it then runs on the CPU. Without it only dpt_ir runs.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _geometry(n: int, angles: int) -> dict[str, Any]:
    return {"angles": np.linspace(0.0, 2 * np.pi, angles, endpoint=False), "source_origin": 2.0 * n,
            "origin_det": 1.0 * n, "det_count": int(1.5 * n), "det_width": 1.0}  # fmt: skip


def _astra(n: int, geo: dict[str, Any]) -> tuple[Any, Any] | None:
    """ASTRA's volume and ``fanflat`` geometries and its projector id, or None (saying why)."""
    try:
        import astra
    except ImportError as err:
        print(f"  ASTRA left out: {err}")
        return None
    vol = astra.create_vol_geom(n, n)
    proj = astra.create_proj_geom("fanflat", geo["det_width"], geo["det_count"], geo["angles"],
                                  geo["source_origin"], geo["origin_det"])  # fmt: skip
    return astra, (vol, proj, astra.create_projector("line_fanflat", proj, vol))


def _program(n: int, geo: dict[str, Any], dtype: str) -> Any:
    import dpt_ir as dp

    g = dp.GraphBuilder(f"bench_fanbeam_{dtype}")
    x = g.input("x", (n, n), dtype)
    sino = dp.fanbeam(x, **geo)
    b = g.input("b", sino.shape, dtype, requires_grad=False)
    g.output("sino", sino)
    g.output("loss", 0.5 * dp.sum(dp.square(sino - b)))
    return dp.compile(g.build(), wrt=["x"], loss="loss", threads=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--angles", type=int, default=180)
    parser.add_argument("--reps", type=int, default=5)
    args = parser.parse_args()
    from benchmarks.bench_resample import _phantom, astra_fp_bp
    from benchmarks.rounds import measure

    n, geo = args.size, _geometry(args.size, args.angles)
    x0 = _phantom(n).astype(np.float32)
    start = time.perf_counter()
    program = _program(n, geo, "float32")
    exact = _program(n, geo, "float64").run(x=x0.astype(np.float64), b=np.zeros((args.angles, geo["det_count"])))
    b = (exact["sino"] * 1.01).astype(np.float32)
    program.value_and_grad(x=x0, b=b)
    setup = time.perf_counter() - start
    steps: dict[str, Callable[[], object]] = {"dpt_ir value_and_grad": lambda: program.value_and_grad(x=x0, b=b)}
    found = _astra(n, geo)
    if found is not None:
        astra, ids = found
        _, theirs = astra.create_sino(x0, ids[2])
        diff = np.abs(theirs - exact["sino"]) / np.abs(exact["sino"]).max()
        print(f"  values: ASTRA line_fanflat vs dpt_ir (float64), relative to the largest: max {diff.max():.2e}, "
              f"median {np.median(diff):.2e}")  # fmt: skip
        steps["ASTRA CPU line_fanflat FP + BP"] = astra_fp_bp(astra, ids, x0, b.astype(np.float32))
    times = measure(steps, args.reps)
    print(f"fan-beam {n}x{n}, {args.angles} angles, {geo['det_count']} detectors, float32, one thread each, "
          f"median of {args.reps} rounds; dpt_ir set-up (two compiles and first calls) {setup:.2f} s")  # fmt: skip
    print("| contender | CPU ms | wall ms | dpt_ir / it (CPU) | dpt_ir / it (wall) |")
    print("|---|---:|---:|---:|---:|")
    ours = times["dpt_ir value_and_grad"]
    for name, t in times.items():
        ratios = [statistics.median(a / b for a, b in zip(ours[k], t[k], strict=True)) for k in ("cpu", "wall")]
        print(f"| {name} | {statistics.median(t['cpu']) * 1e3:.2f} | {statistics.median(t['wall']) * 1e3:.2f} "
              f"| {ratios[0]:.2f} | {ratios[1]:.2f} |")  # fmt: skip


if __name__ == "__main__":
    main()

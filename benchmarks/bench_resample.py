"""Tomography benchmark: one least-squares step (radon forward + its adjoint) against peers.

    python benchmarks/bench_resample.py [--size 256] [--angles 180] [--reps 5] [--dtype float32]
        [--fresh-cache]

In one process, for an N x N image (a phantom zero outside the inscribed circle), ``--angles``
angles in [0, 180), every contender on one thread:

1. dpt_ir: ``Program.value_and_grad`` of ``0.5 * ||radon(x) - b||²`` (``threads=1``): the
   matrix-free projection and its exact transpose (`dpt_ir.backends.cxx.projection`); and,
   to show the split, ``Program.run`` of ``radon(x)`` alone (the forward);
2. ASTRA Toolbox (if importable): its CPU ``linear`` parallel-beam projector, ``FP`` then
   ``BP`` of the residual (float32, matrix-free, preallocated data objects);
3. scikit-image: ``skimage.transform.radon`` forward, then ``iradon(..., filter_name=None)``
   as the backprojection (float64; skimage's own, not the exact adjoint of its projector).

Reported first: Warp's initialisation (``wp.init()``: its time and the resident size its native
libraries add, once per process, whatever the program), then dpt_ir's set-up (``dp.compile``)
and first call, the peak resident memory they add after that (``ru_maxrss``), and the disk
cache's growth; with ``--fresh-cache`` the compile and Warp caches are new empty folders (a
cold start). Then the steps: rounds interleave the contenders in rotating order after one
warm-up; each reports the median CPU time of the calling thread (``time.thread_time``) and
the median wall time; ratios are per round (contenders of the same run only), then the median.
ASTRA's import needs ``libcudart.so.12`` (PyPI's ``nvidia-cuda-runtime-cu12``) on
``LD_LIBRARY_PATH``; it then runs on the CPU.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the repository root holds the benchmarks package
    sys.path.insert(0, str(ROOT))


def _tree_bytes(root: Path) -> int:
    """The bytes of the files under ``root`` (0 if it does not exist)."""
    return sum(p.stat().st_size for p in root.rglob("*") if p.is_file()) if root.exists() else 0


def _rss_mib() -> float:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def _phantom(n: int) -> np.ndarray:
    y, x = np.mgrid[:n, :n]
    r = np.hypot(x - n // 2, y - n // 2)
    img = np.where(r < 0.4 * n, 1.0, 0.0) + np.where(np.hypot(x - 0.6 * n, y - 0.45 * n) < 0.1 * n, 0.5, 0.0)
    return np.where(r <= n // 2 - 1, img, 0.0)


def _astra_step(x0: np.ndarray, b: np.ndarray, theta: np.ndarray) -> Callable[[], np.ndarray] | None:
    """ASTRA's CPU FP + BP of the residual, or None (with a line saying why) without astra."""
    try:
        import astra
    except ImportError as err:  # astra-toolbox absent, or libcudart.so.12 not on LD_LIBRARY_PATH
        print(f"  ASTRA left out: {err}")
        return None
    n = x0.shape[0]
    vol = astra.create_vol_geom(n, n)
    proj = astra.create_proj_geom("parallel", 1.0, n, np.deg2rad(theta))
    pid = astra.create_projector("linear", proj, vol)
    # ASTRA's sinogram is (angles, detectors)
    return astra_fp_bp(astra, (vol, proj, pid), x0, np.ascontiguousarray(b.T, dtype=np.float32))


def astra_fp_bp(astra: Any, ids: tuple[Any, Any, int], x0: np.ndarray, b: np.ndarray) -> Callable[[], np.ndarray]:
    """One least-squares step with ASTRA projector ``ids`` (volume and projection geometries,
    projector id): FP of ``x0`` into a preallocated sinogram, minus ``b`` (ASTRA's layout,
    float32), then BP into a preallocated volume."""
    vol, proj, pid = ids
    vid = astra.data2d.create("-vol", vol, x0.astype(np.float32))
    sid = astra.data2d.create("-sino", proj, 0.0)
    gid = astra.data2d.create("-vol", vol, 0.0)
    fp = astra.astra_dict("FP")
    fp.update(ProjectorId=pid, ProjectionDataId=sid, VolumeDataId=vid)
    bp = astra.astra_dict("BP")
    bp.update(ProjectorId=pid, ProjectionDataId=sid, ReconstructionDataId=gid)
    fp_id, bp_id = astra.algorithm.create(fp), astra.algorithm.create(bp)

    def step() -> np.ndarray:
        astra.algorithm.run(fp_id)
        astra.data2d.store(sid, astra.data2d.get_shared(sid) - b)
        astra.algorithm.run(bp_id)
        return astra.data2d.get_shared(gid)

    return step


def _dpt_program(n: int, theta: np.ndarray, dtype: str) -> tuple[Any, dict[str, float]]:
    import dpt_ir as dp
    from dpt_ir.runtime.modules import cache_root

    g = dp.GraphBuilder("bench_radon")
    x = g.input("x", (n, n), dtype)
    sino = g.input("b", (n, len(theta)), dtype, requires_grad=False)
    g.output("loss", 0.5 * dp.sum(dp.square(dp.radon(x, theta) - sino)))
    graph = g.build()
    import warp as wp

    # Warp's own libraries (warp.so, warp-clang.so) load at its first initialisation, whatever the
    # program: counted apart, so that what the problem adds is seen on its own.
    before_warp = _rss_mib()
    start = time.perf_counter()
    wp.init()
    warp_s = time.perf_counter() - start
    cache_before, rss_before = _tree_bytes(cache_root()), _rss_mib()
    start = time.perf_counter()
    program = dp.compile(graph, wrt=["x"], threads=1)
    compiled = time.perf_counter() - start
    facts = {
        "compile_s": compiled,
        "rss_before": rss_before,
        "cache_before": cache_before,
        "warp_s": warp_s,
        "warp_mib": rss_before - before_warp,
    }
    return program, facts


def _forward_program(n: int, theta: np.ndarray, dtype: str) -> Any:
    """``radon(x)`` alone, compiled like the step (``threads=1``)."""
    import dpt_ir as dp

    g = dp.GraphBuilder("bench_radon_forward")
    g.output("y", dp.radon(g.input("x", (n, n), dtype), theta))
    return dp.compile(g.build(), threads=1)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--angles", type=int, default=180)
    parser.add_argument("--reps", type=int, default=5)
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    parser.add_argument("--fresh-cache", action="store_true", help="compile into new empty caches (a cold start)")
    args = parser.parse_args()
    if args.fresh_cache:  # before dpt_ir (and Warp) read them
        os.environ["DPT_IR_CACHE"] = tempfile.mkdtemp(prefix="bench-radon-dpt-")
        os.environ["WARP_CACHE_PATH"] = tempfile.mkdtemp(prefix="bench-radon-warp-")
    from benchmarks.rounds import measure
    from dpt_ir.reference.radon_ref import radon_apply
    from dpt_ir.runtime.modules import cache_root

    n, theta = args.size, np.linspace(0.0, 180.0, args.angles, endpoint=False)
    x0 = _phantom(n).astype(args.dtype)
    rng = np.random.default_rng(0)
    b = (radon_apply(_phantom(n), list(theta), True) + 0.01 * rng.normal(size=(n, len(theta)))).astype(args.dtype)

    program, facts = _dpt_program(n, theta, args.dtype)
    start = time.perf_counter()
    first = program.value_and_grad(x=x0, b=b)[1]["x"]
    first_s = time.perf_counter() - start
    added = _rss_mib() - facts["rss_before"]
    cache_growth = _tree_bytes(cache_root()) - facts["cache_before"]
    data_mib = (x0.nbytes + b.nbytes) / 2**20

    from skimage.transform import iradon, radon

    x64, b64 = x0.astype(np.float64), b.astype(np.float64)

    def skimage_step() -> np.ndarray:
        r = radon(x64, theta, circle=True) - b64
        return iradon(r, theta, filter_name=None, circle=True)

    def dpt_step() -> np.ndarray:
        return program.value_and_grad(x=x0, b=b)[1]["x"]

    forward = _forward_program(n, theta, args.dtype)
    steps: dict[str, Callable[[], object]] = {"dpt_ir value_and_grad": dpt_step}
    steps["dpt_ir forward alone (run)"] = lambda: forward.run(x=x0)["y"]
    astra_step = _astra_step(x0, b, theta)
    if astra_step is not None:
        steps["ASTRA CPU linear FP + BP"] = astra_step
    steps["skimage radon + iradon(None)"] = skimage_step
    times = measure(steps, args.reps)
    cold = "fresh caches" if args.fresh_cache else "existing caches"
    print(f"radon {n}x{n}, {len(theta)} angles, {args.dtype}, one thread each, median of {args.reps} rounds")
    print(
        f"  dpt_ir set-up: Warp's initialisation {facts['warp_s']:.2f} s and {facts['warp_mib']:.0f} MiB "
        f"(its libraries, once per process); then compile {facts['compile_s']:.2f} s + first call {first_s:.3f} s "
        f"({cold}); peak RSS added {added:.0f} MiB (image + sinogram {data_mib:.1f} MiB); "
        f"disk cache grew {cache_growth / 2**20:.2f} MiB; |grad| max {float(np.abs(first).max()):.3g}"
    )
    print("| contender | CPU ms | wall ms | dpt_ir / it (CPU) | dpt_ir / it (wall) |")
    print("|---|---:|---:|---:|---:|")
    ours = times["dpt_ir value_and_grad"]
    for name, t in times.items():
        ratios = [statistics.median(a / b for a, b in zip(ours[k], t[k], strict=True)) for k in ("cpu", "wall")]
        print(
            f"| {name} | {statistics.median(t['cpu']) * 1e3:.2f} | {statistics.median(t['wall']) * 1e3:.2f} "
            f"| {ratios[0]:.2f} | {ratios[1]:.2f} |"
        )


if __name__ == "__main__":
    main()

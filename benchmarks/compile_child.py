"""Child process of `bench_backend.py` for the compile-time figures.

Run as ``python benchmarks/compile_child.py MODE N`` with ``DPT_IR_CACHE`` and
``WARP_CACHE_PATH`` set by the parent; prints one JSON line (the last line of stdout).

- ``cold``: the first program of the process (beer: `dp.compile`, then its first result,
  which builds the ``value_and_grad`` module), a second different program (chain16:
  `dp.compile` and every plan's module build, `Program.build_all`), then beer again (the
  in-process cache).
- ``warm``: a new process whose caches already hold beer: ``dp.compile`` to first result.

Times are ``time.time()`` stamps (so the parent can measure process start) and
``perf_counter`` intervals. Imports are deferred so that the import time is measured.
"""

from __future__ import annotations

import time

T_START = time.time()  # first statement after interpreter start-up

import json  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402


def main() -> None:
    """Measure and print one JSON line."""
    mode, n = sys.argv[1], int(sys.argv[2])
    t0 = time.perf_counter()
    import warp as wp

    wp.config.kernel_cache_dir = os.environ["WARP_CACHE_PATH"]  # before wp.init
    wp.config.log_level = 30  # warnings only: no per-module load lines
    import numpy as np

    import dpt_ir as dp

    wp.init()
    t_import = time.perf_counter() - t0
    sys.path.insert(0, str(Path(__file__).resolve().parent.parent))
    from benchmarks.graphs import beer, chain16

    side = 1 << (n // 2)
    shape = (side, (1 << n) // side)
    rng = np.random.default_rng(0)
    inputs = {k: rng.random(shape, dtype=np.float32) for k in ("x", "obs", "w")}
    res: dict[str, Any] = {"t_start": T_START, "import_s": t_import, "kernel_cache_dir": wp.config.kernel_cache_dir}

    g = beer(shape)
    t = time.perf_counter()
    p = dp.compile(g, wrt=["x"], device="cpu")
    res["beer_compile_s"] = time.perf_counter() - t
    p.value_and_grad(**inputs)
    res["beer_first_result_s"] = time.perf_counter() - t
    res["beer_cache"] = p.report.cache
    if mode == "cold":
        g2 = chain16(shape)
        t = time.perf_counter()
        p2 = dp.compile(g2, wrt=["x"], device="cpu")
        p2.build_all()  # dp.compile defers each plan's module build to its first use: time all of it
        res["chain16_compile_s"] = time.perf_counter() - t
        res["chain16_cache"] = p2.report.cache
        again = []
        for _ in range(5):
            g3 = beer(shape)  # a new, equal graph object
            t = time.perf_counter()
            p3 = dp.compile(g3, wrt=["x"], device="cpu")
            again.append(time.perf_counter() - t)
        res["beer_again_s"] = sorted(again)[len(again) // 2]
        res["beer_again_first_s"] = again[0]
        res["beer_again_cache"] = p3.report.cache
        res["beer_again_same_object"] = p3 is p
    print(json.dumps(res))


if __name__ == "__main__":
    main()

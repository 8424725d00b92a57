"""The dot test of the matrix-free projectors at full size (issue 29): for a float64 stack ``x``
and a sinogram stack ``g``, ``<R x, g>`` against ``<x, Rᵀ g>``, with ``Rᵀ g`` the compiled
transpose (the gradient of ``sum(g * R x)``), for ``dp.radon`` and ``dp.fanbeam``.

    python benchmarks/dot_tests.py [--slices 64] [--size 256] [--angles 180] [--threads 2]

Prints, per projector, the relative difference ``|<Rx, g> - <x, Rᵀg>| / |<Rx, g>|`` and the
seconds of one ``value_and_grad``. Not a test (it takes seconds and memory); the tests run the
same check on small stacks.
"""

from __future__ import annotations

import argparse
import time

import numpy as np

import dpt_ir as dp


def check(name: str, project: object, shape: tuple[int, ...], threads: int) -> None:
    g = dp.GraphBuilder(f"dot_{name}")
    x = g.input("x", shape, "float64")
    y = project(x)  # type: ignore[operator]
    w = g.input("w", y.shape, "float64", requires_grad=False)
    g.output("y", y)
    g.output("loss", dp.sum(w * y))
    program = dp.compile(g.build(), wrt=["x"], loss="loss", threads=threads)
    rng = np.random.default_rng(0)
    xs, ws = rng.standard_normal(shape), rng.standard_normal(tuple(y.shape))
    start = time.perf_counter()
    out, grads = program.value_and_grad(x=xs, w=ws)
    seconds = time.perf_counter() - start
    lhs, rhs = float(np.sum(out["y"] * ws)), float(np.sum(xs * grads["x"]))
    print(f"{name}: stack {list(shape)} -> {list(y.shape)}, float64: |<Rx,g> - <x,R^T g>| / |<Rx,g>| = "
          f"{abs(lhs - rhs) / abs(lhs):.2e}; value_and_grad {seconds:.2f} s ({threads} thread(s))")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--slices", type=int, default=64)
    parser.add_argument("--size", type=int, default=256)
    parser.add_argument("--angles", type=int, default=180)
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    n, shape = args.size, (args.slices, args.size, args.size)
    theta = np.linspace(0.0, 180.0, args.angles, endpoint=False)
    check("radon", lambda x: dp.radon(x, theta), shape, args.threads)
    fan = {"source_origin": 2.0 * n, "origin_det": 1.0 * n, "det_count": int(1.5 * n)}
    turn = np.linspace(0.0, 2 * np.pi, args.angles, endpoint=False)
    check("fanbeam", lambda x: dp.fanbeam(x, turn, **fan), shape, args.threads)


if __name__ == "__main__":
    main()

"""Per-call overhead benchmark (issue 11): the wall time of one ``program.run`` and one
``program.value_and_grad`` at a small size, where the call path, not the kernels, is
the cost, against ``torch.compile`` and ``jax.jit`` of the same model in the same run.

    python benchmarks/bench_call.py [--size 16] [--rounds 1000] [--cases beer,softmax_xent]

Every case of `benchmarks.cases.CASES` (or ``--cases``), float32, one thread (the process
is pinned to one CPU and the peers are set to one thread, as ``dpt-ir bench --threads 1``).
Contenders, each warmed up (the first call compiles), then timed over ``--rounds``
interleaved rounds (`benchmarks.rounds.measure`: one call of each per round, in a rotated
order): dpt_ir (CPU, NumPy inputs, NumPy results), ``torch.compile`` (forward under
``no_grad`` for ``run``; forward and ``autograd.grad`` in one graph for
``value_and_grad``, `peers_torch.make_value_and_grad`), ``jax.jit`` (of the loss, and of
``jax.value_and_grad``, `peers_jax.make_value_and_grad`), the peers skipped when not
installed. Prints the min and the median microseconds per call, each peer's ratio to
dpt_ir (peer time / dpt_ir time: above 1, dpt_ir is faster), and the load average before
and after.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.suite import configure_environment  # noqa: E402

Step = Callable[[], Any]


def dpt_ir_steps(name: str, shape: tuple[int, int], inputs: dict[str, Any]) -> dict[str, Step]:
    import dpt_ir as dp
    from benchmarks.cases import CASES

    case = CASES[name]
    program = dp.compile(case.build(shape), wrt=[case.wrt], device="cpu")
    return {"run": lambda: program.run(**inputs), "value_and_grad": lambda: program.value_and_grad(**inputs)}


def torch_steps(name: str, inputs: dict[str, Any], wrt: str) -> dict[str, Step]:
    import torch

    from benchmarks import peers_torch

    torch.set_num_threads(1)
    tensors = {k: peers_torch._tensor(k, v, "cpu") for k, v in inputs.items()}
    forward = torch.compile(peers_torch.LOSSES[name], fullgraph=True)

    def run() -> Any:
        with torch.no_grad():
            return forward(**tensors)

    vg = peers_torch.make_value_and_grad(name, inputs, wrt, compiled=True)
    return {"run": run, "value_and_grad": vg}


def jax_steps(name: str, inputs: dict[str, Any], wrt: str) -> dict[str, Step]:
    import jax

    from benchmarks import peers_jax

    arrays = {k: jax.device_put(v != 0 if k == "mask" else v) for k, v in inputs.items()}
    forward = jax.jit(peers_jax.LOSSES[name])
    return {
        "run": lambda: forward(**arrays).block_until_ready(),
        "value_and_grad": peers_jax.make_value_and_grad(name, inputs, wrt),
    }


def peers(name: str, inputs: dict[str, Any], wrt: str) -> dict[str, dict[str, Step]]:
    """The installed peers' steps for case ``name``."""
    out = {}
    for label, make, module in (("torch.compile", torch_steps, "torch"), ("jax.jit", jax_steps, "jax")):
        try:
            __import__(module)
        except ImportError:
            print(f"({label}: {module} is not installed, skipped)")
            continue
        out[label] = make(name, inputs, wrt)
    return out


def measure_case(name: str, size: int, rounds: int) -> list[dict[str, Any]]:
    import numpy as np

    from benchmarks.cases import CASES
    from benchmarks.rounds import measure

    case = CASES[name]
    shape = (size, size)
    inputs = case.inputs(shape, np.random.default_rng(0))
    contenders = {"dpt_ir": dpt_ir_steps(name, shape, inputs), **peers(name, inputs, case.wrt)}
    rows = []
    for entry in ("run", "value_and_grad"):
        times = measure({label: steps[entry] for label, steps in contenders.items()}, rounds)
        us = {label: [t * 1e6 for t in t_["wall"]] for label, t_ in times.items()}
        base = us["dpt_ir"]
        for label, values in us.items():
            rows.append(
                {
                    "case": name,
                    "entry": entry,
                    "contender": label,
                    "min_us": min(values),
                    "median_us": statistics.median(values),
                    "ratio_min": min(values) / min(base),
                    "ratio_median": statistics.median(values) / statistics.median(base),
                }
            )
    return rows


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=16, help="the side of the square inputs (default 16)")
    parser.add_argument("--rounds", type=int, default=1000, help="interleaved timing rounds (default 1000)")
    parser.add_argument("--cases", default=None, help="comma-separated case names (default: every case)")
    args = parser.parse_args(argv)
    configure_environment(1, fresh_caches=False)
    from benchmarks.cases import CASES
    from dpt_ir.cli.commands import format_table

    names = [c.strip() for c in args.cases.split(",")] if args.cases else list(CASES)
    print(f"load average before: {os.getloadavg()}")
    rows = [row for name in names for row in measure_case(name, args.size, args.rounds)]
    print(f"load average after: {os.getloadavg()}")
    header = ["case", "entry", "contender", "min us", "median us", "min / dpt_ir", "median / dpt_ir"]
    table = [
        [r["case"], r["entry"], r["contender"]]
        + [f"{r[k]:.1f}" for k in ("min_us", "median_us")]
        + [f"{r[k]:.2f}" for k in ("ratio_min", "ratio_median")]
        for r in rows
    ]
    print(f"{args.size}x{args.size} float32, one thread, {args.rounds} rounds, wall time per call")
    print(format_table(header, table))


if __name__ == "__main__":
    main()

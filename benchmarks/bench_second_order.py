"""Forward mode and second order (issue 30): ``program.jvp`` against ``program.run`` and
``program.hvp`` against ``program.value_and_grad``, and both against ``torch.func`` (eager) of
the same model, measured in the same run, one thread.

    python benchmarks/bench_second_order.py [--size 1024] [--reps 20] [--cases beer,softmax_xent,imaging]

Every case of `benchmarks.cases.CASES` named (float32, ``--size`` squared), compiled with
``threads=1``; the process is pinned to one CPU (`benchmarks.suite.configure_environment`).
Contenders, warmed up (the first call builds the plan) and timed over ``--reps`` rotating
rounds (`benchmarks.rounds.measure`; the ratios use each one's fastest round, the median is
printed too): dpt_ir's run, value_and_grad, jvp and
hvp (NumPy inputs and results), and torch.func's ``jvp`` of the loss and forward-over-reverse
``jvp(grad(loss))`` (`benchmarks.peers_torch.LOSSES`; skipped when torch is missing), and
``jax.jit`` of ``jax.jvp`` of the loss and of forward-over-reverse ``jax.jvp(jax.grad(loss))``
(`benchmarks.peers_jax.LOSSES`; XLA single-threaded by the ``XLA_FLAGS`` that
`configure_environment` sets before JAX is imported, and the pinned CPU; skipped when JAX is
missing). Every peer returns its results ready (``block_until_ready``). Prints the kernels of
each plan, the milliseconds, jvp/run and hvp/value_and_grad, and each peer's time over
dpt_ir's (above 1: dpt_ir is faster).
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

from benchmarks.suite import configure_environment  # noqa: E402

Step = Callable[[], Any]


def dpt_ir_steps(name: str, shape: tuple[int, int], inputs: dict[str, Any], v: Any) -> tuple[dict[str, Step], Any]:
    import dpt_ir as dp
    from benchmarks.cases import CASES

    case = CASES[name]
    program = dp.compile(case.build(shape), wrt=[case.wrt], device="cpu", threads=1)
    vec = {case.wrt: v}
    steps = {
        "run": lambda: program.run(**inputs),
        "value_and_grad": lambda: program.value_and_grad(**inputs),
        "jvp": lambda: program.jvp(vec, **inputs),
        "hvp": lambda: program.hvp(vec, **inputs),
    }
    return steps, program


def torch_steps(name: str, inputs: dict[str, Any], wrt: str, v: Any) -> dict[str, Step]:
    import torch
    from torch.func import grad, jvp

    from benchmarks import peers_torch

    torch.set_num_threads(1)
    tensors = {k: peers_torch._tensor(k, a, "cpu") for k, a in inputs.items()}
    loss = peers_torch.LOSSES[name]
    x, t = tensors.pop(wrt), torch.from_numpy(v)

    def f(arg: Any) -> Any:
        return loss(**{wrt: arg}, **tensors)

    return {"torch jvp": lambda: jvp(f, (x,), (t,)), "torch hvp": lambda: jvp(grad(f), (x,), (t,))}


def jax_steps(name: str, inputs: dict[str, Any], wrt: str, v: Any) -> dict[str, Step]:
    """``jax.jit`` of ``jax.jvp`` and of ``jax.jvp(jax.grad(loss))``, the other inputs traced
    arguments (not constants XLA could fold); the first call compiles (the warm-up)."""
    import jax
    import numpy as np

    from benchmarks import peers_jax

    jax.config.update("jax_platforms", "cpu")
    arrays = {k: jax.device_put(np.asarray(a != 0) if k == "mask" else np.asarray(a)) for k, a in inputs.items()}
    x, t = arrays.pop(wrt), jax.device_put(v)
    loss = peers_jax.LOSSES[name]

    def f(arg: Any, others: dict[str, Any]) -> Any:
        return loss(**{wrt: arg}, **others)

    jvp_fn = jax.jit(lambda a, d, o: jax.jvp(lambda y: f(y, o), (a,), (d,)))
    hvp_fn = jax.jit(lambda a, d, o: jax.jvp(jax.grad(lambda y: f(y, o)), (a,), (d,)))

    def ready(pair: tuple[Any, Any]) -> tuple[Any, Any]:
        return pair[0].block_until_ready(), pair[1].block_until_ready()

    return {"jax jvp": lambda: ready(jvp_fn(x, t, arrays)), "jax hvp": lambda: ready(hvp_fn(x, t, arrays))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--size", type=int, default=1024)
    parser.add_argument("--reps", type=int, default=20)
    parser.add_argument("--cases", default="beer,softmax_xent,imaging")
    args = parser.parse_args()
    configure_environment(1, fresh_caches=False)
    import numpy as np

    from benchmarks.cases import CASES
    from benchmarks.rounds import measure

    shape = (args.size, args.size)
    for name in args.cases.split(","):
        case = CASES[name]
        rng = np.random.default_rng(0)
        inputs = case.inputs(shape, rng)
        v = rng.standard_normal(shape).astype(np.float32)
        steps, program = dpt_ir_steps(name, shape, inputs, v)
        try:
            steps.update(torch_steps(name, inputs, case.wrt, v))
        except ImportError as exc:
            print(f"  (torch.func skipped: {exc})")
        try:
            steps.update(jax_steps(name, inputs, case.wrt, v))
        except ImportError as exc:
            print(f"  (jax skipped: {exc})")
        measured = measure(steps, args.reps)
        # The fastest round: the machine may be shared, and contention only ever adds time.
        times = {k: min(t["wall"]) for k, t in measured.items()}
        medians = {k: statistics.median(t["wall"]) for k, t in measured.items()}
        kernels = {k: len(p.launches) for k, p in {**program.plans, **program.derived.built}.items()}
        print(f"{name} {shape[0]}x{shape[1]}: kernels {kernels}")
        print("  min   " + "  ".join(f"{k} {1e3 * s:.2f} ms" for k, s in times.items()))
        print("  median " + "  ".join(f"{k} {1e3 * s:.2f} ms" for k, s in medians.items()))
        line = f"  jvp/run {times['jvp'] / times['run']:.2f}"
        line += f"  hvp/value_and_grad {times['hvp'] / times['value_and_grad']:.2f}"
        if "torch jvp" in times:
            line += f"  torch.func jvp/dpt_ir {times['torch jvp'] / times['jvp']:.2f}"
            line += f"  torch.func hvp/dpt_ir {times['torch hvp'] / times['hvp']:.2f}"
        if "jax jvp" in times:
            line += f"  jax.jit jvp/dpt_ir {times['jax jvp'] / times['jvp']:.2f}"
            line += f"  jax.jit hvp/dpt_ir {times['jax hvp'] / times['hvp']:.2f}"
        print(line)


if __name__ == "__main__":
    main()

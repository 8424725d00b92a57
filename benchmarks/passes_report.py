"""What the passes buy, per benchmark graph: saved bytes and kernel counts.

For each graph of `benchmarks.graphs` (float32, 512x512 by default) it runs the default
pipeline for ``wrt`` the first input and prints:

- saved bytes against a save-every-intermediate baseline: the bytes of every forward
  value (not a program input) that some backward node reads in the joint graph before
  `saved_attributes` partitions it;
- fusion groups (kernels) against one kernel per op (the non-constant nodes of each phase
  in that same joint graph), forward and backward separately.

Run: ``python -m benchmarks.passes_report [--shape 1024 256]``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass

import dpt_ir as dp
from benchmarks.graphs import BENCHMARK_GRAPHS
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.ir.records import phase_of, saved_bytes
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions


@dataclass(frozen=True)
class Row:
    """One graph's figures."""

    name: str
    baseline_bytes: int
    saved_bytes: int
    ops: dict[str, int]
    kernels: dict[str, int]


def baseline_saved_bytes(joint: dp.Graph) -> int:
    """Bytes of the forward non-input values read by any backward node of ``joint``."""
    read = {i for n in joint.nodes if phase_of(n) == "backward" for i in n.inputs}
    return sum(n.type.nbytes for n in joint.nodes if phase_of(n) == "forward" and n.name in read)


def ops_per_phase(joint: dp.Graph) -> dict[str, int]:
    """Non-constant nodes of each phase: the kernel count without fusion."""
    out = {"forward": 0, "backward": 0}
    for n in joint.nodes:
        if n.inputs:
            out[phase_of(n)] += 1
    return out


def measure(name: str, graph: dp.Graph) -> Row:
    result = run_pipeline(graph, CompileOptions(wrt=(graph.inputs[0].name,)))
    passes = [r.name for r in result.records]
    joint = result.stages[passes.index("saved_attributes") - 1]  # the joint graph, unpartitioned
    final = result.graph
    kernels = {"forward": 0, "backward": 0}
    for g in plan_of(final).groups:
        kernels[g.phase] += 1
    return Row(name, baseline_saved_bytes(joint), saved_bytes(final), ops_per_phase(joint), kernels)


def _ratio(a: int, b: int) -> str:
    return f"{a / b:.3f}" if b else "-"


def table(rows: list[Row]) -> str:
    headers = ["graph", "saved B", "baseline B", "ratio", "fwd kernels/ops", "bwd kernels/ops"]
    body = [
        [
            r.name,
            str(r.saved_bytes),
            str(r.baseline_bytes),
            _ratio(r.saved_bytes, r.baseline_bytes),
            f"{r.kernels['forward']}/{r.ops['forward']}",
            f"{r.kernels['backward']}/{r.ops['backward']}",
        ]
        for r in rows
    ]
    widths = [max(len(h), *(len(b[k]) for b in body)) for k, h in enumerate(headers)]
    lines = ["  ".join(c.ljust(w) for c, w in zip(line, widths, strict=True)) for line in [headers, *body]]
    lines.insert(1, "  ".join("-" * w for w in widths))
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shape", type=int, nargs=2, default=(512, 512), metavar=("ROWS", "COLS"))
    parser.add_argument("--dtype", default="float32", choices=("float32", "float64"))
    args = parser.parse_args(argv)
    shape = (args.shape[0], args.shape[1])
    rows = [measure(name, build(shape, args.dtype)) for name, build in BENCHMARK_GRAPHS.items()]
    print(f"passes report: {args.dtype} {shape[0]}x{shape[1]}, default pipeline, wrt the first input")
    print(table(rows))


if __name__ == "__main__":
    main()

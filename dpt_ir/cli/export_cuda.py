"""``dpt-ir export-cuda GRAPH.json --wrt x --out DIR [--inputs in.npz | --seed N]``.

Compiles the graph on the CPU (the reference run that tells which plans raise a
NumericalError), then writes the bundle of its CUDA plans (`dpt_ir.export.export_cuda`).
Registered by `dpt_ir.cli.commands.build_parser` through `add_parser`; errors follow the CLI's
contract (a `ContractError` is one ``error:`` line, exit 2).
"""

from __future__ import annotations

import argparse
from typing import Any

from dpt_ir.ir.errors import ContractError


def add_parser(sub: Any, parents: list[argparse.ArgumentParser]) -> None:
    p = sub.add_parser(
        "export-cuda",
        parents=parents,
        help="write a program's CUDA kernels, launch plan and reference results (benchmarks/gpu_check.py runs them)",
    )
    p.add_argument("graph", metavar="GRAPH.json", help="graph document (Graph.model_dump_json())")
    p.add_argument("--wrt", action="append", metavar="NAME", help="differentiate with respect to this input")
    p.add_argument("--loss", metavar="NAME", help="the output value_and_grad differentiates")
    p.add_argument("--out", required=True, metavar="DIR", help="the bundle folder (created)")
    # Exactly one of the two: a required group, so --help shows `(--inputs IN.npz | --seed N)`.
    source = p.add_mutually_exclusive_group(required=True)
    source.add_argument("--inputs", metavar="IN.npz", help="inputs shipped in ref.npz (one array per graph input)")
    source.add_argument(
        "--seed", type=int, metavar="N", help="draw the inputs from this seed on the device instead (uniform, cast)"
    )
    p.add_argument(
        "--range",
        action="append",
        metavar="NAME=LO:HI",
        help="the interval a drawn input is uniform in (default 0.5:2)",
    )
    p.add_argument("--plans", metavar="LIST", help="comma list of run, value_and_grad, tape (default: every plan)")
    p.add_argument(
        "--reference",
        choices=("interpreter", "program"),
        default="interpreter",
        help="what computes ref.npz: the NumPy interpreter (default) or the compiled CPU program (GPU sizes)",
    )
    p.add_argument("--no-checks", action="store_true", help="compile without the status word")
    p.set_defaults(func=cmd_export_cuda)


def _ranges(items: list[str] | None) -> dict[str, tuple[float, float]]:
    out = {}
    for item in items or ():
        name, _, span = item.partition("=")
        lo, _, hi = span.partition(":")
        try:
            out[name] = (float(lo), float(hi))
        except ValueError:
            raise ContractError(f"--range {item!r}: expected NAME=LO:HI with numbers, e.g. x=0.5:2") from None
    return out


def cmd_export_cuda(args: argparse.Namespace) -> int:
    from dpt_ir.cli.common import compile_graph, load_graph, load_inputs, names_of, progress
    from dpt_ir.export import export_cuda

    graph = load_graph(args.graph)
    inputs = load_inputs(args.inputs) if args.inputs else None
    ranges = _ranges(args.range)
    plans = names_of([args.plans]) if args.plans else None
    wrt = names_of(args.wrt)
    program = compile_graph(graph, args.graph, wrt, args.loss, device="cpu", checks=not args.no_checks)
    out = export_cuda(
        program, args.out, plans=plans, inputs=inputs, seed=args.seed, ranges=ranges, reference=args.reference
    )
    progress(f"wrote {out}/kernels.cu, plan.json, ref.npz")
    return 0

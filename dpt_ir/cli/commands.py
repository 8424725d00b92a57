"""The ``dpt-ir`` command line: ``dpt-ir ops`` (the op table), ``dpt-ir show GRAPH
[--after PASS]`` (the textual IR of a graph document, JSON or textual IR, optionally after
a pass of the default pipeline), ``dpt-ir compile`` (compile and summarise), ``dpt-ir run``
(evaluate on inputs from an ``.npz``, optionally with gradients), ``dpt-ir cache
info|clear`` (the on-disk compile cache), ``dpt-ir bench`` (the benchmark scripts of the
repository), ``dpt-ir export-cuda`` (a CUDA bundle for ``benchmarks/gpu_check.py``,
`dpt_ir.cli.export_cuda`) and ``dpt-ir --version``.

Contract: `main` returns the exit status instead of raising. A `ContractError` (a bad
graph, a file that cannot be read or is not a graph document) prints one line
``error: ...`` on stderr and returns 2; ``--debug`` lets the exception propagate with
its traceback instead. A `NumericalError` (non-finite values found at a checkpoint)
prints one ``error:`` line and returns 1. Each subcommand is one ``cmd_<name>(args) -> int`` function
registered in `build_parser`.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpt_ir.cli.common import EXIT_NUMERICAL, EXIT_USAGE, compile_graph, load_graph, load_inputs, names_of, progress
from dpt_ir.ir.errors import ContractError, NumericalError
from dpt_ir.ir.registry import ALL_INPUTS, OpDef, all_ops
from dpt_ir.runtime.report import LoopProgramReport
from dpt_ir.version import __version__

Command = Callable[[argparse.Namespace], int]
_DEBUG_HELP = "show the full traceback of an error"


# -- helpers ----------------------------------------------------------------------


def format_bytes(n: int) -> str:
    """``n`` bytes in B, KiB or MiB."""
    if n < 1024:
        return f"{n} B"
    if n < 1024 * 1024:
        return f"{n / 1024:.1f} KiB"
    return f"{n / (1024 * 1024):.1f} MiB"


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]], numeric: bool = False) -> str:
    """Left-aligned columns separated by two spaces, a dashed rule under the header;
    ``numeric``: every column but the first right-aligned (columns of figures)."""
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        pairs = enumerate(zip(cells, widths, strict=True))
        return "  ".join(c.rjust(w) if numeric and k else c.ljust(w) for k, (c, w) in pairs).rstrip()

    rule = "  ".join("-" * w for w in widths)
    return "\n".join([line(header), rule, *(line(r) for r in rows)])


# -- dpt-ir ops ----------------------------------------------------------------------


OPS_HEADER = ("name", "kind", "arity", "grad inputs", "saved")


def op_row(op: OpDef) -> tuple[str, str, str, str, str]:
    """One row of the op table.

    - arity: the input count, ``*`` for a variadic op;
    - grad inputs: indices of differentiable inputs (``*`` for every input of a variadic
      op), ``-`` when none;
    - saved: what the backward reads from the forward: ``in<i>`` (``in*`` for all inputs
      of a variadic op), ``out``, and derived attribute names; ``-`` when nothing.
    """
    arity = "*" if op.arity is None else str(op.arity)
    d = op.derivative
    if d is None:
        return (op.name, op.kind, arity, "-", "-")
    if op.arity is None:
        grads = "-" if d.formula_for(0) is None else "*"
        saved_in = ["in*"] if d.saved_inputs == ALL_INPUTS else []
    else:
        grads = ",".join(str(i) for i in op.differentiable_inputs(op.arity)) or "-"
        saved_in = [f"in{i}" for i in range(op.arity) if d.saves_input(i)]
    saved = saved_in + (["out"] if d.saved_output else []) + sorted(d.derived)
    return (op.name, op.kind, arity, grads, ",".join(saved) or "-")


def ops_markdown() -> str:
    """The op reference (``docs/ops.md``), generated from the op table."""
    lines = [
        "# Op reference",
        "",
        "Generated from the op table by `dpt-ir ops --markdown > docs/ops.md`; a test fails when",
        "this file is stale. *saved*: what the backward reads from the forward (`in<i>`: an input,",
        "`out`: the output, other names: derived attributes such as an element count).",
        "",
        "| " + " | ".join(OPS_HEADER) + " | description |",
        "|" + "---|" * (len(OPS_HEADER) + 1),
    ]
    for op in all_ops():
        cells = [f"`{c}`" if k == 0 else c for k, c in enumerate(op_row(op))]
        lines.append("| " + " | ".join([*cells, op.doc.replace("|", "\\|")]) + " |")
    return "\n".join(lines) + "\n"


def cmd_ops(args: argparse.Namespace) -> int:
    if getattr(args, "markdown", False):
        print(ops_markdown(), end="")
        return 0
    """Print the op table, one row per registered op, sorted by name."""
    print(format_table(OPS_HEADER, [op_row(op) for op in all_ops()]))
    return 0


# -- dpt-ir show ---------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    """Print the textual IR of the graph document ``args.graph``; with ``--after PASS`` the
    graph after the last run of that pass of the default pipeline (``--wrt`` differentiates)."""
    graph = load_graph(args.graph)
    wrt = names_of(args.wrt)
    if args.after is None:
        if wrt:
            raise ContractError("show: --wrt only applies with --after PASS")
    else:
        from dpt_ir.api.autodiff import check_wrt
        from dpt_ir.passes.manager import DEFAULT_PIPELINE, run_pipeline
        from dpt_ir.passes.options import CompileOptions

        known = list(dict.fromkeys(DEFAULT_PIPELINE))
        if args.after not in known:
            raise ContractError(f"show: unknown pass {args.after!r}; the default pipeline's passes are {known}")
        options = CompileOptions(wrt=check_wrt(graph, wrt))
        graph = run_pipeline(graph, options).after(args.after)
    text = graph.to_text()
    print(text, end="" if text.endswith("\n") else "\n")
    return 0


# -- dpt-ir compile ------------------------------------------------------------------


def cmd_compile(args: argparse.Namespace) -> int:
    """Compile the graph document and print a summary of the program `dp.compile` built."""
    graph = load_graph(args.graph)
    if args.render:  # before the (slow) compile
        if args.dump_dir is None:
            raise ContractError("--render needs --dump-dir DIR (the .dot files to render)")
        graphviz_dot()
    program = compile_graph(
        graph,
        args.graph,
        names_of(args.wrt),
        args.loss,
        device=args.device,
        dump_dir=args.dump_dir,
        checks=not args.no_checks,
        fuse=not args.no_fuse,
        recompute=not args.no_recompute,
        halo_budget=args.halo_budget,
        recompute_budget=args.recompute_budget,
    )
    if isinstance(program.report, LoopProgramReport):  # a loop program (dp.scan): its pieces are built by dp.compile
        print_loop_summary(program.report)
        return 0
    build = time.perf_counter()
    program.build_all()  # the summary claims a full build: every plan's module, not only on first use
    report = program.report
    cache = {"miss": "miss (compiled)", "disk": "hit (disk)", "memory": "hit (memory)"}.get(report.cache)
    modules = ", ".join(b.module for b in report.builds.values())
    print(f"graph {report.graph!r} on {report.device}: modules {modules}")
    print(f"wrt {list(program.wrt) or '-'}; loss {program.loss or '-'}; options {describe_options(report.options)}")
    rows = [
        (
            name,
            str(p.kernels),
            str(p.forward_launches),
            str(p.backward_launches),
            format_bytes(p.saved_bytes),
            format_bytes(p.workspace_bytes),
            f"{report.builds[name].build_seconds or 0.0:.2f}",
        )
        for name, p in report.plans.items()
    ]
    header = ("plan", "kernels", "fwd launches", "bwd launches", "saved", "workspace", "build s")
    print(format_table(header, rows))
    build_s = time.perf_counter() - build
    print(f"cache {cache or report.cache}; compile {report.compile_seconds:.2f} s, module builds {build_s:.2f} s")
    if args.dump_dir is not None:
        print(f"dumps (per-pass IR, fusion, saved values, kernels, report.json) in {Path(args.dump_dir).resolve()}")
        if args.render:
            print(f"rendered {render_dumps(Path(args.dump_dir))} graph picture(s) to SVG")
    return 0


def print_loop_summary(report: LoopProgramReport) -> None:
    """The `dpt-ir compile` summary of a loop program: its module(s), kernels and loops."""
    print(f"graph {report.graph!r} on {report.device}: modules {', '.join(report.modules)}")
    rows = [
        (
            loop.node,
            loop.op,
            str(loop.length),
            str(loop.body_kernels),
            str(loop.vjp_kernels),
        )
        for loop in report.loops
    ]
    print(format_table(("loop", "op", "length", "body kernels", "vjp kernels"), rows))
    print(f"{report.distinct_kernels} distinct kernels; compile {report.compile_seconds:.2f} s")


def describe_options(options: dict[str, Any]) -> str:
    """The compile options a program was built with, in one line."""
    on = {True: "on", False: "off"}
    budget = options["recompute_budget"]
    return (
        f"checks {on[options['checks']]}, fuse {on[options['fuse']]}, recompute {on[options['recompute']]} "
        f"(budget {'none' if budget is None else budget}), halo budget {options['halo_budget']}"
    )


def graphviz_dot() -> str:
    """The path of Graphviz's ``dot``; ContractError when it is not on PATH."""
    dot = shutil.which("dot")
    if dot is None:
        raise ContractError("--render needs Graphviz's `dot` on PATH (e.g. `apt-get install graphviz`)")
    return dot


def render_dumps(directory: Path) -> int:
    """Render every ``*.dot`` under ``directory`` to an ``.svg`` beside it with Graphviz
    ``dot``; ContractError when Graphviz is not installed or fails."""
    dot = graphviz_dot()
    files = sorted(directory.rglob("*.dot"))
    for k, path in enumerate(files, 1):
        print(f"[{k}/{len(files)}] {path.name}", file=sys.stderr)
        done = subprocess.run(
            [dot, "-Tsvg", str(path), "-o", str(path.with_suffix(".svg"))], capture_output=True, text=True, check=False
        )
        if done.returncode != 0:
            raise ContractError(f"{path}: Graphviz failed: {done.stderr.strip()}")
    return len(files)


# -- dpt-ir run ----------------------------------------------------------------------


def describe(name: str, arr: np.ndarray) -> str:
    """``name  shape (4, 4)  float32`` and, for a scalar, ``= value``."""
    line = f"{name}  shape {tuple(arr.shape)}  {arr.dtype}"
    if arr.ndim == 0 or arr.size == 1:
        line += f"  = {arr.reshape(()).item()!r}"
    return line


def show_values(arr: np.ndarray) -> str:
    """The values of a non-scalar result for the terminal, indented under its `describe`
    line: NumPy's printout, elided past 1000 elements, plus min, max and mean when it
    has numbers (what a user checks first)."""
    text = np.array2string(arr, threshold=1000, edgeitems=3, max_line_width=100)
    lines = ["  " + line for line in text.splitlines()]
    if arr.size and arr.dtype.kind in "fiu":
        lines.append(f"  min {arr.min()}  max {arr.max()}  mean {arr.mean(dtype=np.float64)}")
    return "\n".join(lines)


def cmd_run(args: argparse.Namespace) -> int:
    """Evaluate the graph on the inputs of an ``.npz``. With ``--out`` write outputs (and
    ``grad.<name>``) there and print one `describe` line per array; without it print
    each array's values too (`show_values`) and write nothing."""
    from dpt_ir.reference.interpreter import check_inputs

    graph = load_graph(args.graph)
    inputs = load_inputs(args.inputs)
    try:
        check_inputs(graph, inputs)  # before the (slow) compile: wrong names, shapes, dtypes
    except ContractError as exc:
        raise ContractError(f"{args.inputs}: {exc}") from None
    out_path = None if args.out is None else Path(args.out)
    if out_path is not None and not out_path.parent.is_dir():
        raise ContractError(f"--out {args.out}: folder {str(out_path.parent)!r} does not exist")
    grad = names_of(args.grad)
    program = compile_graph(graph, args.graph, grad, args.loss, device=args.device, checks=not args.no_checks)
    if grad:
        outs, grads = program.value_and_grad(**inputs)
        results = {**outs, **{f"grad.{name}": g for name, g in grads.items()}}
    else:
        results = program.run(**inputs)
    if out_path is None:
        for name, arr in results.items():
            arr = np.asarray(arr)
            print(describe(name, arr))
            if arr.size > 1:
                print(show_values(arr))
        return 0
    try:
        with out_path.open("wb") as fh:
            np.savez(fh, **results)
    except OSError as exc:
        raise ContractError(f"--out {args.out}: cannot write ({exc.strerror or exc})") from None
    for name, arr in results.items():
        print(describe(name, np.asarray(arr)))
    progress(f"wrote {len(results)} array(s) to {out_path}")
    return 0


# -- dpt-ir cache --------------------------------------------------------------------


def cache_entries(root: Path) -> list[tuple[str, str, int, int]]:
    """``(key, graph name or state, bytes, bytes of Warp's files)`` of every entry under
    ``root``, by key (a loop program's entry: its graph's name and piece count)."""
    from dpt_ir.runtime.modules import read_entry, warp_cache_dir

    rows = []
    for entry in sorted(p for p in root.iterdir() if p.is_dir()) if root.is_dir() else []:
        record, _, problem = read_entry(entry, entry.name)
        if record is not None:
            payload = json.loads(record.payload)
            graphs = payload["graphs"]  # a program's plans, named after its graph; or a loop program's pieces
            state = payload.get("title") or (json.loads(next(iter(graphs.values())))["name"] if graphs else "-")
        else:
            state = f"damaged ({problem})" if problem else "incomplete"
        size = sum(f.stat().st_size for f in entry.rglob("*") if f.is_file())
        warp = sum(f.stat().st_size for f in warp_cache_dir().glob(f"wp_dpt_ir_gen_{entry.name}_*/*") if f.is_file())
        rows.append((entry.name, state, size, warp))
    return rows


def cmd_cache(args: argparse.Namespace) -> int:
    """``info``: where the cache is, its size and entries (a damaged entry says why; the
    next compile of it rebuilds it). ``clear``: delete every entry and the binaries Warp
    keeps for them (nothing else of Warp's cache)."""
    from dpt_ir.runtime.modules import cache_root, purge_warp, warp_cache_dir

    root = cache_root()
    entries = cache_entries(root)
    total = sum(size + warp for _, _, size, warp in entries)
    count = f"{len(entries)} entr{'y' if len(entries) == 1 else 'ies'}"
    if args.action == "clear":
        for key, *_ in entries:
            shutil.rmtree(root / key, ignore_errors=True)
            purge_warp(f"dpt_ir_gen_{key}")
        print(f"cleared {count} ({format_bytes(total)}) from {root} and their binaries from {warp_cache_dir()}")
        return 0
    where = "from DPT_IR_CACHE" if os.environ.get("DPT_IR_CACHE") else "the default; set DPT_IR_CACHE to move it"
    print(f"cache {root} ({where}); Warp's binaries in {warp_cache_dir()}")
    print(f"{count}, {format_bytes(total)}")
    if entries:
        rows = [(k, g, format_bytes(n), format_bytes(w)) for k, g, n, w in entries]
        print(format_table(("key", "graph", "size", "warp binary"), rows))
    return 0


# -- dpt-ir bench --------------------------------------------------------------------


def benchmarks_dir() -> Path | None:
    """The repository's ``benchmarks/`` folder (next to the package, or in the current
    folder), or None for an installed package without the repository."""
    import dpt_ir

    for root in (Path(dpt_ir.__file__).resolve().parents[1], Path.cwd()):
        folder = root / "benchmarks"
        if (folder / "suite.py").is_file():
            return folder
    return None


def cmd_bench(args: argparse.Namespace) -> int:
    """Run the repository's benchmark suite (``benchmarks/suite.py``) in a subprocess,
    forwarding ``--quick`` and every other option to it."""
    folder = benchmarks_dir()
    if folder is None:
        raise ContractError(
            "bench: the benchmarks/ folder is not here; `dpt-ir bench` runs the repository's benchmark "
            "suite, so run it from a checkout of the dpt_ir repository"
        )
    cmd = [sys.executable, str(folder / "suite.py"), *(["--quick"] if args.quick else []), *args.suite_args]
    sys.stdout.flush()
    return subprocess.run(cmd, cwd=folder.parent, check=False).returncode


# -- entry point ---------------------------------------------------------------------


def build_parser() -> argparse.ArgumentParser:
    """The argument parser; each subparser sets ``func`` to its ``cmd_*`` function."""
    debug = argparse.ArgumentParser(add_help=False)
    # SUPPRESS: a subcommand's --debug must not reset one given before the subcommand.
    debug.add_argument("--debug", action="store_true", default=argparse.SUPPRESS, help=_DEBUG_HELP)
    parser = argparse.ArgumentParser(
        prog="dpt-ir",
        description="Compile differentiable operator graphs into fused NVIDIA Warp kernels.",
    )
    parser.add_argument("--debug", action="store_true", default=False, help=_DEBUG_HELP)
    parser.add_argument("--version", action="version", version=f"dpt-ir {__version__}")
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ops = sub.add_parser("ops", parents=[debug], help="print the op table")
    ops.add_argument("--markdown", action="store_true", help="print the op reference as Markdown (docs/ops.md)")
    ops.set_defaults(func=cmd_ops)

    show = sub.add_parser("show", parents=[debug], help="print the textual IR of a graph document (JSON or .ir)")
    show.add_argument("graph", metavar="GRAPH", help="graph document: JSON or textual IR (a dumped .ir file)")
    show.add_argument("--after", metavar="PASS", help="the IR after this pass of the default pipeline")
    show.add_argument("--wrt", action="append", metavar="NAME", help=_WRT_HELP)
    show.set_defaults(func=cmd_show)

    comp = sub.add_parser("compile", parents=[debug], help="compile a graph JSON document and summarise the program")
    comp.add_argument("graph", metavar="GRAPH.json", help="graph document (Graph.model_dump_json())")
    comp.add_argument("--wrt", action="append", metavar="NAME", help=_WRT_HELP)
    comp.add_argument("--loss", metavar="NAME", help="the output value_and_grad differentiates")
    comp.add_argument("--dump-dir", metavar="DIR", help="write per-pass IR, fusion and kernel dumps here")
    comp.add_argument("--render", action="store_true", help="also render every .dot dump to SVG (needs Graphviz)")
    _add_device_options(comp)
    comp.add_argument("--no-fuse", action="store_true", help="one kernel per op (to compare with the fused program)")
    comp.add_argument("--no-recompute", action="store_true", help="save every value the backward reads")
    comp.add_argument(
        "--recompute-budget",
        type=int,
        metavar="N",
        help="op work per element the backward may spend recomputing a "
        "value before saving it (default by device: 16 on the CPU, no limit on CUDA)",
    )
    comp.add_argument(
        "--halo-budget",
        type=int,
        metavar="N",
        help="work per element a stencil may spend recomputing its producers "
        "(default by device: 48 on the CPU, 160 on CUDA)",
    )
    comp.set_defaults(func=cmd_compile)

    run = sub.add_parser("run", parents=[debug], help="evaluate a graph on inputs from an .npz file")
    run.add_argument("graph", metavar="GRAPH.json", help="graph document (Graph.model_dump_json())")
    run.add_argument("--inputs", required=True, metavar="IN.npz", help="one array per graph input (np.savez)")
    run.add_argument(
        "--out", metavar="OUT.npz", help="write outputs (and grad.<name>) here (default: print their values)"
    )
    run.add_argument(
        "--grad", action="append", metavar="NAME", help="also write the gradient wrt this input " + _REPEAT
    )
    run.add_argument("--loss", metavar="NAME", help="the output --grad differentiates (default: the scalar output)")
    _add_device_options(run)
    run.set_defaults(func=cmd_run)

    cache = sub.add_parser("cache", parents=[debug], help="the on-disk compile cache: info or clear")
    cache.add_argument("action", choices=["info", "clear"], help="info: where, size, entries; clear: delete entries")
    cache.set_defaults(func=cmd_cache)

    bench = sub.add_parser(
        "bench",
        parents=[debug],
        help="run the benchmark suite: every case against every installed peer",
        epilog="Other options (--cases, --peers, --size, --reps, --threads, --device, --json, --plot, "
        "--warm-caches) go to benchmarks/suite.py: see `python benchmarks/suite.py --help`.",
    )
    bench.add_argument(
        "--quick",
        action="store_true",
        help="256x256, 3 rounds, no torch.compile: 70 s measured on 2 lightly loaded cores, about 3 minutes on "
        "busy ones (docs/benchmarks.md)",
    )
    bench.set_defaults(func=cmd_bench)

    from dpt_ir.cli.export_cuda import add_parser as add_export_cuda

    add_export_cuda(sub, [debug])
    return parser


_REPEAT = "(repeat, or a comma list)"
_WRT_HELP = "differentiate with respect to this input " + _REPEAT


def _add_device_options(p: argparse.ArgumentParser) -> None:
    p.add_argument("--device", default=None, help="cpu or cuda:N (default: cuda:0 if present, else cpu)")
    p.add_argument("--no-checks", action="store_true", help="compile without the non-finite value checks")


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dpt-ir`` command line on ``argv`` (default ``sys.argv[1:]``); the exit status."""
    parser = build_parser()
    args, extra = parser.parse_known_args(argv)
    if extra and args.command != "bench":
        parser.error(f"unrecognized arguments: {' '.join(extra)}")
    args.suite_args = extra  # `dpt-ir bench` forwards what it does not know to the suite
    func: Command = args.func
    try:
        return func(args)
    except ContractError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except NumericalError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_NUMERICAL
    except BrokenPipeError:
        # The reader went away (`dpt-ir ops | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

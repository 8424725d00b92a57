"""The ``dpt-ir`` command line: ``dpt-ir ops`` (the op table), ``dpt-ir show GRAPH.json``
(the textual IR of a graph document).

Contract: `main` returns the exit status instead of raising. A `ContractError` (a bad
graph, a file that cannot be read or is not a graph document) prints one line
``error: ...`` on stderr and returns 2; ``--debug`` lets the exception propagate with
its traceback instead. Each subcommand is one ``cmd_<name>(args) -> int`` function
registered in `build_parser`.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
from collections.abc import Callable, Sequence
from pathlib import Path

from dpt_ir.errors import ContractError
from dpt_ir.graph import Graph
from dpt_ir.ops.registry import ALL_INPUTS, OpDef, all_ops

EXIT_USAGE = 2
Command = Callable[[argparse.Namespace], int]
_DEBUG_HELP = "show the full traceback of an error"


# -- shared helpers ------------------------------------------------------------------


def load_graph(path: str) -> Graph:
    """Read and validate the graph JSON document at ``path``.

    Raises ContractError naming the file when it cannot be read, is not JSON, or is not
    a valid graph; the message of a graph error is prefixed with the file name.
    """
    try:
        doc = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ContractError(f"{path}: cannot read graph file ({reason})") from None
    try:
        json.loads(doc)
    except json.JSONDecodeError as exc:
        raise ContractError(f"{path}: expected a graph JSON document, found invalid JSON ({exc})") from None
    try:
        return Graph.model_validate_json(doc)
    except ContractError as exc:
        raise ContractError(f"{path}: {exc}") from None


def format_table(header: Sequence[str], rows: Sequence[Sequence[str]]) -> str:
    """Left-aligned columns separated by two spaces, a dashed rule under the header."""
    widths = [max(len(r[k]) for r in [header, *rows]) for k in range(len(header))]

    def line(cells: Sequence[str]) -> str:
        return "  ".join(c.ljust(w) for c, w in zip(cells, widths, strict=True)).rstrip()

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


def cmd_ops(args: argparse.Namespace) -> int:
    """Print the op table, one row per registered op, sorted by name."""
    print(format_table(OPS_HEADER, [op_row(op) for op in all_ops()]))
    return 0


# -- dpt-ir show ---------------------------------------------------------------------


def cmd_show(args: argparse.Namespace) -> int:
    """Print the textual IR of the graph document ``args.graph``."""
    text = load_graph(args.graph).to_text()
    print(text, end="" if text.endswith("\n") else "\n")
    return 0


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
    sub = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")

    ops = sub.add_parser("ops", parents=[debug], help="print the op table")
    ops.set_defaults(func=cmd_ops)

    show = sub.add_parser("show", parents=[debug], help="print the textual IR of a graph JSON document")
    show.add_argument("graph", metavar="GRAPH.json", help="graph document (Graph.model_dump_json())")
    show.set_defaults(func=cmd_show)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the ``dpt-ir`` command line on ``argv`` (default ``sys.argv[1:]``); the exit status."""
    args = build_parser().parse_args(argv)
    func: Command = args.func
    try:
        return func(args)
    except ContractError as exc:
        if args.debug:
            raise
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_USAGE
    except BrokenPipeError:
        # The reader went away (`dpt-ir ops | head`): stop quietly, as Unix tools do.
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
        return 0

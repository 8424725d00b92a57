"""Differential fuzz: random graphs compiled against the reference interpreter.

``python benchmarks/fuzz.py --graphs N --seed S [--batch B] [--out report.json]`` (``--count``
is ``--graphs``) draws N distinct random graphs (with inputs) from the Hypothesis
strategies of ``tests/strategies.py``, seeded with S (the same graphs for the same seed
and sources), compiles them B at a time as one program (the disjoint union,
`tests/backend/harness.py`, so N graphs cost N / B Warp modules, not N), and compares
``run``, ``value_and_grad`` and a seeded tape pass with `dp.interpret` /
`dp.interpret_grad` of each graph, values and gradients, with the tolerances of
``tests/backend/test_compiled_random.py``; and, with PyTorch installed (``--no-torch``
skips it), ``value_and_grad`` with the same graph evaluated in torch
(``tests/torch_oracle.py``). The shapes are ``--shapes edges`` by default (an axis as
wide as the lane and block widths and their neighbours, 7 to 513, and size-one axes) or
``small`` (dims 1-4); ``--zero-size`` (the default; ``--no-zero-size`` leaves them out)
adds axes of length 0, broadcast against 1s.

A batch that fails to compile or raises while running is split in halves until the
graphs that fail alone are found. Each mismatching graph is then shrunk: every value of
it becomes the only output of a candidate graph (its cone), all candidates are compiled as
one program, and the smallest cone that still mismatches is printed as textual IR with
its inputs: a minimal reproducer. Exit status 1 when anything mismatched.

Assumes the repository layout (``tests/`` next to ``benchmarks/``). Caches go to
``.dpt_ir_cache/fuzz/`` in the repository unless ``DPT_IR_CACHE`` / ``WARP_CACHE_PATH``
are set. It is a script, not a CI test (``tests/test_fuzz_smoke.py`` runs a few graphs).
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
for path in (ROOT, ROOT / "tests"):
    if str(path) not in sys.path:
        sys.path.insert(0, str(path))
os.environ.setdefault("DPT_IR_CACHE", str(ROOT / ".dpt_ir_cache" / "fuzz" / "dpt_ir"))
os.environ.setdefault("WARP_CACHE_PATH", str(ROOT / ".dpt_ir_cache" / "fuzz" / "warp"))

import numpy as np  # noqa: E402
from hypothesis import HealthCheck, Phase, given, settings  # noqa: E402
from hypothesis import seed as hypothesis_seed  # noqa: E402
from strategies import LOSS, differentiable_inputs, graph_and_inputs  # noqa: E402

import dpt_ir as dp  # noqa: E402
from dpt_ir.ir.graph import Output  # noqa: E402
from dpt_ir.ir.types import is_float  # noqa: E402
from dpt_ir.passes import dce  # noqa: E402
from tests.backend.harness import MODERATE_TOLERANCES, Batch, compare_batch, seeded_batch  # noqa: E402

Item = tuple[dp.Graph, dict[str, np.ndarray]]


@dataclass(frozen=True)
class Shapes:
    """What the strategies draw: ``edges`` (wide axes around the lane and block widths) and
    ``zero_size`` (axes of length 0); ``torch``: also compare with PyTorch."""

    edges: bool = True
    zero_size: bool = True
    torch: bool = True


SMALL = Shapes(edges=False, zero_size=False, torch=False)  # the strategies' defaults


@dataclass
class Mismatch:
    """One graph whose compiled results differ from the interpreter's (or that fails)."""

    batch: str
    graph: dp.Graph
    inputs: dict[str, np.ndarray]
    problems: list[str]
    reproducer: dp.Graph | None = None
    reproducer_problems: list[str] = field(default_factory=list)

    def report(self) -> str:
        shown = self.reproducer or self.graph
        lines = [f"mismatch in {self.batch}: " + "; ".join(self.problems)]
        if self.reproducer is not None:
            lines.append(
                f"minimal reproducer ({len(shown.nodes)} of {len(self.graph.nodes)} nodes): "
                + "; ".join(self.reproducer_problems)
            )
        lines.append(shown.to_text().rstrip())
        used = {i.name for i in shown.inputs}
        for name, value in self.inputs.items():
            if name in used:
                lines.append(f"input {name} = np.array({value.tolist()!r}, dtype={value.dtype.name!r})")
        wrt = differentiable_inputs(shown)
        lines.append(f"wrt = {wrt}")
        return "\n".join(lines)


# -- drawing graphs ---------------------------------------------------------------------------
def _draw_once(examples: int, seed: int, shapes: Shapes) -> list[Item]:
    """``examples`` draws of `graph_and_inputs` from Hypothesis seeded with ``seed``."""
    drawn: list[Item] = []

    @hypothesis_seed(seed)
    @settings(
        max_examples=examples,
        database=None,
        phases=[Phase.generate],
        deadline=None,
        suppress_health_check=list(HealthCheck),
    )
    @given(graph_and_inputs(edges=shapes.edges, zero_size=shapes.zero_size))
    def collect(item: Item) -> None:
        drawn.append(item)

    collect()
    return drawn


def draw_graphs(count: int, seed: int, shapes: Shapes = SMALL) -> list[Item]:
    """``count`` distinct random graphs with inputs, a pure function of ``seed`` and
    ``shapes`` (and of the strategies' source)."""
    found: dict[str, Item] = {}
    attempt = 0
    while len(found) < count:
        for graph, inputs in _draw_once(count - len(found) + 16, seed * 1000 + attempt, shapes):
            found.setdefault(graph.to_text(), (graph, inputs))
        attempt += 1
    return list(found.values())[:count]


# -- batches --------------------------------------------------------------------------------
def make_batch(name: str, items: list[Item]) -> Batch:
    """``items`` as one `Batch` (`seeded_batch`: every float output seeded, every
    differentiable input differentiated)."""
    return seeded_batch(name, items, len(items))


def _non_finite_reference(graph: dp.Graph, inputs: dict[str, np.ndarray]) -> bool:
    """Does the interpreter give a non-finite value or gradient (an empty logsumexp's -inf)?"""
    values = list(dp.interpret(graph, **inputs).values())
    wrt = differentiable_inputs(graph)
    if wrt:
        values += list(dp.interpret_grad(graph, wrt, **inputs).values())
    return any(not np.all(np.isfinite(np.asarray(v, dtype=np.float64))) for v in values)


def check_items(name: str, items: list[Item], torch: bool = False) -> list[Mismatch]:
    """Compile ``items`` as one program and compare (``torch``: with PyTorch too); a batch
    that raises is split in halves (an explicit stack, no recursion) until the failing
    graphs stand alone. A lone graph whose reference is non-finite raises NumericalError by
    contract (status checks, on by default): it is compiled again with ``checks=False`` and its
    values compared; only a mismatch there, or any other failure, is a finding."""
    found: list[Mismatch] = []
    stack = [(name, items, True)]
    while stack:
        label, group, checks = stack.pop()
        batch = make_batch(label, group)
        try:
            batch.compile(checks=checks)
            problems = compare_batch(batch, MODERATE_TOLERANCES, mixed=True)
            if torch:
                from torch_oracle import compare_with_torch  # torch only where asked for

                for pid, msgs in compare_with_torch(batch).items():
                    problems[pid] += msgs
        except Exception as exc:  # noqa: BLE001  (any failure is a finding; it is split, then reported)
            if len(group) > 1:
                half = len(group) // 2
                stack += [(f"{label}a", group[:half], checks), (f"{label}b", group[half:], checks)]
                continue
            graph, inputs = group[0]
            if checks and isinstance(exc, dp.NumericalError) and _non_finite_reference(graph, inputs):
                stack.append((f"{label}_unchecked", group, False))
                continue
            found.append(Mismatch(label, graph, inputs, [f"{type(exc).__name__}: {exc}"]))
            continue
        for k, (pid, msgs) in enumerate(problems.items()):
            if msgs:
                graph, inputs = group[k]
                assert batch.graphs[pid] is graph
                found.append(Mismatch(label, graph, inputs, msgs))
    return found


# -- shrinking --------------------------------------------------------------------------------
def cones(graph: dp.Graph) -> list[dp.Graph]:
    """For every node value of ``graph``: the graph computing only it (a float value as the
    loss ``sum(value)``, any other as output ``out``), dead nodes removed, inputs kept."""
    out = []
    for node in graph.nodes:
        if node.op == "constant":
            continue
        b, handles = dp.GraphBuilder.from_graph(graph)
        value = handles[node.name]
        if is_float(value.dtype):
            b.set_outputs([Output(name=LOSS, value=dp.sum(value).name)])
        else:
            b.set_outputs([Output(name="out", value=node.name)])
        out.append(dce.run(b.build()))
    return out


def shrink(found: Mismatch, torch: bool = False) -> None:
    """Set ``found.reproducer`` to the smallest cone of its graph that still mismatches
    (all cones compiled as one program)."""
    candidates = cones(found.graph)
    if not candidates:
        return
    items = [(c, found.inputs) for c in candidates]
    failing = check_items(f"{found.batch}_shrink", items, torch)
    if failing:
        best = min(failing, key=lambda m: len(m.graph.nodes))
        if len(best.graph.nodes) < len(found.graph.nodes):
            found.reproducer, found.reproducer_problems = best.graph, best.problems


# -- main -----------------------------------------------------------------------------------
def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--graphs", "--count", type=int, default=200, help="number of distinct random graphs (default 200)"
    )
    parser.add_argument("--seed", type=int, default=0, help="seed of the graph generator (default 0)")
    parser.add_argument("--batch", type=int, default=50, help="graphs compiled as one program (default 50)")
    parser.add_argument("--out", type=Path, help="also write the summary and mismatches as JSON")
    parser.add_argument("--shapes", choices=("edges", "small"), default="edges", help="shapes drawn (default edges)")
    parser.add_argument(
        "--zero-size", action=argparse.BooleanOptionalAction, default=True, help="axes of length 0 (default on)"
    )
    parser.add_argument(
        "--torch", action=argparse.BooleanOptionalAction, default=True, help="compare with PyTorch too (default on)"
    )
    parser.add_argument(
        "--opt-level", type=int, choices=(0, 1, 2, 3), help="clang level of the modules (default Warp's; tests use 0)"
    )
    args = parser.parse_args(argv)
    if args.graphs < 1 or args.batch < 1:
        parser.error("--graphs and --batch must be at least 1")
    if args.torch and importlib.util.find_spec("torch") is None:
        parser.error("--torch needs PyTorch (pip install -e '.[torch]'); or pass --no-torch")
    shapes = Shapes(edges=args.shapes == "edges", zero_size=args.zero_size, torch=args.torch)
    if args.opt_level is not None:
        import warp as wp

        wp.config.optimization_level = args.opt_level
    start = time.perf_counter()
    items = draw_graphs(args.graphs, args.seed, shapes)
    drawn = time.perf_counter()
    mismatches: list[Mismatch] = []
    programs = 0
    for k in range(0, len(items), args.batch):
        chunk = items[k : k + args.batch]
        batch_start = time.perf_counter()
        found = check_items(f"fuzz_s{args.seed}_b{k // args.batch}", chunk, shapes.torch)
        for m in found:  # as found, before the (slow) shrinking at the end
            index = k + next(i for i, (graph, _) in enumerate(chunk) if graph is m.graph)
            print(f"graph {index}: " + m.report(), "\n", flush=True)
        mismatches += found
        programs += 1
        print(
            f"batch {k // args.batch}: graphs {k}-{k + len(chunk) - 1}, {time.perf_counter() - batch_start:.1f} s, "
            f"{len(mismatches)} mismatch(es) so far",
            flush=True,
        )
    for m in mismatches:
        shrink(m, shapes.torch)
        if m.reproducer is not None:
            print(m.report(), "\n", flush=True)
    ops = sum(len(g.nodes) for g, _ in items)
    summary = {
        "graphs": len(items),
        "seed": args.seed,
        "shapes": args.shapes,
        "zero_size": args.zero_size,
        "torch": args.torch,
        "batch": args.batch,
        "programs": programs,
        "nodes": ops,
        "mismatches": len(mismatches),
        "draw_seconds": round(drawn - start, 1),
        "total_seconds": round(time.perf_counter() - start, 1),
    }
    print(
        f"fuzz: {summary['graphs']} graphs ({ops} nodes, seed {args.seed}, {args.shapes} shapes, zero-size "
        f"{'on' if args.zero_size else 'off'}, torch {'on' if args.torch else 'off'}) in {programs} programs: "
        f"{summary['mismatches']} mismatch(es); {summary['total_seconds']} s "
        f"(drawing {summary['draw_seconds']} s)"
    )
    if args.out is not None:
        doc = {**summary, "reports": [m.report() for m in mismatches]}
        args.out.write_text(json.dumps(doc, indent=2) + "\n")
    return 1 if mismatches else 0


if __name__ == "__main__":
    sys.exit(main())

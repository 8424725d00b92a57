"""Random graphs (`tests/strategies.py`) compiled and compared with the interpreter, values
and gradients (DESIGN §8).

Each Hypothesis example is a list of `PER_PROGRAM` random graphs (with inputs) compiled as
one program, the disjoint union of the graphs: ``run``, ``value_and_grad`` (the union's
loss is the sum of every graph's ``loss`` and of ``sum(aux * seed)`` over its float extra
outputs) and a tape pass seeded the same way must give ``dp.interpret`` /
``dp.interpret_grad`` of each graph. Generation is derandomized (the same graphs every run,
so the compiled modules come from the cache after the first run) and never shrinks: a
failure names the graph, and the message holds its textual IR.

One more program holds `EDGE_GRAPHS` graphs with edge shapes (an axis around a lane or
block width: 7, 8, 9, 63, 64, 65, 511, 513, and size-one axes broadcast against it),
compared with the interpreter and, where installed, with PyTorch (`torch_oracle`).
"""

from __future__ import annotations

import importlib.util

import numpy as np
from hypothesis import HealthCheck, Phase, Verbosity, assume, given, settings
from hypothesis import strategies as st
from strategies import graph_and_inputs

import dpt_ir as dp

from .harness import MODERATE_TOLERANCES, Batch, compare_batch, seeded_batch

PER_PROGRAM = 50
PROGRAMS = 4
MIN_GRAPHS = 200
EDGE_GRAPHS = 8

_SEEN: set[str] = set()  # textual IR of every graph compared
_PROGRAMS: list[str] = []  # names of the compiled batches


def _first_failing(batch: Batch) -> str:
    """The textual IR and error of the first graph of ``batch`` that does not compile alone."""
    for pid, graph in batch.graphs.items():
        try:
            dp.compile(graph, wrt=list(batch.wrt[pid]) or None)
        except Exception as exc:
            return f"graph {pid}: {type(exc).__name__}: {exc}\n{graph.to_text()}"
    return "(every graph compiles on its own)"


@settings(
    max_examples=PROGRAMS,
    verbosity=Verbosity.quiet,  # the falsifying example (50 graphs) is too long to print; messages name the graph
    derandomize=True,
    database=None,
    phases=[Phase.generate],
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.lists(graph_and_inputs(), min_size=PER_PROGRAM, max_size=PER_PROGRAM))
def _compiled_batches_match(items: list[tuple[dp.Graph, dict[str, np.ndarray]]]) -> None:
    texts = [g.to_text() for g, _ in items]
    # Hypothesis starts with its simplest example (the same minimal graph 50 times):
    # skip it, so that every compiled program holds many distinct graphs.
    assume(len(set(texts)) >= PER_PROGRAM // 2)
    batch = seeded_batch(f"random_{len(_PROGRAMS)}", items, len(_PROGRAMS))
    _PROGRAMS.append(batch.name)
    try:
        batch.compile()
    except Exception as exc:  # name the graph that does not compile, not the whole batch
        culprit = _first_failing(batch)
        raise AssertionError(f"{batch.name} does not compile: {type(exc).__name__}: {exc}\n{culprit}") from exc
    problems = compare_batch(batch, MODERATE_TOLERANCES, mixed=True)
    _SEEN.update(texts)
    failed = {pid: msgs for pid, msgs in problems.items() if msgs}
    report = [
        f"graph {pid} (inputs {list(batch.inputs[pid])}, wrt {list(batch.wrt[pid])}):\n  "
        + "\n  ".join(msgs)
        + "\n"
        + batch.graphs[pid].to_text()
        for pid, msgs in failed.items()
    ]
    assert not failed, f"{len(failed)} of {len(items)} random graphs differ:\n" + "\n".join(report)


def test_random_graphs_compiled_match_interpreter() -> None:
    """`PROGRAMS` batches of random graphs match the interpreter; at least `MIN_GRAPHS`
    distinct graphs were compared."""
    _SEEN.clear()
    _PROGRAMS.clear()
    _compiled_batches_match()
    assert len(_SEEN) >= MIN_GRAPHS, f"only {len(_SEEN)} distinct random graphs were compared in {_PROGRAMS}"


def _report(batch: Batch, failed: dict[str, list[str]]) -> str:
    parts = [f"graph {pid}:\n  " + "\n  ".join(m) + "\n" + batch.graphs[pid].to_text() for pid, m in failed.items()]
    return "\n".join(parts)


@settings(
    max_examples=1,
    verbosity=Verbosity.quiet,
    derandomize=True,
    database=None,
    phases=[Phase.generate],
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(st.lists(graph_and_inputs(edges=True), min_size=EDGE_GRAPHS, max_size=EDGE_GRAPHS))
def _edge_batch_matches(items: list[tuple[dp.Graph, dict[str, np.ndarray]]]) -> None:
    # as above, skip Hypothesis's simplest examples: the batch must hold distinct graphs and wide axes
    assume(len({g.to_text() for g, _ in items}) >= EDGE_GRAPHS // 2)
    assume(sum(any(d > 4 for i in g.inputs for d in i.type.shape) for g, _ in items) >= 3)
    batch = seeded_batch("random_edges", items, 99)
    batch.compile()
    problems = compare_batch(batch, MODERATE_TOLERANCES, mixed=True)
    if importlib.util.find_spec("torch") is not None:
        from torch_oracle import compare_with_torch

        for pid, msgs in compare_with_torch(batch).items():
            problems[pid] += msgs
    failed = {pid: msgs for pid, msgs in problems.items() if msgs}
    assert not failed, f"{len(failed)} of {len(items)} edge-shape graphs differ:\n" + _report(batch, failed)


def test_random_edge_shape_graphs_match_interpreter_and_torch() -> None:
    """`EDGE_GRAPHS` graphs with wide and size-one axes match the interpreter and PyTorch."""
    _edge_batch_matches()

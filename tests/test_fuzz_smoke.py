"""A few graphs through `benchmarks/fuzz.py` (the 2,000-graph run is a script, recorded in
docs/contracts-and-determinism.md), and its shrinker's cones, which need no compile: the
small shapes, the edge shapes (wide axes around the lane and block widths, size-one axes)
against the interpreter and PyTorch, a fixed sample of zero-size graphs, and the checks
contract on a non-finite reference."""

from __future__ import annotations

import importlib.util
from collections.abc import Callable

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks import fuzz

HAS_TORCH = importlib.util.find_spec("torch") is not None


def test_fuzz_runs_a_few_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    oracle = "--torch" if HAS_TORCH else "--no-torch"  # the README's install has no PyTorch
    args = ["--graphs", "2", "--batch", "2", "--seed", "7", "--shapes", "small", "--no-zero-size", oracle]
    assert fuzz.main(args) == 0
    out = capsys.readouterr().out
    assert "fuzz: 2 graphs" in out and "in 1 programs: 0 mismatch(es)" in out


WIDTHS = (7, 8, 9, 63, 64, 65, 511, 513)


def _sample(shapes: fuzz.Shapes, keep: Callable[[dp.Graph], bool], count: int) -> list[fuzz.Item]:
    """The first ``count`` of 40 graphs drawn with seed 5 that ``keep`` takes (Hypothesis
    draws its simplest graphs first, so a plain first few would be scalars)."""
    return [(g, x) for g, x in fuzz.draw_graphs(40, 5, shapes) if keep(g)][:count]


def _wide(graph: dp.Graph) -> bool:
    return any(d in WIDTHS for i in graph.inputs for d in i.type.shape)


def _empty(graph: dp.Graph) -> bool:
    return any(i.type.size == 0 for i in graph.inputs)


def test_fuzz_edge_shapes() -> None:
    """Four graphs with an axis around a lane or block width, against the interpreter and
    PyTorch (where installed)."""
    sample = _sample(fuzz.Shapes(zero_size=False, torch=HAS_TORCH), _wide, 4)
    assert len(sample) == 4
    found = fuzz.check_items("edges", sample, torch=HAS_TORCH)
    assert not found, "\n\n".join(m.report() for m in found)


def test_fuzz_zero_size_sample() -> None:
    sample = _sample(fuzz.Shapes(), _empty, 3)
    found = fuzz.check_items("zero_size", sample, torch=HAS_TORCH)
    assert not found, "\n\n".join(m.report() for m in found)


def test_zero_size_sample_is_drawn() -> None:
    """The zero-size sample above runs three graphs with an empty input (it cannot pass vacuously)."""
    assert len(_sample(fuzz.Shapes(), _empty, 3)) == 3


@pytest.mark.parametrize("shapes", [fuzz.SMALL, fuzz.Shapes()])
def test_draws_are_distinct_and_reproducible(shapes: fuzz.Shapes) -> None:
    first, again = fuzz.draw_graphs(5, 3, shapes), fuzz.draw_graphs(5, 3, shapes)
    texts = [g.to_text() for g, _ in first]
    assert len(set(texts)) == 5 and texts == [g.to_text() for g, _ in again]
    for (_, a), (_, b) in zip(first, again, strict=True):
        assert a.keys() == b.keys() and all(np.array_equal(a[k], b[k]) for k in a)


def test_cones_compute_each_value_alone() -> None:
    g = dp.GraphBuilder("c")
    x = g.input("x", (3,))
    y = dp.exp(x)
    g.output("loss", dp.sum(dp.log(y + 1.0)))
    g.output("aux", y > 1.0)
    graph = g.build()
    cones = fuzz.cones(graph)
    assert [len(c.nodes) for c in cones][:2] == [2, 4]  # exp_0 + sum; then the add's cone
    inputs = {"x": np.array([0.5, -1.0, 2.0], np.float32)}
    exp_cone = cones[0]
    assert [o.name for o in exp_cone.outputs] == ["loss"]
    np.testing.assert_allclose(dp.interpret(exp_cone, **inputs)["loss"], np.exp(inputs["x"]).sum(), rtol=1e-6)
    bool_cone = next(c for c in cones if c.outputs[0].name == "out")
    assert dp.interpret(bool_cone, **inputs)["out"].dtype == np.bool_


def _empty_logsumexp() -> fuzz.Item:
    """The 2,000-graph run's finding: logsumexp over an empty input is -inf (NumPy, PyTorch),
    which the status checks report as a NumericalError."""
    g = dp.GraphBuilder("empty_lse")
    x = g.input("x", (0, 1, 1), "float32")
    g.output("loss", dp.sum(dp.logsumexp(x, axis=(0, 1, 2), keepdims=True)))
    return g.build(), {"x": np.zeros((0, 1, 1), np.float32)}


def test_a_non_finite_reference_is_checked_without_status_checks() -> None:
    """With checks the compiled program raises NumericalError (the contract), so the fuzz
    compares it compiled with ``checks=False``: -inf, as the interpreter and PyTorch give."""
    graph, inputs = _empty_logsumexp()
    with pytest.raises(dp.NumericalError, match="non-finite"):
        dp.compile(graph, wrt=["x"], device="cpu").value_and_grad(**inputs)
    assert fuzz.check_items("empty_lse", [(graph, inputs)], torch=HAS_TORCH) == []
    out = dp.compile(graph, wrt=["x"], device="cpu", checks=False).run(**inputs)
    assert out["loss"] == -np.inf

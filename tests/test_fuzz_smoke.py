"""A few graphs through `benchmarks/fuzz.py` (the 2,000-graph run is a script, recorded in
docs/contracts-and-determinism.md), and its shrinker's cones, which need no compile."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks import fuzz


def test_fuzz_runs_a_few_graphs(capsys: pytest.CaptureFixture[str]) -> None:
    assert fuzz.main(["--graphs", "2", "--batch", "2", "--seed", "7"]) == 0
    out = capsys.readouterr().out
    assert "fuzz: 2 graphs" in out and "in 1 programs: 0 mismatch(es)" in out


def test_draws_are_distinct_and_reproducible() -> None:
    first, again = fuzz.draw_graphs(5, 3), fuzz.draw_graphs(5, 3)
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

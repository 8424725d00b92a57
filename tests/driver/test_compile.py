"""`dpt_ir.driver.compile`: the disk-cache key covers every fact of the `Target` that shapes the
generated plans and code (`cache_key`, `Target.fingerprint`), and only those."""

from __future__ import annotations

import json
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.base import Target, target_for
from dpt_ir.driver.compile import cache_key, options_of


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("keyed")
    x = g.input("x", (4, 8))
    g.output("loss", dp.sum(dp.exp(x)))
    return g.build()


def _changed(target: Target, field: str) -> Target:
    """``target`` with ``field`` alone set to another valid value."""
    value: Any = getattr(target, field)
    if field == "kind":
        value = "cuda" if value == "cpu" else "cpu"
    elif isinstance(value, bool):
        value = not value
    elif value is None:
        value = 7
    else:
        value = value + 1
    return Target(**{**target.model_dump(), field: value})


def _key(target: Target) -> str:
    graph = _graph()
    options = json.dumps([["x"], "loss", options_of(target)], sort_keys=True)
    return cache_key(graph.model_dump_json(), options, target)


@pytest.mark.parametrize("kind", ["cpu", "cuda"])
@pytest.mark.parametrize("field", [f for f in Target.model_fields if f != "threads"])
def test_every_fact_of_the_target_changes_the_key(kind: str, field: str) -> None:
    """Two targets that differ in one fact (the CPU block, the task size, the CUDA combine
    group, ...) never share a cache entry, even with the same options dict."""
    target = Target.for_device(kind)
    other = _changed(target, field)
    assert getattr(other, field) != getattr(target, field)
    graph = _graph()
    options = json.dumps([["x"], "loss", options_of(target)], sort_keys=True)  # the same options for both
    assert cache_key(graph.model_dump_json(), options, other) != cache_key(graph.model_dump_json(), options, target)


def test_the_thread_count_does_not_change_the_key() -> None:
    """Kernels and results are the same for any thread count: one disk entry serves all."""
    assert _key(Target.for_device("cpu", threads=1)) == _key(Target.for_device("cpu", threads=8))
    assert Target.for_device("cpu", threads=3).fingerprint() == target_for("cpu").fingerprint()


def test_the_device_index_does_not_change_the_target() -> None:
    """``cuda:0`` and ``cuda:1`` are one kind: the same facts, the same key."""
    assert Target.for_device("cuda:1") == Target.for_device("cuda:0") == target_for("cuda")


def _scaled() -> dp.Graph:
    """A division by a per-row scale: the `reciprocal` pass's case."""
    g = dp.GraphBuilder("scaled")
    a = g.input("a", (16, 33))
    b = g.input("b", (16, 1))
    g.output("y", a / b)
    return g.build()


def _ops(program: dp.Program) -> set[str]:
    return {n.op for n in program.plans["run"].graph.nodes}


def test_reciprocal_false_keeps_the_divisions() -> None:
    """``dp.compile(..., reciprocal=False)`` switches the pass off: the plan divides, the
    results are NumPy's ``a / b`` to the bit, and the option keys the program (the default
    program multiplies by the reciprocal, within about an ulp)."""
    rng = np.random.default_rng(3)
    a = rng.normal(size=(16, 33)).astype(np.float32)
    b = rng.uniform(0.5, 3.0, size=(16, 1)).astype(np.float32)
    on, off = dp.compile(_scaled(), device="cpu"), dp.compile(_scaled(), device="cpu", reciprocal=False)
    assert off is not on and off.report.options["reciprocal"] is False and on.report.options["reciprocal"]
    assert "reciprocal" in _ops(on) and "div" not in _ops(on)
    assert "div" in _ops(off) and "reciprocal" not in _ops(off)
    np.testing.assert_array_equal(off.run(a=a, b=b)["y"], a / b)
    np.testing.assert_allclose(on.run(a=a, b=b)["y"], a / b, rtol=2.5e-7)


def test_the_cuda_export_plans_with_the_programs_reciprocal_switch() -> None:
    """`dpt_ir.export.export_cuda` re-plans the program for CUDA with its own options: the
    switch reaches those plans too (else the export would differ from the program)."""
    from dpt_ir.export.writer import _pipelines

    for flag in (True, False):
        program = dp.compile(_scaled(), device="cpu", reciprocal=flag)
        assert _pipelines(program, ["run"])["run"].reciprocal is flag

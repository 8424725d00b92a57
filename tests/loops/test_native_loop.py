"""A compiled loop runs its steps as one native call (`dpt_ir.runtime.loop_native`).

What must hold: after the first call, a loop call makes no Python call and no ctypes call
per step (the count of both, for 4 and 40 steps, is the same); the results are
bit-identical to the step-by-step path (`Loop._native` switched off) and for 1 and 2
threads, with store-all and binomial checkpointing, and match the interpreter.
"""

from __future__ import annotations

import gc
import sys
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.runtime import loop as loop_module
from dpt_ir.runtime import loop_native

N = 9
LAP = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
WRT = ["u0", "k"]


def graph(steps: int, checkpoint: int | None, n: int = N) -> dp.Graph:
    """Two carries (one a leapfrog-style pair), an ``xs`` row added each step and a ``y`` row."""
    g = dp.GraphBuilder(f"native_loop_{steps}_{checkpoint}_{n}")
    u0, k = g.input("u0", (n, n)), g.input("k", (n, n))
    xs = g.input("xs", (steps, n), requires_grad=False)

    def step(carry: Any, x: Any) -> tuple[Any, Any]:
        prev, u = carry
        new = 2.0 * u - prev + 0.1 * k * dp.correlate(u, LAP, mode="constant") + 0.01 * x
        return (u, new), dp.sum(new, axis=0)

    (_, u), ys = dp.scan(step, (u0, u0), xs, checkpoint=checkpoint)
    g.output("loss", dp.sum(dp.square(u)) + dp.sum(ys * ys))
    return g.build()


def inputs(steps: int, n: int = N) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(steps)
    return {
        "u0": rng.uniform(-1, 1, (n, n)).astype(np.float32),
        "k": rng.uniform(0.5, 1.0, (n, n)).astype(np.float32),
        "xs": rng.uniform(-1, 1, (steps, n)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def programs() -> dict[tuple[int, int | None, int], Any]:
    """(steps, checkpoint, threads) -> its program."""
    keys = [(4, 2, 1), (40, 2, 1), (4, 2, 2), (4, None, 1), (4, None, 2)]
    return {key: dp.compile(graph(key[0], key[1]), wrt=WRT, threads=key[2]) for key in keys}


def _events(program: Any, x: dict[str, np.ndarray]) -> int:
    """Python and C calls made by one ``value_and_grad`` (after a warm-up call)."""
    program.value_and_grad(**x)
    count = [0]

    def profile(frame: Any, event: str, arg: Any) -> None:
        if event in ("call", "c_call"):
            count[0] += 1

    # A garbage collection inside the counted call would add the finalisers of other tests'
    # objects to its calls: collect first, and not during it.
    gc.collect()
    gc.disable()
    sys.setprofile(profile)
    try:
        program.value_and_grad(**x)
    finally:
        sys.setprofile(None)
        gc.enable()
    return count[0]


def test_a_loop_call_makes_no_call_per_step(programs: dict[Any, Any]) -> None:
    """The number of Python and C (ctypes included) calls of a call does not grow with the steps."""
    assert _events(programs[(4, 2, 1)], inputs(4)) == _events(programs[(40, 2, 1)], inputs(40))


@pytest.mark.parametrize("checkpoint", [None, 2])
def test_native_steps_are_the_step_by_step_bits(
    programs: dict[Any, Any], checkpoint: int | None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Native loop == step by step == 2 threads, bit for bit; and the interpreter's values."""
    x = inputs(4)
    one, two = programs[(4, checkpoint, 1)], programs[(4, checkpoint, 2)]
    out, grads = one.value_and_grad(**x)
    want = dp.interpret_grad(one.graph, WRT, seed={"loss": 1.0}, **x)
    for name in WRT:
        np.testing.assert_allclose(grads[name], want[name], rtol=1e-4, atol=1e-5)
    out2, grads2 = two.value_and_grad(**x)
    monkeypatch.setattr(loop_module.Loop, "_native", lambda self, *args: False)
    out3, grads3 = one.value_and_grad(**x)
    for other_out, other in ((out2, grads2), (out3, grads3)):
        assert np.array_equal(out["loss"], other_out["loss"])
        assert all(np.array_equal(grads[n], other[n]) for n in WRT)


# Above one CPU task (`Target.cpu_task`, 65,536 elements), so a step's launches split in two.
WIDE = 260


@pytest.mark.parametrize("checkpoint", [None, 2])
def test_two_threads_split_the_steps_with_the_same_bits(checkpoint: int | None) -> None:
    """A loop program compiled with ``threads=2`` runs each step's launches on the pool (a
    loop's pieces once ran on one thread whatever ``threads`` said), with one thread's bits."""
    x = inputs(3, WIDE)
    one, two = (dp.compile(graph(3, checkpoint, WIDE), wrt=WRT, threads=t) for t in (1, 2))
    out, grads = one.value_and_grad(**x)
    out2, grads2 = two.value_and_grad(**x)
    assert np.array_equal(out["loss"], out2["loss"])
    assert all(np.array_equal(grads[n], grads2[n]) for n in WRT)
    assert _splits(one) == 0 and _splits(two) > 0


def _splits(program: Any) -> int:
    """Split launches (ops run on the thread pool) in the native tables of the program's loops."""
    tables = [t for lp in _loops(program) for t in lp._tables.values()]
    assert tables  # a value_and_grad ran: every loop direction recorded its table
    return sum(1 for t in tables for i in range(t.count) if t.table[i].kind == loop_native.SPLIT)


def _loops(program: Any) -> list[Any]:
    return [loop for s in (program.forward, program.joint) for kind, loop, _ in s.stages if kind == "loop"]


def _forward_copies(program: Any) -> int:
    """Copy ops in the native forward table of the program's value_and_grad scan."""
    (table,) = [lp._tables["forward"] for lp in _loops(program) if "forward" in lp._tables]
    return sum(1 for i in range(table.count) if table.table[i].kind == loop_native.COPY)


def _kept_and_copies(alias: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[int]]:
    """Per 4 and 8 steps (store-all): the results of value_and_grad and the forward table's copy
    count, checking kept_bytes: steps 1..steps-1 are kept; shared, the first row's two arrays
    and one a step after it, else two a step."""
    with monkeypatch.context() as m:
        if not alias:
            m.setattr(loop_module.Loop, "_passed_through", lambda self: {})
        results, copies = [], []
        for steps in (4, 8):
            program = dp.compile(graph(steps, None), wrt=WRT, threads=1)
            results.append(program.value_and_grad(**inputs(steps)))
            (kept,) = [r.kept_bytes for r in program.report.loops if r.kept_bytes is not None]
            assert kept == (steps if alias else 2 * (steps - 1)) * N * N * 4
            copies.append(_forward_copies(program))
    return results, copies


def test_a_passed_through_carry_shares_the_kept_trajectory(monkeypatch: pytest.MonkeyPatch) -> None:
    """The leapfrog's ``prev`` is the step before's ``u``: with store-all the forward keeps one
    array per step for the pair (not two) and its native table copies no carry per step (the
    copy count is the same for 4 and 8 steps); with the sharing switched off it keeps and
    copies both (two copies a step). The bits are the same either way, and the interpreter's
    values."""
    shared, copies = _kept_and_copies(True, monkeypatch)
    unshared, copies_off = _kept_and_copies(False, monkeypatch)
    assert copies[0] == copies[1] and copies_off[1] - copies_off[0] == 2 * 4
    for (out, grads), (out_off, grads_off) in zip(shared, unshared, strict=True):
        assert np.array_equal(out["loss"], out_off["loss"])
        assert all(np.array_equal(grads[n], grads_off[n]) for n in WRT)
    want = dp.interpret_grad(graph(8, None), WRT, seed={"loss": 1.0}, **inputs(8))
    for name in WRT:
        np.testing.assert_allclose(shared[1][1][name], want[name], rtol=1e-4, atol=1e-5)


def _checkpointed_copies(alias: bool, monkeypatch: pytest.MonkeyPatch) -> tuple[list[Any], list[int]]:
    """Per 4 and 8 steps with ``checkpoint=2``: value_and_grad's results and the copy ops of the
    native forward table of the program's run (a scan that keeps no trajectory)."""
    with monkeypatch.context() as m:
        if not alias:
            m.setattr(loop_module.Loop, "_passed_through", lambda self: {})
        results, copies = [], []
        for steps in (4, 8):
            program = dp.compile(graph(steps, 2), wrt=WRT, threads=1)
            results.append(program.value_and_grad(**inputs(steps)))
            program.run(**inputs(steps))
            (table,) = [lp._tables["forward"] for kind, lp, _ in program.forward.stages if kind == "loop"]
            copies.append(sum(1 for i in range(table.count) if table.table[i].kind == loop_native.COPY))
    return results, copies


def test_a_passed_through_carry_rotates_without_a_copy(monkeypatch: pytest.MonkeyPatch) -> None:
    """Without a kept trajectory, the leapfrog's new ``prev`` is the array of the step's ``u``
    and the fields rotate over three arrays (`Loop._rotated`): no copy a step (the count is the
    same for 4 and 8 steps; the first step and the final carries copy), against two with the
    pass-through switched off; the same bits either way."""
    shared, copies = _checkpointed_copies(True, monkeypatch)
    unshared, copies_off = _checkpointed_copies(False, monkeypatch)
    assert copies[1] == copies[0] and copies_off[1] - copies_off[0] == 2 * 4
    for (out, grads), (out_off, grads_off) in zip(shared, unshared, strict=True):
        assert np.array_equal(out["loss"], out_off["loss"])
        assert all(np.array_equal(grads[n], grads_off[n]) for n in WRT)

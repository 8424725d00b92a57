"""One `Program` called from several threads at once (DESIGN §2: "safe to call from several
threads; results are never another call's"). Every call checks a workspace out of its
plan's pool, a tape pass owns one from forward to close (docs/runtime.md).

Each check compares the threaded results bit for bit with the same calls made on one
thread: the kernels are deterministic, so any difference is another call's data. The
interpreter switch interval is lowered while the threads run, so that threads interleave
between every few bytecodes, not only where Warp's launches release the GIL.
"""

from __future__ import annotations

import sys
import threading
import time
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.runtime import modules as module_lib
from dpt_ir.runtime.plan import ExecutionPlan
from dpt_ir.runtime.program import Program

from .conftest import WRT, make_inputs, rt_graph, to_warp

THREADS = 6
CALLS = 40
TAPE_THREADS = 4
TAPE_PASSES = 15


@pytest.fixture
def interleaved() -> Iterator[None]:
    before = sys.getswitchinterval()
    sys.setswitchinterval(1e-6)
    yield
    sys.setswitchinterval(before)


def _in_threads(count: int, work: Callable[[int], Any]) -> list[Any]:
    """``work(k)`` on ``count`` threads started together; their results, or the first error."""
    barrier = threading.Barrier(count)
    results: list[Any] = [None] * count
    errors: list[BaseException] = []

    def body(k: int) -> None:
        barrier.wait()
        try:
            results[k] = work(k)
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(k,)) for k in range(count)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=300)
    assert not any(t.is_alive() for t in threads), "a thread did not finish"
    if errors:
        raise errors[0]
    return results


def _vg(program: dp.Program, seed: int) -> tuple[np.ndarray, ...]:
    out, grads = program.value_and_grad(**make_inputs(seed))
    return out["loss"], out["pred"], out["above"], grads["x"]


def _tape(program: dp.Program, seed: int) -> tuple[np.ndarray, ...]:
    inputs = make_inputs(seed)
    with program.tape_pass() as tp:
        outs = tp.forward(**(to_warp(inputs, program.device) if seed % 2 else inputs))
    grads = tp.backward(seed={"loss": 1.0, "pred": np.full(inputs["x"].shape, 0.25 * (seed % 3), np.float32)})
    result = outs["loss"].numpy().copy(), outs["pred"].numpy().copy(), grads["x"].numpy().copy()
    tp.close()
    return result


def _assert_identical(got: tuple[np.ndarray, ...], want: tuple[np.ndarray, ...], what: str) -> None:
    for k, (g, w) in enumerate(zip(got, want, strict=True)):
        np.testing.assert_array_equal(g, w, err_msg=f"{what}: result {k} is another call's")


def test_value_and_grad_from_six_threads(program: dp.Program, interleaved: None) -> None:
    """6 threads x 40 calls, each with its own inputs: exactly the single-threaded results."""
    seeds = [[1000 + 100 * t + i for i in range(CALLS)] for t in range(THREADS)]
    want = {s: _vg(program, s) for row in seeds for s in row}
    got = _in_threads(THREADS, lambda t: [(s, _vg(program, s)) for s in seeds[t]])
    for row in got:
        for s, result in row:
            _assert_identical(result, want[s], f"value_and_grad, inputs {s}")
    pool = len(program.plans["value_and_grad"]._all)
    assert pool <= THREADS + 1, f"{pool} workspaces for {THREADS} threads"


def test_tape_passes_from_four_threads(program: dp.Program, interleaved: None) -> None:
    """4 threads of tape passes (numpy and wp.array inputs, scalar and array seeds): each
    gets the single-threaded outputs and gradient; none is refused, since every pass owns
    its workspace."""
    seeds = [[2000 + 100 * t + i for i in range(TAPE_PASSES)] for t in range(TAPE_THREADS)]
    want = {s: _tape(program, s) for row in seeds for s in row}
    got = _in_threads(TAPE_THREADS, lambda t: [(s, _tape(program, s)) for s in seeds[t]])
    for row in got:
        for s, result in row:
            _assert_identical(result, want[s], f"tape pass, inputs {s}")


def test_mixed_entry_points_from_threads(program: dp.Program, interleaved: None) -> None:
    """run, value_and_grad and tape passes of one program at once, with a numerical error
    raised in one of the threads: every other call's result is its own."""
    bad = dict(make_inputs(0), x=np.full((3, 4), -1.0, np.float32))  # log of a negative number

    def work(t: int) -> list[Any]:
        results: list[Any] = []
        for i in range(10):
            s = 3000 + 100 * t + i
            if t == 0:
                with pytest.raises(dp.NumericalError):
                    program.run(**bad)
                results.append((s, "run", program.run(**make_inputs(s))["loss"]))
            elif t == 1:
                results.append((s, "vg", _vg(program, s)))
            else:
                results.append((s, "tape", _tape(program, s)))
        return results

    for row in _in_threads(3, work):
        for s, kind, result in row:
            if kind == "run":
                np.testing.assert_array_equal(result, program.run(**make_inputs(s))["loss"])
            else:
                _assert_identical(result, (_vg if kind == "vg" else _tape)(program, s), f"{kind}, inputs {s}")


def test_compile_from_threads(program: dp.Program) -> None:
    """Concurrent `dp.compile` calls of one graph are serialised: all get the one program
    (the in-process cache's; a dump compile elsewhere in the session may have replaced the
    fixture's there)."""
    got = _in_threads(4, lambda t: dp.compile(rt_graph(), wrt=WRT))
    assert all(p is got[0] for p in got) and got[0].graph == program.graph


def test_first_calls_from_threads_build_the_module_once(
    program: dp.Program, interleaved: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Threads racing to the first call of a plan whose module is not built yet: one build
    (`GeneratedModule.built` under the build lock), and every call's own results. The plan
    and module are fresh copies of the fixture's ``run`` (Warp's load of an already built
    module is then cheap); ``load`` is wrapped to count and to widen the race."""
    run = program.plans["run"]
    calls: list[str] = []
    real_load = module_lib.load

    def counting_load(*args: Any, **kwargs: Any) -> dict[str, str]:
        calls.append(args[0].__name__)
        time.sleep(0.05)
        return real_load(*args, **kwargs)

    monkeypatch.setattr(module_lib, "load", counting_load)
    old = run.module
    fresh = module_lib.GeneratedModule(old.name, old.text, old.entry, old.key, old.device, old.expected)
    plan = ExecutionPlan(run.graph, run.kernels, fresh, run.device, run.slots, program.checks, threads=run.threads)
    copy = Program(program.graph, program.wrt, program.loss, program.device, {"run": plan}, program.checks, {}, "")
    got = _in_threads(THREADS, lambda k: copy.run(**make_inputs(k))["loss"])
    assert calls == [old.name] and fresh.info["built"] is True, calls
    for k, loss in enumerate(got):
        np.testing.assert_array_equal(loss, program.run(**make_inputs(k))["loss"])

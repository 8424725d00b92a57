"""The CPU thread pool (`dpt_ir.backends.warp.tasks`, native side ``dp_pool.h``): a split
launch's ranges run through the native dispatcher (no Python call per range), a busy pool or
a missing native pool runs them in order on the caller, concurrent callers and a forked child
get the single-thread results bit for bit.

Cost: one graph of 256 x 512 (two 64 K-element tasks), compiled once; the programs with 1, 2
and 3 threads share its module.
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable, Iterator

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.warp import tasks

SHAPE = (256, 512)


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("pool_beer")
    x = g.input("x", SHAPE, "float32")
    obs = g.input("obs", SHAPE, "float32", requires_grad=False)
    g.output("loss", dp.sum(dp.square(1.3 * dp.exp(-0.7 * x) - obs)))
    return g.build()


def _inputs(seed: int) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(seed)
    return {name: rng.uniform(-1.0, 1.0, SHAPE).astype(np.float32) for name in ("x", "obs")}


@pytest.fixture(scope="module")
def programs() -> dict[int, dp.Program]:
    graph = _graph()
    return {t: dp.compile(graph, wrt=["x"], device="cpu", threads=t) for t in (1, 2, 3)}


def _results(program: dp.Program, seed: int) -> tuple[np.ndarray, np.ndarray]:
    out, grads = program.value_and_grad(**_inputs(seed))
    return out["loss"], grads["x"]


def _assert_same(got: tuple[np.ndarray, np.ndarray], want: tuple[np.ndarray, np.ndarray], what: str) -> None:
    for g, w in zip(got, want, strict=True):
        np.testing.assert_array_equal(g, w, err_msg=what)


def _split_launches(program: dp.Program) -> list[tasks.SplitLaunch]:
    """The split launches recorded in every live workspace of ``program``'s value_and_grad."""
    return [
        step
        for ws in program.plans["value_and_grad"]._all
        for phase in ws.phases.values()
        for step in phase.steps
        if isinstance(step, tasks.SplitLaunch)
    ]


@pytest.fixture
def python_calls(programs: dict[int, dp.Program]) -> Iterator[list[int]]:
    """Wrap each range's Python call of every split launch of the 2- and 3-thread programs:
    the list grows by one per range run from Python (the in-order fallback), not at all
    when the native dispatcher runs them."""
    for t in (2, 3):
        programs[t].value_and_grad(**_inputs(0))  # records the launches
    calls: list[int] = []
    saved = []
    for t in (2, 3):
        for split in _split_launches(programs[t]):
            for part in split.parts:
                saved.append((part, part.call))

                def counted(call: Callable[[], None] = part.call) -> None:
                    calls.append(1)
                    call()

                object.__setattr__(part, "call", counted)
    yield calls
    for part, call in saved:
        object.__setattr__(part, "call", call)


def test_the_launch_is_split_and_dispatched_natively(programs: dict[int, dp.Program], python_calls: list[int]) -> None:
    two = programs[2]
    assert _split_launches(two), "the 131,072-element reduction should split into 2 ranges"
    want = _results(programs[1], 5)
    _assert_same(_results(two, 5), want, "2 threads")
    assert python_calls == [], "the ranges should run through dp_pool_run, not from Python"
    workers = tasks.pool(1, _split_launches(two)[0].host)
    assert workers is not None and all(t.is_alive() for t in workers.threads)


def test_a_busy_pool_runs_the_ranges_on_the_caller(programs: dict[int, dp.Program], python_calls: list[int]) -> None:
    two = programs[2]
    workers = tasks.pool(1, _split_launches(two)[0].host)
    assert workers is not None
    with workers.lock:  # another thread's launch holds the pool
        got = _results(two, 6)
    _assert_same(got, _results(programs[1], 6), "2 threads, pool busy")
    assert len(python_calls) == 2, "both ranges should run in order on the calling thread"


def test_without_a_native_pool_the_ranges_run_in_order(
    programs: dict[int, dp.Program], python_calls: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A host without ``dp_pool.h``'s symbols (a platform without futexes) has no pool."""
    three = programs[3]
    key = (os.getpid(), 2)
    monkeypatch.delitem(tasks._pools, key, raising=False)
    real = tasks.native

    def symbol(host: object, name: str, *types: object) -> object:
        return None if name == "dp_pool_size" else real(host, name, *types)

    monkeypatch.setattr(tasks, "native", symbol)
    got = _results(three, 7)
    assert tasks._pools[key] is None
    _assert_same(got, _results(programs[1], 7), "3 threads, no native pool")
    assert len(python_calls) == 2
    del tasks._pools[key]


def test_concurrent_callers_get_their_own_results(programs: dict[int, dp.Program]) -> None:
    """4 threads x 10 calls of the 2-thread program, each with its own inputs: the pool runs
    one caller's launch at a time, the others run theirs on their own thread."""
    two = programs[2]
    seeds = [[100 + 10 * t + i for i in range(10)] for t in range(4)]
    want = {s: _results(programs[1], s) for row in seeds for s in row}
    errors: list[BaseException] = []
    barrier = threading.Barrier(4)

    def body(row: list[int]) -> None:
        barrier.wait()
        try:
            for s in row:
                _assert_same(_results(two, s), want[s], f"inputs {s}")
        except BaseException as exc:  # reported in the main thread
            errors.append(exc)

    threads = [threading.Thread(target=body, args=(row,)) for row in seeds]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=120)
    assert not any(t.is_alive() for t in threads), "a caller did not finish"
    if errors:
        raise errors[0]


def _wait(pid: int, seconds: float) -> int | None:
    """The child's exit status, or None (after killing it) if it is still running."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        done, status = os.waitpid(pid, os.WNOHANG)
        if done:
            return os.waitstatus_to_exitcode(status)
        time.sleep(0.05)
    os.kill(pid, 9)
    os.waitpid(pid, 0)
    return None


@pytest.mark.skipif(sys.platform != "linux", reason="fork start method (Linux)")
def test_a_forked_child_gets_a_pool_of_its_own(programs: dict[int, dp.Program]) -> None:
    """The child inherits the parent's pool state but no worker: with the parent's pool its
    first split launch would wait for ever (the wait fails the test instead)."""
    two = programs[2]
    want = _results(two, 8)  # the parent's pool exists and has run
    pid = os.fork()
    if pid == 0:
        code = 1
        try:
            got = _results(two, 8)
            code = 0 if all(np.array_equal(g, w) for g, w in zip(got, want, strict=True)) else 1
        finally:
            os._exit(code)
    assert _wait(pid, 60.0) == 0

"""`dp.compile` allocates no data-sized array (issue 27): a program's workspaces and constant
tables are allocated at its first call, and a call that cannot get its workspace raises a
ContractError naming the program, the bytes asked for and the device.

Before: compiling a graph with a ``(100000, 100000)`` float32 input raised NumPy's raw
``MemoryError: Unable to allocate 37.3 GiB`` (constant folding materialised the broadcast
of the gradient's seed), and every plan allocated one workspace when it was made.
"""

from __future__ import annotations

import resource
import time
import tracemalloc
from collections.abc import Callable, Iterator
from typing import Any

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp

BIG = (40000, 40000)  # float64: 12.8 GB per array, and under 2**31 elements (32-bit indexing)


def _big_graph() -> dp.Graph:
    """Four 12.8 GB inputs (51 GB), a scalar loss, an image output: a data-sized workspace."""
    g = dp.GraphBuilder("forty_gigabytes")
    x, y, z, w = (g.input(n, BIG, "float64") for n in "xyzw")
    g.output("img", dp.exp(x) * y)
    g.output("loss", dp.sum(x * y + dp.square(z - w)))
    return g.build()


def _device_allocations(device: str, monkeypatch: pytest.MonkeyPatch, fail: bool = False) -> list[int]:
    """The byte counts every allocator of ``device`` is asked for from now on (``fail``: each
    request raises Warp's own allocation error instead)."""
    seen: list[int] = []
    dev = wp.get_device(device)
    for name in dir(dev):
        allocator = getattr(dev, name) if name.endswith("_allocator") else None
        if not hasattr(allocator, "allocate"):
            continue

        def counted(size: int, _original: Callable[[int], Any] = allocator.allocate) -> Any:
            seen.append(size)
            if fail:
                raise RuntimeError(f"Failed to allocate {size} bytes on device '{device}'")
            return _original(size)

        monkeypatch.setattr(allocator, "allocate", counted)
    return seen


@pytest.fixture(scope="module")
def big_compile() -> Iterator[tuple[dp.Program, float, int, int]]:
    """The big graph compiled wrt x (run, value_and_grad and tape plans): the program, the
    seconds, the peak of Python-side allocations (tracemalloc: NumPy's) and the growth of
    the process's peak RSS, in bytes."""
    dp.compile(_big_graph().replace(name="warm_up"), wrt=["x"], device="cpu")  # Warp's start, imports
    rss = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024
    tracemalloc.start()
    start = time.perf_counter()
    program = dp.compile(_big_graph(), wrt=["x"], device="cpu")
    seconds = time.perf_counter() - start
    _, peak = tracemalloc.get_traced_memory()
    tracemalloc.stop()
    grown = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - rss
    yield program, seconds, peak, grown


def test_compiling_a_40_gb_graph_allocates_nothing(
    big_compile: tuple[dp.Program, float, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    program, seconds, peak, grown = big_compile
    assert seconds < 30.0
    assert peak < 64 << 20, f"dp.compile made {peak} bytes of Python-side arrays"
    assert grown < 256 << 20, f"dp.compile grew the peak RSS by {grown} bytes"
    for name, plan in program.plans.items():
        assert not plan._free and plan._constants is None, name  # nothing made yet
        assert plan.workspace_bytes() > 12.8e9, name  # what the first call will ask for
    seen = _device_allocations("cpu", monkeypatch)
    program.report  # noqa: B018  (reading the program allocates nothing either)
    assert seen == []


def test_a_workspace_that_cannot_be_allocated_is_a_contract_error(
    big_compile: tuple[dp.Program, float, int, int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """The first call of the 51 GB program cannot get its workspace (allocation simulated to
    fail, as Warp's allocator does, not attempted): ContractError naming the program, the
    bytes and the device."""
    program = big_compile[0]
    plan = program.plans["value_and_grad"]
    asked = plan.workspace_bytes()
    _device_allocations("cpu", monkeypatch, fail=True)
    with pytest.raises(dp.ContractError) as info:
        plan.checkout()
    message = str(info.value)
    assert "'forty_gigabytes'" in message and f"{asked} bytes" in message and "'cpu'" in message
    assert "dpt_ir." not in message


def test_the_program_stays_usable_after_a_failed_workspace(monkeypatch: pytest.MonkeyPatch) -> None:
    """A small program whose first call fails to allocate raises the ContractError and
    nothing else; once memory is there, the next call runs and is right."""
    g = dp.GraphBuilder("small_lazy")
    x = g.input("x", (5, 7), "float32")
    g.output("loss", dp.sum(dp.exp(x)))
    program = dp.compile(g.build(), wrt=["x"], device="cpu")
    inputs = {"x": np.linspace(-1.0, 1.0, 35, dtype=np.float32).reshape(5, 7)}
    with monkeypatch.context() as patch:
        _device_allocations("cpu", patch, fail=True)
        with pytest.raises(dp.ContractError, match=r"'small_lazy': could not allocate its workspace of \d+ bytes"):
            program.value_and_grad(**inputs)
    out, grads = program.value_and_grad(**inputs)
    np.testing.assert_allclose(out["loss"], np.exp(inputs["x"].astype(np.float64)).sum(), rtol=1e-6)
    np.testing.assert_allclose(grads["x"], np.exp(inputs["x"]), rtol=1e-6)

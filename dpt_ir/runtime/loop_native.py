"""A compiled loop's whole step sequence as one native call: `NativeSteps`.

Assumes: the loop (`dpt_ir.runtime.loop.Loop`) runs on the CPU and its buffers are
allocated (`Loop.ready`), so every array it owns keeps its address; each phase it runs is
recorded (`dpt_ir.runtime.recorded.RecordedPhase`) with every step a native entry point or
split launch (``natives``); the loop's inputs are distinct arrays or the same array (never
partly overlapping views), as a graph's values are.

Guarantees: `Loop` runs its step logic once with a `NativeSteps` as its executor; every
``ExecutionPlan.run`` it would make becomes the ops that call does (the output copies of
inputs, the pointer rewrites of `RecordedPhase.run`, the entry-point calls and split
launches, in its order), and every copy a copy op, so replaying the table is the same
sequence of kernel calls with the same arguments as the step-by-step path: bit-identical,
and split launches use the same fixed partition (`tasks.ranges`), so bit-identical for any
thread count. A pointer into one of the loop's inputs is stored relative to that input,
so one table serves every call whose inputs alias one another as the recorded call's did
(`fits`; otherwise the loop records a new table). `run` is one ctypes call of
``dp_loop_run`` (``dp_pool.h``) with the GIL released: no Python, ctypes call or Warp launch
per step. Where a phase has a step that is not native (a CUDA plan), `ok` is False and the
loop runs step by step.
"""

from __future__ import annotations

import ctypes
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.backends.warp import tasks
from dpt_ir.runtime.recorded import address

CALL, SPLIT, SET, COPY = 0, 1, 2, 3
_DATA = wp._src.types.array_t.data.offset  # the data pointer's offset in an array descriptor


class _Op(ctypes.Structure):
    _fields_ = [(f, ctypes.c_longlong) for f in ("kind", "x", "y", "z", "w", "n")]


def _item(arr: Any) -> int:
    """Bytes per element of a `wp.array` or a NumPy array."""
    return arr.itemsize if isinstance(arr, np.ndarray) else wp.types.type_size_in_bytes(arr.dtype)


def _bytes(arr: Any) -> int:
    return int(arr.size) * _item(arr)


def _aliasing(inputs: list[Any]) -> tuple[int, ...]:
    """For each input, the first input at the same address (itself when none)."""
    ptrs = [address(a) for a in inputs]
    return tuple(ptrs.index(p) if p else k for k, p in enumerate(ptrs))


class NativeSteps:
    """The op table of one loop direction, recorded from the loop's step logic."""

    def __init__(self, inputs: list[Any]) -> None:
        self.ok = True
        self.pattern = _aliasing(inputs)
        self.ranges = [(address(a), _bytes(a)) for a in inputs]
        self.raw: list[tuple[int, ...]] = []  # ops with absolute addresses, relocated by `finish`
        self.held: list[Any] = []  # the parts and split launches the table points into
        self.host: Any = None
        self.threads = 1

    def _where(self, ptr: int) -> tuple[int, int]:
        """(input index, offset) of an address inside an input, else (-1, the address)."""
        for k, (start, size) in enumerate(self.ranges):
            if start and start <= ptr < start + size and self.pattern[k] == k:
                return k, ptr - start
        return -1, ptr

    # -- the executor interface `Loop` calls --
    def copy(self, dst: Any, src: Any, dest_offset: int = 0, count: int | None = None) -> None:
        """``wp.copy(dst, src, dest_offset, count=count)`` (elements) as a copy op."""
        item = _item(src)
        n = int(src.size if count is None else count) * item
        if n:
            self.raw.append((COPY, address(dst) + dest_offset * item, address(src), n))

    def phase(self, plan: Any, bound: dict[str, Any], ws: Any, unread: frozenset[str] = frozenset()) -> None:
        """The ops of ``plan.run("forward", bound, ws)``, but the copies of the inputs
        ``unread`` into their outputs (no one reads them)."""
        skip = {address(ws.copies[v]) for v in unread if v in ws.copies}

        def copy(dst: Any, src: Any, n: int) -> None:
            if address(dst) not in skip:
                self.copy(dst, src, count=n)

        recorded = plan.recorded_phase("forward", bound, ws, copy)
        if recorded.natives is None:
            self.ok = False
            return
        for name, targets in recorded.names:
            ptr = address(bound[name]) if name in bound else recorded.fallback[name]
            self.raw.extend((SET, ctypes.addressof(desc) + _DATA, ptr) for desc in targets)
        for step in recorded.natives:
            if isinstance(step, tasks.SplitLaunch):
                self.raw.append((SPLIT, ctypes.addressof(step.native), len(step.parts)))
            else:
                self.raw.append((CALL, *step.address()))
            self.held.append(step)
        self.host = recorded.modules[-1] if recorded.modules else self.host
        self.threads = max(self.threads, plan.threads)

    # -- the table --
    def finish(self) -> None:
        """Relocate the ops and bind ``dp_loop_run`` (not found: `ok` False)."""
        ops = []
        for op in self.raw:
            if op[0] == SET:
                ops.append((SET, op[1], *self._where(op[2]), 0, 0))
            elif op[0] == COPY:
                ops.append((COPY, *self._where(op[1]), *self._where(op[2]), op[3]))
            else:
                ops.append((*op, *(0,) * (6 - len(op))))
        self.table = (_Op * max(len(ops), 1))(*(_Op(*o) for o in ops))
        self.count = len(ops)
        self.bases = (ctypes.c_longlong * max(len(self.ranges), 1))()
        args = (ctypes.c_void_p, ctypes.c_longlong, ctypes.c_void_p, ctypes.c_void_p)
        self.entry = tasks.native(self.host, "dp_loop_run", None, *args) if self.host is not None else None
        self.ok = self.ok and self.entry is not None
        self.raw = []

    def fits(self, inputs: list[Any]) -> bool:
        """Whether ``inputs`` alias one another as the recorded call's did."""
        return _aliasing(inputs) == self.pattern

    def run(self, inputs: list[Any], pool: bool = True) -> None:
        """Replay the table with this call's input addresses, on the thread pool when it is free
        (and ``pool``), else every split launch's parts in order on the calling thread."""
        for k, a in enumerate(inputs):
            self.bases[k] = address(a)
        workers = tasks.pool(self.threads - 1, self.host) if self.threads > 1 and pool else None
        if workers is not None and workers.lock.acquire(blocking=False):
            try:
                self.entry(ctypes.addressof(self.table), self.count, ctypes.addressof(self.bases), workers.state)
            finally:
                workers.lock.release()
            return
        self.entry(ctypes.addressof(self.table), self.count, ctypes.addressof(self.bases), None)

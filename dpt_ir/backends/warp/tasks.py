"""A persistent native thread pool that runs one CPU launch of a C++ kernel as contiguous
ranges of its tasks.

Assumes: the kernel's launch index is a task of a partition fixed by the shapes (the kernel
adds its ``a__task0`` argument to ``wp.tid()``), tasks write disjoint elements and their own
partials, and status flags are only ever set to 1; each range is a CPU command replayed as a
call of its kernel's entry point (`Part`: the entry point, its bounds and its argument
structure, `dpt_ir.runtime.recorded`); the module that first needs a pool holds its
native side (``dp_pool.h`` is in the CPU preamble of every generated module).

Guarantees: the calling thread runs the first range and the pool's workers the others, and
a `SplitLaunch` call returns once every range has returned. The dispatch and the wait are native
(``dp_pool.h``): one ctypes call per launch, with the GIL released; a worker spins for a
while after each range before it sleeps on a futex, so the launches of one step wake no
thread. The result is the one a single launch over every task gives, bit for bit, because
the ranges only decide which thread runs a task, never what a task computes: a launch whose
pool is busy with another thread's launch, or that runs where the native pool is missing (a
platform without futexes), runs its ranges in order on the calling thread instead.
The pool is per process: a forked child (data-parallel ranks) inherits the parent's pool
state but none of its threads, and gets a pool of its own.
"""

from __future__ import annotations

import atexit
import ctypes
import functools
import os
import threading
from dataclasses import dataclass, field
from typing import Any

import warp._src.context as warp_context

# Idle polls of a worker before it sleeps, and of the caller before it yields its core: a
# worker spends about 0.15 ms of CPU per call spinning (measured on x86-64), enough for the
# next launch of a step to find it awake.
SPIN = 4096


@dataclass(frozen=True)
class Part:
    """One range of a split launch: a CPU entry point ``forward(bounds*, args*)`` and the
    ctypes structures it is called with (held here, so the addresses stay valid)."""

    forward: Any  # the ctypes function of the kernel's ``_cpu_forward`` entry point
    bounds: ctypes.Structure
    arguments: ctypes.Structure
    call: Any = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        call = functools.partial(self.forward, ctypes.byref(self.bounds), ctypes.byref(self.arguments))
        object.__setattr__(self, "call", call)

    def address(self) -> tuple[int, int, int]:
        return (
            ctypes.cast(self.forward, ctypes.c_void_p).value or 0,
            ctypes.addressof(self.bounds),
            ctypes.addressof(self.arguments),
        )


class _NativePart(ctypes.Structure):
    _fields_ = [("fn", ctypes.c_void_p), ("bounds", ctypes.c_void_p), ("args", ctypes.c_void_p)]


class Pool:
    """``workers`` native worker threads and the state they share, hosted by the loaded module
    ``host`` (a Warp ``ModuleExec``, kept loaded for the life of the pool: its code is what the
    workers run between launches)."""

    def __init__(self, workers: int, host: Any) -> None:
        self.host = host
        self.lock = threading.Lock()
        size = native(host, "dp_pool_size", ctypes.c_int)()
        self._memory = ctypes.create_string_buffer(size + 64)
        self.state = (ctypes.addressof(self._memory) + 63) & ~63  # alignas(64) in dp_pool.h
        native(host, "dp_pool_init", None, ctypes.c_void_p, ctypes.c_int, ctypes.c_int)(self.state, workers, SPIN)
        self.dispatch = native(host, "dp_pool_run", None, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_int)
        self._stop = native(host, "dp_pool_stop", None, ctypes.c_void_p)
        work = native(host, "dp_pool_work", None, ctypes.c_void_p, ctypes.c_int)
        self.threads = [
            threading.Thread(target=work, args=(self.state, w), name=f"dpt_ir_cpu_{w}", daemon=True)
            for w in range(1, workers + 1)
        ]
        for t in self.threads:
            t.start()

    def stop(self) -> None:
        """Wake the workers and wait for them to return (before the host can be unloaded)."""
        self._stop(self.state)
        for t in self.threads:
            t.join(timeout=5.0)


_pools: dict[tuple[int, int], Pool | None] = {}
_lock = threading.Lock()


def native(host: Any, name: str, restype: Any, *argtypes: Any) -> Any:
    """The C function ``name`` of the loaded module ``host`` (``dp_pool.h``'s, in every CPU
    module), or None where the module has none."""
    address = warp_context.runtime.llvm.wp_lookup(host.handle.encode("utf-8"), name.encode("utf-8"))
    return ctypes.CFUNCTYPE(restype, *argtypes)(address) if address else None


def pool(workers: int, host: Any) -> Pool | None:
    """This process's pool of ``workers`` threads, created once with ``host`` as its
    native side; None where ``host`` has no native pool (a platform without futexes)."""
    key = (os.getpid(), workers)
    if key in _pools:  # every split launch asks: no lock once the pool exists
        return _pools[key]
    with _lock:
        if key not in _pools:
            ready = native(host, "dp_pool_size", ctypes.c_int) is not None
            _pools[key] = Pool(workers, host) if ready else None
        return _pools[key]


@atexit.register
def _stop_pools() -> None:
    pid = os.getpid()
    for (owner, _), p in list(_pools.items()):
        if owner == pid and p is not None:
            p.stop()


def ranges(dim: int, threads: int) -> list[tuple[int, int]]:
    """``dim`` tasks cut into at most ``threads`` contiguous ranges (first task, count),
    their sizes differing by at most one."""
    n = max(1, min(threads, dim))
    cuts = [k * dim // n for k in range(n + 1)]
    return [(cuts[k], cuts[k + 1] - cuts[k]) for k in range(n)]


class SplitLaunch:
    """The ranges of one launch (``parts``, one per `ranges` range, each with its first
    task bound), run together by `__call__` on a pool of ``threads - 1`` workers whose native
    side is ``host``."""

    def __init__(self, parts: list[Part], threads: int, host: Any) -> None:
        self.parts = parts
        self.threads = threads
        self.host = host
        self.native = (_NativePart * len(parts))(*(_NativePart(*p.address()) for p in parts))

    def __call__(self) -> None:
        workers = pool(self.threads - 1, self.host)
        if workers is not None and workers.lock.acquire(blocking=False):
            try:
                workers.dispatch(workers.state, self.native, len(self.parts))
            finally:
                workers.lock.release()
            return
        for p in self.parts:  # the same tasks, in order, on this thread
            p.call()

"""A persistent thread pool that runs one CPU launch of a C++ kernel as contiguous ranges
of its tasks.

Assumes: the kernel's launch index is a task of a partition fixed by the shapes (the kernel
adds its ``a__task0`` argument to ``wp.tid()``), tasks write disjoint elements and their own
partials, and status flags are only ever set to 1; a CPU launch (a recorded Warp launch
replayed, `dpt_ir.backends.warp.recorded`) releases the GIL while the kernel runs.
Guarantees: the calling thread runs the first range and the pool the others, every range is
waited for before `run_parts` returns (the first error is raised), and the result is the
one a single launch over every task gives, bit for bit, because the ranges only decide
which thread runs a task, never what a task computes.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable
from concurrent.futures import Future, ThreadPoolExecutor

_pools: dict[tuple[int, int], ThreadPoolExecutor] = {}
_lock = threading.Lock()


def pool(workers: int) -> ThreadPoolExecutor:
    """The process's pool of ``workers`` threads (created once, kept for the process).
    Keyed by process id too: a forked child (data-parallel ranks) inherits the parent's
    executor objects but none of their threads, so work submitted to them would never run."""
    key = (os.getpid(), workers)
    with _lock:
        if key not in _pools:
            _pools[key] = ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dpt_ir_cpu")
        return _pools[key]


def ranges(dim: int, threads: int) -> list[tuple[int, int]]:
    """``dim`` tasks cut into at most ``threads`` contiguous ranges (first task, count),
    their sizes differing by at most one."""
    n = max(1, min(threads, dim))
    cuts = [k * dim // n for k in range(n + 1)]
    return [(cuts[k], cuts[k + 1] - cuts[k]) for k in range(n)]


def run_parts(parts: list[Callable[[], None]], threads: int) -> None:
    """Run the ranges of one launch on up to ``threads`` threads (``parts``: one recorded
    launch per `ranges` range, each with its first task bound): the first on this thread,
    the others on the pool of ``threads - 1``."""
    futures: list[Future[None]] = [pool(threads - 1).submit(part) for part in parts[1:]]
    error: BaseException | None = None
    try:
        parts[0]()
    except BaseException as exc:  # wait for the others before raising
        error = exc
    for f in futures:
        try:
            f.result()
        except BaseException as exc:
            error = error or exc
    if error is not None:
        raise error

"""Interleaved timing rounds for benchmarks that compare contenders in one run: every
contender is warmed up once, then each round runs them all in a rotated order, so slow
drift of a shared machine falls on every contender alike."""

from __future__ import annotations

import time
from collections.abc import Callable


def measure(steps: dict[str, Callable[[], object]], reps: int) -> dict[str, dict[str, list[float]]]:
    """CPU (``thread_time``) and wall seconds of each step over ``reps`` rotating rounds."""
    for fn in steps.values():
        fn()
    names = list(steps)
    times: dict[str, dict[str, list[float]]] = {k: {"cpu": [], "wall": []} for k in names}
    for rep in range(reps):
        for name in names[rep % len(names) :] + names[: rep % len(names)]:
            cpu, wall = time.thread_time(), time.perf_counter()
            steps[name]()
            times[name]["wall"].append(time.perf_counter() - wall)
            times[name]["cpu"].append(time.thread_time() - cpu)
    return times

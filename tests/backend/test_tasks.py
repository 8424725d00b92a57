"""The CPU task pool (`dpt_ir.backends.cxx.tasks`) in a forked child: a rank forked from a
process that already ran threaded launches gets a pool of its own, with live threads."""

from __future__ import annotations

import os
import sys
import time

import pytest

from dpt_ir.backends.cxx import tasks


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
def test_a_forked_child_gets_a_pool_with_live_threads() -> None:
    assert tasks.pool(1).submit(lambda: 41).result(timeout=10) == 41  # the parent's pool exists
    pid = os.fork()
    if pid == 0:  # the child: the inherited executor has no threads; ours must
        code = 1
        try:
            code = 0 if tasks.pool(1).submit(lambda: 42).result(timeout=10) == 42 else 1
        finally:
            os._exit(code)
    assert _wait(pid, 30.0) == 0

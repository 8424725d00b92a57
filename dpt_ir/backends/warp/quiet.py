"""Keeping Warp quiet while dpt_ir drives it.

Assumes: Warp prints its banner (at ``wp.init``) and a line per module load when
``wp.config.log_level`` is INFO or lower (its default), and its native library prints a
notice on stderr at init on a machine without a CUDA driver.

Guarantees: inside `quiet_warp` Warp logs warnings and errors only; outside, the user's
``wp.config.log_level`` is what it was (nested and concurrent blocks share one saved
level). `init_quietly` initialises Warp without the banner and logs the native no-driver
notice at debug level on the ``dpt_ir`` logger; anything else Warp writes on stderr
during init is passed on. ``DPT_IR_LOG=debug`` turns both off: Warp speaks as it would.
"""

from __future__ import annotations

import logging
import os
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager

import warp as wp

_quiet_lock = threading.Lock()
_quiet_depth = 0
_saved_level: int | None = None
# Printed by Warp's native library on stderr when a machine has no CUDA driver.
_NATIVE_NOTICES = ("Warp CUDA warning: Could not find or load the NVIDIA CUDA driver",)


def _verbose() -> bool:
    return os.environ.get("DPT_IR_LOG", "").strip().lower() == "debug"


@contextmanager
def quiet_warp() -> Iterator[None]:
    """Warp's log level at WARNING inside the block (nested and concurrent blocks share one
    saved level); the user's level outside. A no-op with ``DPT_IR_LOG=debug``."""
    global _quiet_depth, _saved_level
    if _verbose():
        yield
        return
    with _quiet_lock:
        if _quiet_depth == 0:
            _saved_level = wp.config.log_level
            wp.config.log_level = max(wp.config.log_level, logging.WARNING)
        _quiet_depth += 1
    try:
        yield
    finally:
        with _quiet_lock:
            _quiet_depth -= 1
            if _quiet_depth == 0 and _saved_level is not None:
                wp.config.log_level = _saved_level
                _saved_level = None


def init_quietly() -> None:
    """``wp.init()`` without its banner; the native library's no-CUDA-driver notice on
    stderr is captured and logged at debug level (anything else it writes there is passed
    on). A no-op once Warp is initialised."""
    if wp._src.context.runtime is not None:
        return
    with quiet_warp():
        if _verbose():
            wp.init()
            return
        captured = _capture_stderr(wp.init)
    lines = captured.splitlines(keepends=True)
    for line in lines:
        if line.startswith(_NATIVE_NOTICES):
            logging.getLogger("dpt_ir").debug("warp: %s", line.strip())
        else:
            sys.stderr.write(line)


def _capture_stderr(call: Callable[[], None]) -> str:
    """Run ``call()`` with file descriptor 2 sent to a temporary file; its content."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile() as tmp:
        os.dup2(tmp.fileno(), 2)
        try:
            call()
        finally:
            os.dup2(saved, 2)
            os.close(saved)
        tmp.seek(0)
        return tmp.read().decode(errors="replace")

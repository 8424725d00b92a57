"""Warp's precompiled CPU headers (clang PCH files), kept from one process to the next.

Every CPU module Warp builds first compiles Warp's native headers (``builtin.h`` and what it
includes). Warp precompiles them into a PCH file in a temporary folder of the process
(``runtime.get_clang_pch_dir()``, one per thread), which it forgets at exit. Measured on
this project's machine, an empty Warp module builds in 1.05 s without a PCH, 1.66 s while
making one, and 0.14 s with one. So every new process paid the 1.66 s again.
`precompiled_headers` wraps dpt_ir's builds:

- PCH files in ``store`` (one folder per `header_key`) are copied into the process's folder
  before a build, so a new process builds its first module in about 0.14 s plus its own code;
- a process with none stored builds its first module without one (1.05 s rather than 1.66: a
  script that builds one module is the common case); its next build makes one;
- after a build, PCH files the process made are published to ``store`` (each written to a
  temporary file, then ``os.replace``d: a reader never sees part of one);
- if a build raises after PCH files were copied in, the copies are deleted from both folders,
  so a caller's retry builds without them.

Guarantees: a module's hash and object code do not depend on this. Warp hashes
``config.use_precompiled_headers``, which is left as it is, and a PCH changes only how clang
reads the same headers (`tests/backend/test_headers.py`: the object files are byte-identical).
Builds outside the block, and builds with ``wp.config.use_precompiled_headers`` off, are
Warp's own. A store that cannot be read or written costs the time, never the build: its
errors are logged at debug level.

Assumes: Warp 1.19, whose CPU build calls ``runtime.get_clang_pch_dir()`` in the building
thread (None: build without a PCH) and names each PCH file after the options it depends on
(``builtin_bd1_tis_o2_<hash>.pch``). If the runtime lacks that method, the block does nothing.
A PCH also depends on the header files and the CPU; `header_key` names both.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import platform
import shutil
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import warp as wp

log = logging.getLogger("dpt_ir.cache")

_lock = threading.Lock()
_local = threading.local()  # .build: the `_Build` of the block this thread is in, if any
_warp_pch_dir: Callable[[], str | None] | None = None  # Warp's own method, once wrapped
_compiled = False  # a CPU module was compiled in this process inside a block


@functools.cache
def header_key() -> str:
    """What a PCH of Warp's headers depends on besides its options: Warp's version, where its
    headers are, ``builtin.h``'s size and time (a reinstall changes them), and the CPU (clang
    compiles for the host's features)."""
    native = Path(wp.__file__).resolve().parent / "native"
    builtin = native / "builtin.h"
    st = builtin.stat() if builtin.exists() else None
    stamp = f"{st.st_mtime_ns}:{st.st_size}" if st else "missing"
    parts = [wp.__version__, str(native), stamp, platform.machine(), _cpu_identity()]
    return hashlib.sha256("\n".join(parts).encode()).hexdigest()[:20]


def _cpu_identity() -> str:
    try:
        text = Path("/proc/cpuinfo").read_text()
    except OSError:
        return platform.processor()
    lines = [ln for ln in text.splitlines() if ln.startswith(("model name", "flags"))]
    return "\n".join(lines[:2])


def _runtime() -> Any:
    return getattr(wp._src.context, "runtime", None)


class _Build:
    """One wrapped build: the stored PCH files it copied in, and the process folder it used."""

    def __init__(self, store: Path) -> None:
        self.store = store
        self.process: Path | None = None
        self.seeded: list[Path] = []

    def folder(self, process: Path) -> Path | None:
        """The PCH folder this build gives clang: the process's, with the stored files copied
        in; None (no PCH) for a process's first build when none is stored or made yet."""
        global _compiled
        stored = _stored(self.store)
        with _lock:
            first, _compiled = not _compiled, True
        if first and not stored and not any(process.glob("*.pch")):
            return None
        self.process = process
        for src in stored:
            dst = process / src.name
            if not dst.exists() and _copy(src, dst):
                self.seeded.append(dst)
        return process

    def publish(self) -> None:
        """Store the PCH files of the process folder that ``store`` lacks."""
        if self.process is None:
            return
        for src in sorted(self.process.glob("*.pch")):
            dst = self.store / src.name
            if not dst.exists():
                _copy(src, dst)

    def forget(self) -> None:
        """Delete the PCH files this build copied in, from the process folder and the store."""
        for path in self.seeded:
            for p in (path, self.store / path.name):
                try:
                    p.unlink(missing_ok=True)
                except OSError as exc:
                    log.debug("could not delete precompiled header %s: %s", p, exc)


def _stored(store: Path) -> list[Path]:
    try:
        return sorted(store.glob("*.pch")) if store.is_dir() else []
    except OSError as exc:
        log.debug("could not read precompiled headers in %s: %s", store, exc)
        return []


def _copy(src: Path, dst: Path) -> bool:
    """``src`` to ``dst`` through a temporary file in ``dst``'s folder and ``os.replace``."""
    tmp = dst.with_name(f".{dst.name}.{os.getpid()}.{threading.get_ident()}.tmp")
    try:
        dst.parent.mkdir(parents=True, exist_ok=True)
        shutil.copyfile(src, tmp)
        os.replace(tmp, dst)
        return True
    except OSError as exc:
        log.debug("could not copy precompiled header %s to %s: %s", src, dst, exc)
        tmp.unlink(missing_ok=True)
        return False


def _pch_dir() -> str | None:
    """Warp's ``runtime.get_clang_pch_dir``, as a build inside a block of this thread sees it."""
    assert _warp_pch_dir is not None  # installed before this replaces it
    folder = _warp_pch_dir()
    build: _Build | None = getattr(_local, "build", None)
    if build is None or folder is None:
        return folder
    chosen = build.folder(Path(folder))
    return None if chosen is None else str(chosen)


def _install(runtime: Any) -> bool:
    """Wrap ``runtime.get_clang_pch_dir`` once; False where Warp has no such method."""
    global _warp_pch_dir
    with _lock:
        if _warp_pch_dir is None:
            method = getattr(runtime, "get_clang_pch_dir", None)
            if method is None:
                return False
            _warp_pch_dir = method
            runtime.get_clang_pch_dir = _pch_dir
    return True


@contextmanager
def precompiled_headers(store: Path) -> Iterator[None]:
    """Builds in this block (this thread) take their PCH files from, and give new ones to,
    ``store / header_key()`` (module docstring)."""
    runtime = _runtime()
    if runtime is None or not _install(runtime):
        yield
        return
    build = _Build(store / header_key())
    outer, _local.build = getattr(_local, "build", None), build
    try:
        yield
    except BaseException:
        build.forget()
        raise
    finally:
        _local.build = outer
        build.publish()

"""Writing, importing and caching generated Warp modules.

Warp refuses kernels defined by ``exec``: the source is written to a file in the cache
directory, imported with importlib under its hashed name and registered in
``sys.modules``. Warp keys its own binary cache on the module's content, so a new
process that imports the same file reuses the compiled kernels.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import os
import sys
from pathlib import Path
from types import ModuleType

import warp as wp

DEFAULT_CACHE = Path.home() / ".cache" / "dpt_ir"


def cache_root() -> Path:
    """``DPT_IR_CACHE`` if set, else ``~/.cache/dpt_ir``."""
    env = os.environ.get("DPT_IR_CACHE")
    return Path(env) if env else DEFAULT_CACHE


@functools.cache
def source_fingerprint() -> str:
    """A hash of dpt_ir's own source: a changed compiler never reuses stale plans, even
    when its version number did not change."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[2]
    for path in sorted(root.rglob("*.py")):
        h.update(path.relative_to(root).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


def content_key(*parts: str) -> str:
    h = hashlib.sha256()
    for p in parts:
        h.update(p.encode())
        h.update(b"\0")
    return h.hexdigest()[:20]


def import_source(text: str, directory: Path, name: str) -> ModuleType:
    """Write ``text`` to ``directory/name.py`` (atomically, unless it is already there
    with that content) and import it as module ``name``."""
    if name in sys.modules:
        return sys.modules[name]
    directory.mkdir(parents=True, exist_ok=True)
    path = directory / f"{name}.py"
    if not path.exists() or path.read_text() != text:
        tmp = path.with_suffix(f".{os.getpid()}.tmp")
        tmp.write_text(text)
        tmp.replace(path)
    spec = importlib.util.spec_from_file_location(name, path)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    try:
        spec.loader.exec_module(module)
    except BaseException:
        del sys.modules[name]
        raise
    return module


def load(module: ModuleType, device: str) -> None:
    """Build (or fetch from Warp's cache) the module's binary for ``device`` now, so that
    compile errors surface in ``dp.compile`` and launches never compile."""
    wp.load_module(module, device=device)

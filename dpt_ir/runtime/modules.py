"""Writing, importing, loading and caching generated Warp modules, quietly.

Warp refuses kernels defined by ``exec``: the source is written to a file in the cache
directory, imported with importlib under its hashed name and registered in
``sys.modules``. Warp keys its own binary cache on the module's content, so a new
process that imports the same file reuses the compiled kernels.

A program has several generated modules (one per pipeline); each is a `GeneratedModule`
that is imported and built (Warp's codegen and clang, or its cached binary) on its first
use, once per process, under `BUILD_LOCK` (one Warp build at a time per process; the
compiler holds the same lock).

Cache entries (``<cache_root>/<key>/``) are self-healing: ``plan.json`` is a `CacheRecord`
holding the plans (its payload), the versions and key it was made for, and SHA-256
checksums of the payload, of every generated module and of the files Warp keeps for each
module built so far in its kernel cache (a module's are added when it is first built,
`record_build`). `read_entry` returns a problem (missing file, unreadable JSON, version or
key mismatch, checksum mismatch) instead of raising; `load` rebuilds Warp's files when
they do not match their checksums or fail to load. Each problem is logged once per
process, at warning level, on the ``dpt_ir.cache`` logger; every write is atomic (a
temporary file, then ``os.replace``).
Loads run inside `dpt_ir.backends.warp.quiet.quiet_warp`: no module-load lines; and inside
`dpt_ir.backends.warp.headers.precompiled_headers`, whose precompiled Warp headers are kept in
Warp's kernel cache (``dpt_ir_headers/``), so a new process does not build them again.
"""

from __future__ import annotations

import functools
import hashlib
import importlib.util
import logging
import os
import re
import shutil
import sys
import tempfile
import threading
import time
from pathlib import Path
from types import ModuleType

import pydantic
import warp as wp

from dpt_ir.backends.warp.headers import precompiled_headers
from dpt_ir.backends.warp.quiet import init_quietly, quiet_warp
from dpt_ir.version import __version__

DEFAULT_CACHE = Path.home() / ".cache" / "dpt_ir"


def cache_root() -> Path:
    """``DPT_IR_CACHE`` if set, else ``~/.cache/dpt_ir``."""
    env = os.environ.get("DPT_IR_CACHE")
    return Path(env) if env else DEFAULT_CACHE


@functools.cache
def source_fingerprint() -> str:
    """A hash of dpt_ir's own source (its Python files and the C++ headers the generated
    modules include, such as ``dp_math.h``): a changed compiler never reuses stale plans,
    even when its version number did not change."""
    h = hashlib.sha256()
    root = Path(__file__).resolve().parents[1]
    for path in sorted([*root.rglob("*.py"), *root.rglob("*.h")]):
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
    if not path.exists() or path.read_bytes() != text.encode():
        write_atomic(path, text)
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


CACHE_FORMAT = 3
PLAN_FILE = "plan.json"
log = logging.getLogger("dpt_ir.cache")
_warned: set[str] = set()
_warned_lock = threading.Lock()
BUILD_LOCK = threading.RLock()  # one import or Warp build at a time per process: sys.modules, Warp's loader


class CacheRecord(pydantic.BaseModel):
    """``plan.json`` of a cache entry. ``payload`` is the plans document (a JSON string);
    ``modules`` maps each generated module's name to the SHA-256 of its source (the file
    ``<name>.py`` next to ``plan.json``); ``warp_files`` maps the name of each module built
    so far to the files Warp keeps for it (relative to Warp's kernel cache) and their
    SHA-256."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    format: int
    key: str
    dpt_ir: str
    warp: str
    payload_sha256: str
    payload: str
    modules: dict[str, str]
    warp_files: dict[str, dict[str, str]] = {}


def sha256(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` through a temporary file in the same folder and
    ``os.replace``: readers see the old file or the new one, never a partial one."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def warn_once(key: str, message: str) -> None:
    """Log ``message`` at warning level, once per process and cache entry ``key``."""
    with _warned_lock:
        if key in _warned:
            return
        _warned.add(key)
    log.warning(message)


def new_record(key: str, payload: str, sources: dict[str, str]) -> CacheRecord:
    """The record of a freshly compiled entry: ``sources`` maps each module's name to its
    text (Warp's checksums are added as each module is built, `record_build`)."""
    return CacheRecord(
        format=CACHE_FORMAT,
        key=key,
        dpt_ir=__version__,
        warp=wp.config.version,
        payload_sha256=sha256(payload.encode()),
        payload=payload,
        modules={name: sha256(text.encode()) for name, text in sources.items()},
    )


Entry = tuple[CacheRecord | None, dict[str, str] | None, str | None]


def _read_record(entry: Path, key: str) -> tuple[CacheRecord | None, str | None]:
    """``plan.json`` of ``entry`` if it is sound and made for ``key`` and these versions,
    else ``(None, problem)``."""
    plan = entry / PLAN_FILE
    try:
        record = CacheRecord.model_validate_json(plan.read_bytes())
    except (OSError, ValueError) as exc:  # pydantic's ValidationError is a ValueError
        return None, f"{PLAN_FILE} is unreadable ({type(exc).__name__}: {str(exc).splitlines()[0][:120]})"
    expected = {"format": CACHE_FORMAT, "key": key, "dpt_ir": __version__, "warp": wp.config.version}
    found = {name: getattr(record, name) for name in expected}
    if found != expected:
        return None, f"{PLAN_FILE} was written for {found}, expected {expected}"
    if sha256(record.payload.encode()) != record.payload_sha256:
        return None, f"{PLAN_FILE}: the payload does not match its checksum"
    return record, None


def read_entry(entry: Path, key: str) -> Entry:
    """``(record, module name -> source, None)`` for a sound entry; ``(None, None, problem)``
    for a damaged one; ``(None, None, None)`` when there is no entry at all."""
    if not (entry / PLAN_FILE).exists():
        stray = entry.is_dir() and any(entry.glob("*.py"))
        return None, None, (f"{PLAN_FILE} is missing" if stray else None)
    record, problem = _read_record(entry, key)
    if record is None:
        return None, None, problem
    sources = {}
    for name, digest in record.modules.items():
        try:
            data = (entry / f"{name}.py").read_bytes()
        except OSError:
            return None, None, f"{name}.py is missing"
        if sha256(data) != digest:
            return None, None, f"{name}.py does not match its checksum"
        sources[name] = data.decode()
    return record, sources, None


def write_entry(entry: Path, record: CacheRecord, sources: dict[str, str]) -> None:
    """Write the modules' ``sources`` (name -> text), then ``plan.json`` (so that a record
    never names a module file not yet written)."""
    for name, text in sources.items():
        path = entry / f"{name}.py"
        if not path.exists() or path.read_bytes() != text.encode():
            write_atomic(path, text)
    write_atomic(entry / PLAN_FILE, record.model_dump_json())


def record_build(entry: Path, key: str, module_name: str, files: dict[str, str]) -> None:
    """Add the checksums of Warp's ``files`` for ``module_name`` to the entry's record, read
    afresh (another module, or another process, may have added its own since). A record that
    is missing or unsound is left alone: the next compile of the entry heals it."""
    record, _ = _read_record(entry, key) if (entry / PLAN_FILE).exists() else (None, None)
    if record is None or module_name not in record.modules or record.warp_files.get(module_name) == files:
        return
    warp = {**record.warp_files, module_name: files}
    updated = CacheRecord.model_validate({**record.model_dump(), "warp_files": warp})
    write_atomic(entry / PLAN_FILE, updated.model_dump_json())


# -- Warp's files ------------------------------------------------------------------------


PCH_FOLDER = "dpt_ir_headers"  # in Warp's kernel cache: Warp's precompiled headers (`headers.py`)


def warp_cache_dir() -> Path:
    """Warp's kernel cache (initialising Warp, quietly)."""
    init_quietly()
    return Path(wp.config.kernel_cache_dir)


# The folder a Warp build writes before renaming it into place: ``<module folder>_p<pid>_t<thread>``.
BUILDING = re.compile(r"_p\d+_t\d+$")


def _module_folders(module_name: str) -> list[Path]:
    """The folders Warp keeps for ``module_name`` in its kernel cache; not those of builds still
    running (another process building the same module: two ranks of a distributed job), whose
    files vanish when the build renames its folder, and which are that build's to keep."""
    return [d for d in warp_cache_dir().glob(f"wp_{module_name}_*") if d.is_dir() and not BUILDING.search(d.name)]


def warp_files(module_name: str) -> dict[str, str]:
    """Every file Warp keeps for ``module_name`` in its kernel cache (`_module_folders`) -> its SHA-256."""
    root = warp_cache_dir()
    files = sorted(p for d in _module_folders(module_name) for p in d.iterdir() if p.is_file())
    return {p.relative_to(root).as_posix(): sha256(p.read_bytes()) for p in files}


def _warp_problem(expected: dict[str, str]) -> str | None:
    root = warp_cache_dir()
    for name, digest in expected.items():
        path = root / name
        if not path.is_file():
            return f"Warp's {name} is missing from {root}"
        if sha256(path.read_bytes()) != digest:
            return f"Warp's {name} does not match its checksum"
    return None


def purge_warp(module_name: str) -> None:
    """Delete Warp's cached files of ``module_name`` (Warp rebuilds them on load)."""
    for d in _module_folders(module_name):
        shutil.rmtree(d, ignore_errors=True)


def load(module: ModuleType, device: str, key: str, expected: dict[str, str] | None, purge: bool) -> dict[str, str]:
    """Build (or fetch from Warp's cache) the module's binary for ``device`` now, so that
    Warp's launches never compile (nor load) a module themselves. Returns the checksums of
    Warp's files for the module.

    ``expected``: the checksums recorded with the entry; a missing or different file is
    logged and rebuilt. ``purge``: rebuild Warp's files regardless (the entry was damaged).
    A binary Warp fails to load (garbage, truncated, empty, unreadable metadata) is logged,
    deleted and rebuilt once.
    """
    name = module.__name__
    if not purge and expected:
        problem = _warp_problem(expected)
        if problem is not None:
            warn_once(key, f"cache entry {key}: {problem}; rebuilding Warp's binary")
            purge = True
    if purge:
        purge_warp(name)
    headers = warp_cache_dir() / PCH_FOLDER
    with quiet_warp():
        try:
            with precompiled_headers(headers):
                wp.load_module(module, device=device)
        except Exception as exc:  # Warp raises plain Exception, JSONDecodeError, OSError here
            warn_once(key, f"cache entry {key}: Warp's cached binary failed to load ({exc}); rebuilding it")
            purge_warp(name)
            with precompiled_headers(headers):  # without the stored headers it may have read
                wp.load_module(module, device=device)
    return warp_files(name)


class GeneratedModule:
    """One generated module of a cache entry, imported and built on first use.

    ``imported()`` imports the source (no Warp build: what the CUDA ahead-of-time compile
    needs); ``built()`` builds it for ``device`` once per process, under `BUILD_LOCK`
    (concurrent first calls build once), and records Warp's files in the entry
    (`record_build`). ``info`` is the module's row of the program report (``builds``): its name,
    whether it is built and its build seconds, filled on the build.
    Assumes: ``text`` is the module's source, already written to ``entry`` by the compiler.
    """

    def __init__(self, name: str, text: str, entry: Path, key: str, device: str, expected: dict[str, str] | None):
        self.name = name
        self.text = text
        self.path = entry / f"{name}.py"
        self.entry = entry
        self.key = key
        self.device = device
        self.expected = expected  # Warp's files as recorded; None: not recorded (never built with this entry)
        self.info: dict[str, object] = {"module": name, "built": False, "build_seconds": None}
        self._built: ModuleType | None = None

    def imported(self) -> ModuleType:
        """The module, imported (written first if its file went missing)."""
        with BUILD_LOCK:
            return import_source(self.text, self.entry, self.name)

    def built(self) -> ModuleType:
        """The module, built for the device (at most once per process)."""
        module = self._built
        if module is not None:
            return module
        with BUILD_LOCK:
            if self._built is None:
                start = time.perf_counter()
                module = self.imported()
                files = load(module, self.device, self.key, self.expected, purge=False)
                record_build(self.entry, self.key, self.name, files)
                self.expected = files
                self.info.update(built=True, build_seconds=time.perf_counter() - start)
                log.debug("module %s built for %s in %.2f s", self.name, self.device, self.info["build_seconds"])
                self._built = module
            return self._built

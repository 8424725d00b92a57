"""Shared pytest configuration: the ``--regen-golden`` option, the repository root on
``sys.path`` so tests can import the benchmark graph builders (``benchmarks.graphs``), and
the compile caches.

Caches: unless the environment already names them, Warp's kernel cache
(``WARP_CACHE_PATH``) and dpt_ir's (``DPT_IR_CACHE``) live under ``.dpt_ir_cache/tests/``
in the repository (git-ignored; ``DPT_IR_TEST_CACHE`` moves it), so tests never touch the
user's caches and a second run reuses the compiled modules. dpt_ir keys its on-disk cache
on its version, not its source, so the test cache is keyed on a digest of the ``dpt_ir``
sources: editing the compiler never serves a stale generated module. Warp keys its binaries
on the generated source, so its cache is shared. Set before any test initialises Warp.
"""

from __future__ import annotations

import hashlib
import os
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


def _source_digest() -> str:
    """A digest of every ``dpt_ir/**/*.py`` file (names and contents)."""
    h = hashlib.sha256()
    for path in sorted((ROOT / "dpt_ir").rglob("*.py")):
        h.update(path.relative_to(ROOT).as_posix().encode())
        h.update(path.read_bytes())
    return h.hexdigest()[:16]


TEST_CACHE = Path(os.environ.get("DPT_IR_TEST_CACHE") or ROOT / ".dpt_ir_cache" / "tests")
os.environ.setdefault("WARP_CACHE_PATH", str(TEST_CACHE / "warp"))
os.environ.setdefault("DPT_IR_CACHE", str(TEST_CACHE / f"dpt_ir-{_source_digest()}"))


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--regen-golden",
        action="store_true",
        default=False,
        help="rewrite golden files (tests/passes/golden/...) instead of comparing against them",
    )


@pytest.fixture
def regen_golden(request: pytest.FixtureRequest) -> bool:
    """True when the run was asked to rewrite golden files."""
    return bool(request.config.getoption("--regen-golden"))

"""Shared pytest configuration: the ``--regen-golden`` option, the repository root on
``sys.path`` so tests can import the benchmark graph builders (``benchmarks.graphs``), and
the compile caches.

Caches: unless the environment already names them, Warp's kernel cache
(``WARP_CACHE_PATH``) and dpt_ir's (``DPT_IR_CACHE``) live under ``.dpt_ir_cache/tests/``
in the repository (git-ignored; ``DPT_IR_TEST_CACHE`` moves it), so tests never touch the
user's caches and a second run reuses the compiled modules (both caches are keyed on
content: dpt_ir's on the graph, options and a fingerprint of its sources, Warp's on the
generated source). Set at collection, before any test initialises Warp.

Build level: the in-process tests build the generated modules at clang ``-O0``
(``DPT_IR_TEST_OPT_LEVEL``, default 0; 2 is what users get). The tests check what the
generated C++ computes, which the optimisation level does not change (floating-point
contraction is a separate Warp option, left as shipped), and ``-O0`` builds the large
batched test modules about 4x faster (the float32 op-table module: 25 s against 101 s).
Tests that start their own process (determinism across processes, disk-cache hits)
build at the shipped level, and `DPT_IR_TEST_OPT_LEVEL=2 python -m pytest` runs the
whole suite that way.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import warp as wp

ROOT = Path(__file__).resolve().parents[1]
if str(ROOT) not in sys.path:
    sys.path.insert(0, str(ROOT))


TEST_CACHE = Path(os.environ.get("DPT_IR_TEST_CACHE") or ROOT / ".dpt_ir_cache" / "tests")
os.environ.setdefault("WARP_CACHE_PATH", str(TEST_CACHE / "warp"))
os.environ.setdefault("DPT_IR_CACHE", str(TEST_CACHE / "dpt_ir"))
wp.config.optimization_level = int(os.environ.get("DPT_IR_TEST_OPT_LEVEL", "0"))


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

"""The generated C++/Warp module text of the five benchmark cases and of the batched op-table
programs, pinned by SHA-256 (``golden/generated_hashes.json``).

A refactoring that claims to move code, not change it, must leave every hash as it is. A
change to code generation that is meant shows up here as changed hashes: rerun with
``python -m pytest tests/backend/test_generated_hashes.py --regen-golden`` and say so in the
commit. Only the passes and code generation run (`dp.compile` builds each module on first
use), so the test compiles nothing with clang.
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path

import dpt_ir as dp
from benchmarks.cases import CASES

HASHES = Path(__file__).parent / "golden" / "generated_hashes.json"
SHAPE = (64, 96)  # not a multiple of the lane or block widths: every driver's tail is generated


def _texts(program: dp.Program) -> dict[str, str]:
    """Plan name -> the text of the module that plan launches."""
    return {name: plan.module.text for name, plan in sorted(program.plans.items())}


def _case_texts() -> dict[str, str]:
    out = {}
    for name, case in sorted(CASES.items()):
        for threads in (1, 2):
            program = dp.compile(case.build(SHAPE), wrt=[case.wrt], device="cpu", threads=threads)
            for plan, text in _texts(program).items():
                out[f"{name}/t{threads}/{plan}"] = text
    return out


def _op_table_texts() -> dict[str, str]:
    """The op-table programs exactly as the compiled-op tests build them (`conftest.op_batch`)."""
    from .conftest import op_batch

    out = {}
    for dtype in ("float32", "float64"):
        program = op_batch(dtype).program
        assert program is not None
        for plan, text in _texts(program).items():
            out[f"ops_{dtype}/{plan}"] = text
    return out


def _hashes() -> dict[str, str]:
    texts = {**_case_texts(), **_op_table_texts()}
    return {k: hashlib.sha256(v.encode()).hexdigest() for k, v in sorted(texts.items())}


def test_generated_module_text_is_pinned(regen_golden: bool) -> None:
    found = _hashes()
    if regen_golden:
        HASHES.write_text(json.dumps(found, indent=1, sort_keys=True) + "\n")
        return
    assert HASHES.exists(), "no pinned hashes: run with --regen-golden"
    expected = json.loads(HASHES.read_text())
    changed = sorted(k for k in expected.keys() | found.keys() if expected.get(k) != found.get(k))
    assert not changed, f"generated module text changed for {changed} (rerun with --regen-golden if intended)"

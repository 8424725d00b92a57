"""Golden tests: the textual IR after each pass of the default pipeline, for every
hand-written graph, equals ``golden/<graph>/NN-<pass>.ir``.

Run ``python -m pytest tests/passes/test_golden.py --regen-golden`` to rewrite the files
after an intended change, then review the diff.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions

from .graphs import CASES

GOLDEN = Path(__file__).parent / "golden"


def _stage_texts(name: str) -> dict[str, str]:
    """File name -> IR text after each pass."""
    case = CASES[name]
    result = run_pipeline(case.graph, CompileOptions(wrt=case.wrt))
    return {f"{rec.index:02d}-{rec.name}.ir": g.to_text() for rec, g in zip(result.records, result.stages, strict=True)}


def _regenerate(folder: Path, texts: dict[str, str]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    for stale in folder.glob("*.ir"):
        if stale.name not in texts:
            stale.unlink()
    for file, text in texts.items():
        (folder / file).write_text(text)


@pytest.mark.parametrize("name", sorted(CASES))
def test_ir_after_each_pass_matches_golden(name: str, regen_golden: bool) -> None:
    texts = _stage_texts(name)
    folder = GOLDEN / name
    if regen_golden:
        _regenerate(folder, texts)
        return
    assert folder.is_dir(), f"no golden files for {name!r}: run pytest with --regen-golden"
    assert sorted(p.name for p in folder.glob("*.ir")) == sorted(texts), (
        f"golden files of {name!r} do not match the pipeline's passes (run with --regen-golden)"
    )
    for file, text in texts.items():
        expected = (folder / file).read_text()
        assert text == expected, f"{name}/{file} differs from its golden file (run with --regen-golden)"

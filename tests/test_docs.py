"""Every ```python block of every docs/*.md file runs, each in a fresh namespace.

A block opts out only by starting with the line ``# doctest: skip``. Ops a block
registers are removed after it runs, so the op table other tests see is the built-in one.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from dpt_ir.ir import registry

DOCS = Path(__file__).resolve().parents[1] / "docs"
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
SKIP_MARK = "# doctest: skip"


def python_blocks() -> list[tuple[str, int, str]]:
    """(file name, line of the opening fence, source) for every python block under docs/."""
    blocks = []
    for path in sorted(DOCS.glob("*.md")):
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            blocks.append((path.name, text.count("\n", 0, m.start()) + 1, m.group(1)))
    return blocks


BLOCKS = python_blocks()


def test_docs_have_python_blocks() -> None:
    assert any(name == "adding-an-op.md" for name, _, _ in BLOCKS)


@pytest.mark.parametrize(("name", "line", "source"), BLOCKS, ids=[f"{n}:{ln}" for n, ln, _ in BLOCKS])
def test_doc_block_runs(name: str, line: int, source: str, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    if source.lstrip().startswith(SKIP_MARK):
        pytest.skip(f"{name}:{line} is marked {SKIP_MARK!r}")
    # Pad with blank lines so tracebacks point at the line in the .md file.
    code = compile("\n" * line + source, str(DOCS / name), "exec")
    exec(code, {"__name__": f"docs_{Path(name).stem.replace('-', '_')}"})

"""Every ```python block of README.md and of every docs/**/*.md file runs as written, each in
a fresh namespace, in an empty current folder.

A block that needs what a test machine may lack starts with one marker line, and is skipped,
with the reason, only where that is missing:

- ``# doctest: needs cuda`` (a CUDA device);
- ``# doctest: needs NAME[, NAME...]`` (importable modules: the optional extras, e.g. ``torch``).

No other marker exists: a block that cannot run is not shown as code (show it as a
``text``/``console`` block of output instead). Ops a block registers are removed after it
runs, so the op table other tests see is the built-in one.
"""

from __future__ import annotations

import importlib.util
import re
from pathlib import Path

import pytest

from dpt_ir.ir import registry

ROOT = Path(__file__).resolve().parents[1]
FENCE = re.compile(r"^```python[ \t]*\n(.*?)^```[ \t]*$", re.MULTILINE | re.DOTALL)
MARKER = re.compile(r"^# doctest:(.*)$", re.MULTILINE)
NEEDS = re.compile(r"^ needs ([\w.]+(?:, [\w.]+)*)(?:\s+\(.*\))?\s*$")


def markdown_files() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def python_blocks() -> list[tuple[str, int, str]]:
    """(path relative to the repository, line of the opening fence, source) of every python block."""
    blocks = []
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        for m in FENCE.finditer(text):
            blocks.append((path.relative_to(ROOT).as_posix(), text.count("\n", 0, m.start()) + 1, m.group(1)))
    return blocks


BLOCKS = python_blocks()


def missing(source: str) -> list[str]:
    """What the block's ``# doctest: needs ...`` marker names and this machine lacks; a
    marker of any other form fails the test."""
    markers = MARKER.findall(source)
    if not markers:
        return []
    needs = NEEDS.match(markers[0])
    assert len(markers) == 1 and source.startswith("# doctest:") and needs, (
        f"unknown doctest marker {markers}: the only one is a first line '# doctest: needs cuda' or "
        "'# doctest: needs MODULE[, MODULE]'"
    )
    absent = []
    for name in needs.group(1).split(", "):
        if name == "cuda":
            import warp as wp

            if not wp.get_cuda_device_count():
                absent.append("a CUDA device")
        elif importlib.util.find_spec(name) is None:
            absent.append(name)
    return absent


def test_readme_and_docs_have_python_blocks() -> None:
    names = {name for name, _, _ in BLOCKS}
    assert {"README.md", "docs/adding-an-op.md", "docs/interop.md"} <= names


@pytest.mark.parametrize(("name", "line", "source"), BLOCKS, ids=[f"{n}:{ln}" for n, ln, _ in BLOCKS])
def test_doc_block_runs(name: str, line: int, source: str, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    absent = missing(source)
    if absent:
        pytest.skip(f"{name}:{line} needs {', '.join(absent)}, absent here")
    monkeypatch.chdir(tmp_path)  # a block that writes a file leaves nothing behind
    # Pad with blank lines so tracebacks point at the line in the .md file.
    code = compile("\n" * line + source, str(ROOT / name), "exec")
    exec(code, {"__name__": f"docs_{Path(name).stem.replace('-', '_')}"})


# A python block, then a paragraph that starts with "prints", then the text block it shows.
SHOWN = re.compile(
    r"^```python[ \t]*\n((?:(?!```).)*?)^```\n\nprints(?:(?!```).)*?\n\n```text\n(.*?)^```", re.MULTILINE | re.DOTALL
)


def test_getting_started_shows_what_its_blocks_print(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, capsys) -> None:
    """The output docs/getting-started.md shows after "prints" is what the block prints
    (on the CPU, the device of the Program repr it shows)."""
    from dpt_ir.driver.compile import resolve_device  # initialises Warp quietly, as dp.compile does

    if resolve_device(None) != "cpu":
        pytest.skip("the shown output is the CPU's (Program(..., device='cpu'))")
    path = ROOT / "docs" / "getting-started.md"
    pairs = SHOWN.findall(path.read_text(encoding="utf-8"))
    assert len(pairs) >= 3, "expected the blocks of sections 2, 3 and 5 with their output"
    monkeypatch.chdir(tmp_path)
    for source, shown in pairs:
        exec(compile(source, str(path), "exec"), {"__name__": "docs_getting_started"})
        # The shown block cannot end in the blank line print() adds after a text ending in one.
        assert capsys.readouterr().out.rstrip("\n") == shown.rstrip("\n")

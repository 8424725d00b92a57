"""docs/api.md is generated from the docstrings (`python -m dpt_ir.cli.apiref > docs/api.md`):
it must be current, and every public name of ``dpt_ir`` must be in it."""

from __future__ import annotations

from pathlib import Path

from dpt_ir.cli import apiref

API_MD = Path(__file__).resolve().parents[2] / "docs" / "api.md"


def test_api_reference_is_current() -> None:
    assert API_MD.read_text() == apiref.api_markdown(), (
        "docs/api.md is stale: run `python -m dpt_ir.cli.apiref > docs/api.md`"
    )


def test_every_public_name_is_documented() -> None:
    assert apiref.undocumented() == [], "add these names to a section of dpt_ir/cli/apiref.py"


def test_reference_says_what_users_ask() -> None:
    text = apiref.api_markdown()
    assert "### `dp.gradient(x, *varargs, axis=None, edge_order=1) -> Tensor | list[Tensor]`" in text
    assert "`dp.gradient` returns a **list** of tensors" in text
    assert "Indexing is NumPy's basic indexing" in text and "``x[:, 1:3]``" in text
    assert "Also: `dp.absolute`." in text  # aliases share one entry
    for name in ("dp.compile(", "program.value_and_grad(", "tp.backward(", "dp.interpret_grad(", "g.input("):
        assert f"### `{name}" in text, name

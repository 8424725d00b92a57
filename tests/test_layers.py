"""The package's layers (`benchmarks/import_graph.py`): imports run downward, with no circle
and at most `MAX_UPWARD` arrows back up, every module in a layer, and no module loose at
the package's top level but its entry points."""

from __future__ import annotations

from benchmarks import import_graph as ig

MAX_UPWARD = 3
TOP_LEVEL = {"dpt_ir", "dpt_ir.__main__", "dpt_ir.version", "dpt_ir.interop", "dpt_ir.torch", "dpt_ir.jax",
             "dpt_ir.scipy"}  # fmt: skip


def test_every_module_is_in_a_layer() -> None:
    for name in ig.modules():
        ig.layer_of(name)  # raises for a module no layer names


def test_no_import_circle() -> None:
    circles = ig.figures().circles
    assert not circles, f"import circles: {circles}"


def test_few_arrows_run_back_up() -> None:
    upward = ig.figures().upward
    assert len(upward) <= MAX_UPWARD, f"{len(upward)} arrows run back up: {upward}"


def test_top_level_holds_only_entry_points() -> None:
    loose = {m for m in ig.modules() if m.count(".") == 1 and not ig.modules()[m].name == "__init__.py"}
    assert loose <= TOP_LEVEL, f"modules loose in dpt_ir/: {sorted(loose - TOP_LEVEL)}"


def test_the_counter_sees_deferred_imports_and_skips_type_only_ones(tmp_path) -> None:  # type: ignore[no-untyped-def]
    pkg = tmp_path / "dpt_ir"
    (pkg / "low").mkdir(parents=True)
    (pkg / "__init__.py").write_text("")
    (pkg / "low" / "__init__.py").write_text("")
    (pkg / "low" / "a.py").write_text("def f():\n    from dpt_ir.low import b\n")
    (pkg / "low" / "b.py").write_text(
        "from typing import TYPE_CHECKING\nif TYPE_CHECKING:\n    from dpt_ir.low.a import f\nfrom . import c\n"
    )
    (pkg / "low" / "c.py").write_text("import dpt_ir.low.a\n")
    graph = ig.import_graph(pkg)
    assert set(graph.edges) == {("dpt_ir.low.a", "dpt_ir.low.b"), ("dpt_ir.low.b", "dpt_ir.low.c"),
                                ("dpt_ir.low.c", "dpt_ir.low.a")}  # fmt: skip

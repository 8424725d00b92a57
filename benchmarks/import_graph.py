"""The package's import graph, read from the source: circles and arrows that run back up.

``python benchmarks/import_graph.py`` prints the figures `docs/architecture.md` records: the
number of modules and import arrows, every circle (a strongly connected set of modules) and
every arrow from a lower layer to a higher one, against `LAYERS`. `tests/test_layers.py`
holds the package to them.

What counts as an arrow: any ``import`` or ``from ... import`` of a ``dpt_ir`` module
anywhere in a module, at the top or inside a function (a deferred import is still a
dependency), except under ``if TYPE_CHECKING:`` (a type-only import runs nothing). An import
of a package's ``__init__`` counts as an arrow to that package; the implicit import of
parent packages does not.
"""

from __future__ import annotations

import ast
import sys
from dataclasses import dataclass
from pathlib import Path

import networkx as nx

PACKAGE = Path(__file__).resolve().parents[1] / "dpt_ir"

# Layers, lowest first: a module may import its own layer and those below. The first
# matching prefix decides (so ``dpt_ir.api.core`` before ``dpt_ir.api``).
LAYERS: tuple[tuple[str, ...], ...] = (
    ("dpt_ir.version", "dpt_ir.ir"),
    # the dp.* functions that emit one op by name: the vocabulary the derivative formulas
    # of ops/ are written in (as derivatives.yaml is written in at:: calls), and autodiff,
    # which applies those formulas
    ("dpt_ir.api.core", "dpt_ir.api.autodiff", "dpt_ir.api.forward", "dpt_ir.api.second_order"),
    ("dpt_ir.reference",),
    ("dpt_ir.ops",),
    ("dpt_ir.api",),
    ("dpt_ir.passes",),
    # the device facts, the launch records and the Warp spelling of a C++ launch: what the C++
    # backend hands on, below it
    ("dpt_ir.backends.base", "dpt_ir.backends.launches", "dpt_ir.backends.warp.spelling"),
    ("dpt_ir.backends.cxx",),
    ("dpt_ir.backends",),
    ("dpt_ir.runtime",),
    ("dpt_ir.driver",),
    ("dpt_ir.export",),
    ("dpt_ir.interop", "dpt_ir.torch", "dpt_ir.jax", "dpt_ir.scipy", "dpt_ir.cli", "dpt_ir.__main__", "dpt_ir"),
)


def layer_of(module: str) -> int:
    best, level = -1, -1
    for k, prefixes in enumerate(LAYERS):
        for p in prefixes:
            if (module == p or module.startswith(p + ".")) and len(p) > best:
                best, level = len(p), k
    if level < 0:
        raise ValueError(f"module {module} is in no layer of LAYERS")
    return level


def modules(root: Path = PACKAGE) -> dict[str, Path]:
    out = {}
    for path in sorted(root.rglob("*.py")):
        parts = list(path.relative_to(root.parent).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        out[".".join(parts)] = path
    return out


def _type_only(tree: ast.AST) -> set[int]:
    inside: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.If) and "TYPE_CHECKING" in ast.unparse(node.test):
            inside.update(id(n) for stmt in node.body for n in ast.walk(stmt))
    return inside


def _targets(node: ast.AST, module: str, is_package: bool) -> list[str]:
    if isinstance(node, ast.Import):
        return [a.name for a in node.names]
    if isinstance(node, ast.ImportFrom):
        base = node.module or ""
        if node.level:
            here = module.split(".") if is_package else module.split(".")[:-1]
            here = here[: len(here) - (node.level - 1)]
            base = ".".join(here + ([base] if base else []))
        return [f"{base}.{a.name}" for a in node.names]  # a name that is no module resolves to ``base``
    return []


def import_graph(root: Path = PACKAGE) -> nx.DiGraph:
    """Module -> the dpt_ir modules it imports: every name of ``from X import a, b`` resolved
    to the module ``X.a`` when that is a module, else to ``X`` (so ``from X import f`` of a
    function is an arrow to ``X``)."""
    mods = modules(root)
    graph = nx.DiGraph()
    for name, path in mods.items():
        graph.add_node(name)
        tree = ast.parse(path.read_text())
        skip = _type_only(tree)
        for node in ast.walk(tree):
            if id(node) in skip:
                continue
            for target in _targets(node, name, path.name == "__init__.py"):
                if target.split(".")[0] != "dpt_ir":
                    continue
                while target and target not in mods:
                    target = target.rpartition(".")[0]
                if target and target != name:
                    graph.add_edge(name, target)
    return graph


@dataclass(frozen=True)
class Figures:
    modules: int
    arrows: int
    circles: list[list[str]]
    upward: list[tuple[str, str]]


def figures(root: Path = PACKAGE) -> Figures:
    graph = import_graph(root)
    circles = sorted(sorted(c) for c in nx.strongly_connected_components(graph) if len(c) > 1)
    upward = sorted((a, b) for a, b in graph.edges if layer_of(b) > layer_of(a))
    return Figures(graph.number_of_nodes(), graph.number_of_edges(), circles, upward)


def main() -> int:
    f = figures()
    print(f"{f.modules} modules, {f.arrows} import arrows")
    print(f"{len(f.circles)} circles")
    for c in f.circles:
        print("  circle:", " <-> ".join(c))
    print(f"{len(f.upward)} arrows that run back up")
    for a, b in f.upward:
        print(f"  {a} (layer {layer_of(a)}) -> {b} (layer {layer_of(b)})")
    return 0


if __name__ == "__main__":
    sys.exit(main())

"""The IR: types, graphs and their text, the op registry and type rules, indexing helpers,
the builder, the input contracts and the kernel plan. Imports nothing else of the package."""

from dpt_ir.ir import text as _text  # noqa: F401  (binds Graph.to_text and Graph.from_text)

"""The IR: types, graphs and their text, the op registry and type rules, indexing helpers,
the builder, the input contracts and the kernel plan. Imports nothing else of the package."""

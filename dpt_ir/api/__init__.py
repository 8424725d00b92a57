"""The user API: the ``dp.*`` functions (`core`), autodiff of graphs, imaging, gather and
scatter, resampling, loops and linear algebra. `dpt_ir/__init__.py` re-exports the public names."""

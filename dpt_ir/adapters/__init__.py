"""The transform rules behind the PyTorch and JAX adapters (`dpt_ir.torch`, `dpt_ir.jax`):
`torch_func` (``torch.func``'s ``autograd.Function``s) and `jax_rules` (JAX primitives). Each
imports its framework, so this package imports neither; import them through the adapters."""

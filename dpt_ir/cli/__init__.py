"""The ``dpt-ir`` command line (`main`)."""

from dpt_ir.cli.commands import main

__all__ = ["main"]

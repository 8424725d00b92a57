"""Compiler passes, one per file; `manager` runs them as a pipeline."""

"""What fusion and the backends ask of a node: its op's kind and per-element traits, never its name.

Assumes: nodes of a validated graph (their `OpDef` resolved). Guarantees: pure functions
of one node; the traits an op leaves unset count as 1 (one read, one copy per element).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from dpt_ir.ir.graph import Node

POINTWISE = ("elementwise", "shape", "stencil")


def is_pointwise(node: Node) -> bool:
    """Computed one element at a time from its inputs' elements: fusable into a kernel."""
    return node.opdef.kind in POINTWISE


def is_free(node: Node) -> bool:
    """Source nodes (constants, iota) cost nothing to recompute anywhere."""
    return is_pointwise(node) and not node.inputs


def is_view(node: Node) -> bool:
    """Constants and single-read views of a value: recomputing them costs index arithmetic only."""
    return is_free(node) or (node.opdef.kind == "shape" and reads(node) == 1)


def per_element(node: Node, count: Callable[[Any, tuple[int, ...]], int] | None) -> int:
    """An op's per-element count trait (from its attributes and output shape), 1 if unset."""
    return 1 if count is None else count(node.opdef.parse_attrs(node.attrs, node.name), node.type.shape)


def reads(node: Node) -> int:
    """Input reads per output element: a stencil's taps, 1 for everything else."""
    return per_element(node, node.opdef.reads_per_element)


def copies(node: Node) -> int:
    """Copies of an inlined producer's code per element: a fold's images, 1 for everything else."""
    return per_element(node, node.opdef.code_copies)


def multi_read(node: Node) -> bool:
    """Does ``node`` read its input several times per element (a stencil's taps, a fold's images)?"""
    return reads(node) > 1 or copies(node) > 1

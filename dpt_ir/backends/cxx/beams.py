"""What the matrix-free projection lowerings share (`projection`: radon, `fanbeam`): the node's
program, the index range check, a transpose's store of its rows, and the one launch of a
program's C++ unit.

Assumes: a fusion group of kind ``projection``, one root reading one materialised input, whose
program carries a float64 table (the one launch constant). Guarantees: the error and the launch
both lowerings made before they were shared (the same text, names and arguments).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np

from dpt_ir.backends.cxx.common import INDEX_LIMIT, TOKEN
from dpt_ir.backends.cxx.units import Unit, single_launch, status_flag
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.fanbeam import FanBeam
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup
from dpt_ir.ir.projection import ParallelBeam
from dpt_ir.ir.records import origin_of

Entry = Callable[[str, bool, str], str]  # (signature, CPU build, function name) -> a driver's C++


def program_of(graph: Graph, root: str) -> ParallelBeam | FanBeam:
    """The projection program of node ``root`` (its op's program for its attributes and input
    shape); the lowering follows its kind (`kernels.group_kernels`)."""
    node = graph.node_map[root]
    op = node.opdef
    if op.projection is None:
        raise ContractError(f"node {root!r}: expected an op with a projection program, found op {op.name!r}")
    return op.projection(op.parse_attrs(node.attrs, root), tuple(graph.types[node.inputs[0]].shape))


def culprit(graph: Graph, root: str) -> str:
    """How an error names the projection at ``root``: the user's call, else its op."""
    return origin_of(graph, root) or f"op {graph.node_map[root].opdef.name!r}"


def check_index(graph: Graph, root: str) -> None:
    """ContractError when the image or sinogram at ``root`` has more elements than 32-bit
    indexing reaches."""
    sizes = [graph.types[v].size for v in (*graph.node_map[root].inputs, root)]
    if max(sizes) > INDEX_LIMIT:
        raise ContractError(
            f"{culprit(graph, root)} (node {root!r}): the C++ backend indexes a projection's image and sinogram "
            f"with 32-bit integers, at most {INDEX_LIMIT} elements each; found sizes {sizes}"
        )


def store_rows(c_type: str, image_size: int, w: int, src: str, checks: bool) -> list[str]:
    """A transpose task's end: image rows ``R0 .. R1 - 1`` of slice ``s`` stored from its work
    block (``src``: the C++ of element ``k``'s double), each rounded once, and the status
    flag of a non-finite one."""
    return [
        "int bad = 0;",
        f"for (int k = 0; k < (R1 - R0) * {w}; ++k) {{",
        f"    {c_type}& out = y[s * {image_size} + R0 * {w} + k];",
        f"    out = ({c_type}){src};",
        *(["    bad |= dp_nonfinite(out);"] if checks else []),
        "}",
        *status_flag(checks),
    ]


def program_launch(
    graph: Graph,
    group: KernelGroup,
    name: str,
    slots: list[Any],
    checks: bool,
    key: str,
    table: np.ndarray,
    tasks: int,
    entry: Entry,
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The one launch of projection group ``group`` over ``tasks`` tasks: parameters (input,
    the table as launch constant ``key``, output ``a0 a1 a2``), the CPU and CUDA drivers from
    ``entry(sig, cpu, fn)``, and their native definition, as `kernels.group_kernels` gives them."""
    (root,) = group.roots
    constants = {key: ("float64", table.reshape(-1))}
    unit = Unit(graph, [graph.node_map[root].inputs[0], key, root], {root}, {}, constants)

    def drivers(sig: str) -> str:
        return entry(sig, True, f"{TOKEN}_cpu") + "\n" + entry(sig, False, f"{TOKEN}_cuda") + "\n"

    return single_launch(unit, root, name, slots, checks, tasks, group.id, drivers)

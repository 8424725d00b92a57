"""The fused epilogue of a contraction group (`dpt_ir.passes.fusion_products`): the pointwise
members, lowered as the element function a pointwise kernel of their own would run, called by
the product's drivers on each output region as soon as it is stored.

Assumes: a contraction group whose ``epilogue`` roots are computed by pointwise members
(elementwise ops and single-read views, no per-axis views) over the product's output shape,
reading the product only at their own element; the unit's first three parameters are the
product's operands and result (``a0``, ``a1``, ``a2``, as `contraction` names them).
Guarantees: `lower` gives the element function and ``{TOKEN}_epi(<unit parameters>, b, e, fl)``,
which runs the members on the flat output elements ``[b, e)`` with the CPU (or CUDA) driver's
loop of a pointwise kernel: the same element code, so the same bits as the kernel fusion would
otherwise have launched after the product. Its status flags are slots of their own after the
product's, ORed into ``fl`` (the caller stores them at ``st[sb + base + k]``). A nest this module
cannot run as one loop over rows (guards, row images, summed rows, columns, 64-bit indices) is a
ContractError naming the group: fusion does not make one.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from dpt_ir.backends.base import Target
from dpt_ir.backends.cxx import drivers
from dpt_ir.backends.cxx.common import TOKEN
from dpt_ir.backends.cxx.emit import ElementWriter, element_functions
from dpt_ir.backends.cxx.nest import cover
from dpt_ir.backends.cxx.units import Unit
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import KernelGroup


@dataclass(frozen=True)
class Epilogue:
    """An epilogue's lowering: its C++ (named with `TOKEN`: the element function and
    ``{TOKEN}_epi``), the launch unit of the whole kernel (the product's parameters, then the
    epilogue's), its status flags (``nf``: the length of the caller's ``fl``), and
    ``call(b, e)``: the statement running it on ``[b, e)``."""

    text: str
    unit: Unit
    nflags: int

    @property
    def nf(self) -> int:
        return max(self.nflags, 1)

    def call(self, b: str, e: str) -> str:
        return f"{TOKEN}_epi({self.unit.args()}, {b}, {e}, fl);"

    def declare(self) -> str:
        """The declaration of ``fl``, before the first call."""
        return f"bool fl[{self.nf}] = {{false}};"

    def stores(self, base: int, checks: bool) -> list[str]:
        """Statements storing the raised flags at ``st[sb + base + k]``; none without checks."""
        if not checks:
            return ["(void)fl;"]
        return [f"for (int k = 0; k < {self.nf}; ++k) if (fl[k]) st[sb + {base} + k] = 1;"]


def members(graph: Graph, group: KernelGroup, product: str) -> KernelGroup:
    """The epilogue of ``group`` as a pointwise group over the product's output shape: its
    members, reading the product (and the rest) from memory, writing the group's other outputs."""
    nodes = tuple(n for n in group.nodes if n != product)
    inside = set(nodes)
    reads = tuple(dict.fromkeys(i for n in nodes for i in graph.node_map[n].inputs if i not in inside))
    return KernelGroup(
        id=group.id, phase=group.phase, kind="pointwise", space=graph.types[product].shape, nodes=nodes,
        roots=tuple(group.epilogue), inputs=reads, outputs=tuple(v for v in group.outputs if v != product),
        bytes_read=0, bytes_written=0,
    )  # fmt: skip


def lower(
    graph: Graph, group: KernelGroup, product: str, slots: list[Any], kernel: str, checks: bool, target: Target
) -> Epilogue:
    """The `Epilogue` of ``group`` (module docstring); ``slots`` (the status slots, the product's
    already among them) grows by the epilogue's."""
    sub = members(graph, group, product)
    nest = cover(graph, sub)
    plain = nest is not None and not (
        nest.guards or nest.images or nest.row_images or nest.columns or nest.roots or nest.classed
    )
    if not plain or nest.index != "int":
        needs = "its loop nest needs guards, row images, summed rows, columns or 64-bit indices"
        why = "not covered" if nest is None else needs
        raise ContractError(
            f"kernel group {group.id!r}: expected an epilogue the C++ product drivers run as rows of its "
            f"output, found one they cannot ({why})"
        )
    params = [*graph.node_map[product].inputs, product]  # a0, a1, a2: the product's drivers name them so
    w = ElementWriter(graph, nest, params, slots, kernel, checks)
    w.rows = nest.row_position
    body = w.body()  # without guards, the element function is valid at every element
    unit = Unit(graph, params, {product, *nest.stores}, {}, w.constants)
    spec = drivers.DriverSpec(
        nest=nest, layout=drivers.layout(nest, target), target=target, args=unit.args(), sig=unit.sig(),
        uses_big=w.uses_big, nflags=len(slots) - w.slot_base, checks=checks, direct=dict(w.direct),
    )  # fmt: skip
    text = [*w.table_definitions(), *element_functions(nest, unit.sig(), "", {"elem": body})]
    text.append(drivers.range_function(spec, "epi").replace("F_", f"{TOKEN}_"))
    return Epilogue("\n".join(text), unit, spec.nflags)

"""The ends of a stencil's rows: the few elements of each row outside the interior of the
constant pads along it, evaluated by an inlined copy of the element function (``F_ends``)
instead of the out-of-line edge function.

Assumes: a covered nest (`nest.cover`) whose drivers walk rows of its last axis
(`Nest.row_position`), and, for each memory read, its coordinate along its value's last axis
(`sites.walk`'s ``columns``). Guarantees: `clamps` is not None only when every guard bounds
the row's interior (a weight of +-1 on the last axis, so no whole row is outside it: the rows
are row images or in range), every per-axis view of the group reads its fill outside its
interior (a constant pad: the element there is the fill, whatever it reads), and every read
either stays put along the row or moves with it at column ``j + s``. It then gives, per read
that moves, the range ``[-s, n - 1 - s]`` its inner counter is clamped into, so that the read
stays in its own row of ``n`` elements: at an element of the interior the clamp changes
nothing; outside, what it reads is discarded by the view's select (`emit.ElementWriter`). The
ends' values are those of the edge function (the fill, or the same sum of the same reads). A
clamped read is a real element of the array, so no check raises on a value the edge function
would not compute.

Where the clamps do not apply (a mapped mode's pad, an adjoint's summed images) but the guards
bound the row (`bounded`), ``F_ends`` evaluates each view's guarded axes through their image
tables, as the edge function does, and the rest as the element function does: row images per
row, axes read in their interior at their shift (`Nest.mapped_ends`). The same images are
summed in the same order as in the edge function, so the values are its values; only the
row's axes skip its tables (and their divisions), and the function is inlined.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from dpt_ir.backends.cxx import sites
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.indexing import Affine

if TYPE_CHECKING:
    from dpt_ir.backends.cxx.nest import Nest

Clamps = dict[sites.Site, tuple[int, int]]


def clamps(graph: Graph, nest: Nest, columns: dict[sites.Site, Affine | None]) -> Clamps | None:
    """Per read that moves along the row, the range its inner counter is clamped into at the
    ends; None where the ends keep the edge function (see the module docstring)."""
    if not bounded(nest):
        return None
    last = len(nest.space) - 1
    if not all(_fills_outside(graph, name) for name in nest.group.nodes):
        return None
    out: Clamps = {}
    for site, read in nest.reads.items():
        if read.mode == "gather" or (read.mode == "row" and read.step not in (0, 1)):
            return None
        if read.mode != "row" or read.step == 0:
            continue
        column = columns.get(site)
        if column is None or column.padded(last + 1).w != (0,) * last + (1,):
            return None
        n = graph.types[site[0]].shape[-1]
        out[site] = (-column.b, n - 1 - column.b)
    return out


def bounded(nest: Nest) -> bool:
    """Whether the nest's drivers walk rows and every guard bounds the row's interior (a
    weight of +-1 on the last axis, no other coordinate): no guard decides a whole row, so
    only the few positions of each row outside ``[glo, ghi)`` are ends."""
    last = len(nest.space) - 1
    if not nest.guards or not nest.row_position or nest.digits:
        return False
    return all(len(form.w) <= last + 1 and form.padded(last + 1).w[last] in (1, -1) for form, _, _ in nest.guards)


def _fills_outside(graph: Graph, name: str) -> bool:
    """Whether a member is not a per-axis view, or one that reads nothing (its fill) at every
    index outside the interior of each of its axes."""
    node = graph.node_map[name]
    if node.opdef.axis_images is None:
        return True
    m = sites.image_map(node, tuple(graph.types[node.inputs[0]].shape))
    return all(not im for ax in m.axes for k, im in enumerate(ax.images) if not ax.lo <= k <= ax.hi)

"""Gathers and constant index tables on the C++ path: reads whose offset is computed per
element from loaded index values (`OpDef.gather_affine`: take, take_along_axis, integer-array
indexing) and constant int32 tables (`OpDef.table`: index_array).

Assumes: the coordinate machinery of `dpt_ir.backends.cxx.sites` (forms over the loop
space's coordinates followed by fresh coordinates, each a C++ ``int`` variable ``q<k>`` of
the element function, in ``[0, extent)``). Guarantees:

- a gather at coordinates ``c`` reads its indices at ``GatherCoords.indices_at`` and its
  source at ``source_at`` with the gathered axis replaced by a fresh coordinate: the loaded
  position normalised by the mode (``wrap``: p mod n; ``clip``: p limited to [0, n - 1];
  ``raise``: negatives count from the end, a position outside [-n, n) ORs the node's domain
  flag, with `raise_detail`'s message) and then clamped into
  ``[0, n)``, so no read is ever out of bounds and the program stays usable after the
  NumericalError. Views under the gather still compose: a layout-preserving view (reshape)
  that cannot map a form involving fresh coordinates affinely reads at its digits, fresh
  coordinates too (`digits`); every read through a fresh coordinate is a ``gather`` read
  (`nest.Read`), its offset rendered per element (scalar loads; the reads at the loop's
  own coordinates, such as the indices, keep their contiguous forms and vectorise);
- a table member is read like a value in memory (full, scalar or row reads: contiguous
  loads vectorise) from a ``DP_CONST int`` array of its values, defined once per kernel and
  named under the kernel's hashed name (so the text stays name-free); a table of more than
  `TABLE_MAX` elements is a launch constant instead (``$table:<node>``, an int32 array bound
  at launch, as sparse rows are), since its text would weigh on every build of the module.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from dpt_ir.backends.cxx.common import TOKEN
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ir.indexing import Affine, Coords
from dpt_ir.ir.registry import GatherCoords, OpDef

TABLE_MAX = 1 << 16  # elements of a constant table written into the C++ source
# A fresh coordinate: (form, extent, C++ of the coordinate from the C++ of the form) -> its form.
Fresh = Callable[[Affine, int, Callable[[str], str]], Affine]


def covered(node: Node) -> bool:
    """``node`` is a gather or a constant table."""
    op = node.opdef
    return op.gather_affine is not None or op.table is not None


def is_table(graph: Graph, name: str) -> bool:
    node = graph.node_map.get(name)
    return node is not None and node.opdef.table is not None


def coords_of(graph: Graph, node: Node, coords: Coords, ext: Sequence[int]) -> GatherCoords:
    op = node.opdef
    shapes = tuple(tuple(graph.types[i].shape) for i in node.inputs)
    attrs = op.parse_attrs(node.attrs, node.name)
    return op.gather_affine(attrs, shapes, tuple(node.type.shape), coords, tuple(ext))  # type: ignore[misc]


def with_position(g: GatherCoords, q: Affine) -> Coords:
    """The source's coordinates with the gathered axis at position coordinate ``q``."""
    return tuple(q if k == g.axis else c for k, c in enumerate(g.source_at))


def children(graph: Graph, node: Node, coords: Coords, ext: Sequence[int], fresh: Fresh) -> list[tuple[str, Coords]]:
    """What a gather at ``coords`` reads, for a walk that needs the sites only: the indices,
    then the source at a fresh position coordinate (its C++ is the emitter's: `element`)."""
    g = coords_of(graph, node, coords, ext)
    q = fresh(idx.zero(len(ext)), g.size, lambda _: "0")
    return [(node.inputs[g.indices], g.indices_at), (node.inputs[g.source], with_position(g, q))]


def position(p: str, n: int, mode: str) -> str:
    """C++ of the in-range offset along an axis of length ``n`` that position ``p`` (an int
    variable) names under ``mode`` (`GatherCoords`), clamped into [0, n) in every mode."""
    if mode == "wrap":
        return f"(({p} % {n}) + {n}) % {n}"
    if mode == "raise":
        return f"dp_clampi({p} < 0 ? {p} + {n} : {p}, 0, {n - 1})"
    return f"dp_clampi({p}, 0, {n - 1})"


def raise_detail(n: int) -> str:
    """The domain flag's explanation of a position out of range under ``raise``."""
    return f"a position outside [{-n}, {n}) along an axis of size {n} (mode 'raise')"


def element(w: Any, node: Node, coords: Coords) -> str:
    """The C++ variable of gather ``node`` at ``coords`` in `emit.ElementWriter` ``w``: the
    position loaded, checked under ``raise``, normalised into a fresh coordinate, and the
    source evaluated there."""
    g = coords_of(w.graph, node, coords, w.ext())
    p = w.value(node.inputs[g.indices], g.indices_at)
    if g.mode == "raise" and w.checks:
        bad = f"{p} < {-g.size} || {p} >= {g.size}"
        w.lines.append(w.flag(node.name, node.opdef.name, "domain", bad, raise_detail(g.size)))
    q = w.variable(position(p, g.size, g.mode), g.size)
    return w.value(node.inputs[g.source], with_position(g, q))


def digits(op: OpDef, in_shape: Sequence[int], out_shape: Sequence[int], coords: Coords, ext: Sequence[int],
           fresh_from: int | None, fresh: Fresh | None, anywhere: bool = False) -> Coords | None:  # fmt: skip
    """A layout-preserving view's input coordinates where its affine map failed and the flat
    offset involves fresh coordinates (a gather's position: its reads are per element
    anyway), or ``anywhere`` (a nest with no affine alternative: `nest.Nest.digits`): one
    fresh coordinate per input axis, ``(offset / stride) % extent``. None otherwise (a
    reshape of the loop's own coordinates needs div/mod of the inner counter, which keeps
    the loop scalar)."""
    if not op.preserves_layout or fresh is None or fresh_from is None:
        return None
    offset = idx.flat(coords, out_shape, len(ext))
    if not anywhere and not any(offset.padded(len(ext)).w[fresh_from:]):
        return None
    out = []
    for s, n in zip(idx.strides(in_shape), in_shape, strict=True):
        if n == 1:
            out.append(idx.zero(len(ext)))
            continue
        out.append(fresh(offset, n, lambda f, s=s, n=n: f"(({f}) / {s}) % {n}" if s > 1 else f"({f}) % {n}"))
    return tuple(out)


def table_ref(w: Any, name: str) -> str:
    """The C++ array holding table node ``name``'s values: defined once per kernel, or, past
    `TABLE_MAX` elements, the launch constant ``$table:<name>``."""
    node = w.graph.node_map[name]
    values = node.opdef.table(node.opdef.parse_attrs(node.attrs, name)).reshape(-1)
    if values.size > TABLE_MAX:
        key = f"$table:{name}"
        w.constants[key] = ("int32", values)
        return w.param(key)
    text = ", ".join(map(str, values.tolist() or [0]))
    if text not in w.tables:
        w.tables[text] = f"{TOKEN}_t{len(w.tables)}"
    return w.tables[text]

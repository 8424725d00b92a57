"""Row images: a per-axis view's bounded axis that is constant along each row of the loop nest
is read at a per-row input index from a table, instead of splitting the rows at its interior.

Assumes: a loop nest whose rows run along the space's last axis (the inner counter ``j``) and
whose drivers compute each row's outer coordinates ``c<a>`` (`drivers.row_bases`); per-axis
views (pad, pad_adjoint: ``OpDef.axis_images``) whose output axis has, at every index, at most
one input index (a constant pad's outside reads none: its fill; reflect, wrap, edge read one).
Guarantees: `RowImages.coordinate` gives such an axis read at a form with no weight on the last
axis a new coordinate of the walk (one per (view, axis, form)), with the table of its input
index per output index (``-1``: none, the fill). The drivers set, per row, the image's index
(0 where it has none, so every read stays in bounds) and whether it has one
(`statements`); the element function reads at the index and selects the fill where there is
none (`emit.ElementWriter`). A row that falls outside such a view's interior (a pad's first and
last rows) is then as vectorised as any other: before, the whole row ran the scalar edge
function. The values are those of the edge function (the same image, the same fill).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpt_ir.ir import indexing as idx
from dpt_ir.ir.indexing import Affine, AxisImages

TABLE_MAX = 1 << 12  # entries of a row image's table (C++ source); a longer axis keeps its guard


@dataclass(frozen=True)
class RowImage:
    """A view's bounded axis ``axis`` read at ``form`` (over the loop space's outer
    coordinates): output index ``k`` reads input index ``table[k]`` (``-1``: the fill);
    ``coord`` is the coordinate it is in the walk's forms (the space's rank plus its number)."""

    node: str
    axis: int
    form: Affine
    table: tuple[int, ...]
    extent: int
    coord: int


@dataclass
class RowImages:
    """The row images of one loop nest over ``space``, keyed by (view, axis, form)."""

    space: tuple[int, ...]
    found: dict[tuple[str, int, Affine], RowImage] = field(default_factory=dict)
    others: int = 0  # new coordinates of other kinds (joins, gathers) the walk made: then none is used

    def key(self, node: str, axis: int, form: Affine, ax: AxisImages) -> tuple[str, int, Affine] | None:
        """The key of ``form`` as a row image of ``axis``, or None where it cannot be one: the
        form moves along the row (a weight on the last axis) or reads a new coordinate (a
        gather's), an index has several images (an adjoint's sum), or the table is too long."""
        rank = len(self.space)
        if any(form.w[rank:]) or any(len(im) > 1 for im in ax.images) or len(ax.images) > TABLE_MAX:
            return None
        c = idx.canonical(Affine(form.b, form.w[:rank]), self.space)
        if len(c.w) >= rank:  # a weight on the last axis: the row moves along it
            return None
        return (node, axis, c)

    def coordinate(self, node: str, axis: int, form: Affine, ax: AxisImages, extent: int, new: int) -> Affine | None:
        """The coordinate of the row image (``new``: the walk's next free coordinate, used
        when it is new), or None where ``form`` cannot be one (`key`)."""
        key = self.key(node, axis, form, ax)
        if key is None:
            return None
        if key not in self.found:
            table = tuple(im[0] if im else -1 for im in ax.images)
            self.found[key] = RowImage(node, axis, key[2], table, extent, new)
        c = self.found[key].coord
        return idx.axis(c, c + 1)

    def lookup(self, node: str, axis: int, form: Affine, ax: AxisImages) -> RowImage | None:
        """The row image found for (view, axis, form) by the nest's walk, if any."""
        key = self.key(node, axis, form, ax)
        return None if key is None else self.found.get(key)

    @property
    def images(self) -> list[RowImage]:
        """The row images in the order of their coordinates."""
        return sorted(self.found.values(), key=lambda r: r.coord)


def statements(images: list[RowImage], reads: int, index: str) -> list[str]:
    """Per row (outer coordinates ``c<a>`` set): image m's input index ``q<m>`` (0 where it has
    none) into ``rb[reads + 2m + 1]`` and whether it has one into ``rb[reads + 2m]``."""
    out = []
    for m, r in enumerate(images):
        at = " + ".join([str(r.form.b), *(f"c{a} * {x}" for a, x in enumerate(r.form.w) if x)])
        has, index_at = reads + 2 * m, reads + 2 * m + 1
        out.append(f"{{ const int t = F_ri{m}[{at}]; rb[{has}] = t >= 0; rb[{index_at}] = t >= 0 ? t : 0; }}")
        out.append(f"const {index} q{m} = rb[{index_at}]; (void)q{m};")
    return out


def tables(images: list[RowImage], token: str) -> list[str]:
    """The C++ tables of the row images (named under the kernel's hashed name ``token``)."""
    return [f"DP_CONST int {token}_ri{m}[] = {{{', '.join(map(str, r.table))}}};" for m, r in enumerate(images)]

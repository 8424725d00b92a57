"""Row images: a per-axis view's bounded axis that is constant along each row of the loop nest
is read at per-row input indices from tables, instead of splitting the rows at its interior.

Assumes: a loop nest whose rows run along the space's last axis (the inner counter ``j``) and
whose drivers compute each row's outer coordinates ``c<a>`` (`drivers.row_bases`); per-axis
views (pad, pad_adjoint: ``OpDef.axis_images``) whose output axis has, at every index, at most
`WIDTH_MOST` input indices (a constant pad's outside reads none: its fill; reflect, wrap, edge
read one; an adjoint's edge sums several).
Guarantees: `RowImages.coordinates` gives such an axis read at a form with no weight on the
last axis one new coordinate of the walk per slot (the k-th image of an index; one set per
(view, axis, form)), with the table of each slot's input index per output index (``-1``: the
index has fewer images, or none: the fill). The drivers set, per row and slot, the image's
index (0 where it has none, so every read stays in bounds) and whether it has one
(`statements`); the element function reads at each slot's index, sums the slots the row has in
slot order (as the edge function sums an index's images) and selects the fill where it has
none (`emit.ElementWriter`). A row that falls outside such a view's interior (a pad's first and
last rows, an adjoint's summed ones) is then as vectorised as any other: before, the whole row
ran the scalar edge function. The values are those of the edge function (the same images,
summed in the same order, the same fill).
"""

from __future__ import annotations

from dataclasses import dataclass, field

from dpt_ir.ir import indexing as idx
from dpt_ir.ir.indexing import Affine, AxisImages

TABLE_MAX = 1 << 12  # entries of a row image's table (C++ source); a longer axis keeps its guard
WIDTH_MOST = 4  # images of one index (slots); an axis with more keeps its guard


@dataclass(frozen=True)
class RowImage:
    """Slot ``slot`` of a view's bounded axis ``axis`` read at ``form`` (over the loop space's
    outer coordinates): output index ``k`` reads input index ``table[k]`` as its image number
    ``slot`` (``-1``: it has no such image); ``coord`` is the coordinate it is in the walk's
    forms (the space's rank plus its number)."""

    node: str
    axis: int
    form: Affine
    table: tuple[int, ...]
    extent: int
    coord: int
    slot: int = 0

    def has_all(self, ax: AxisImages) -> bool:
        """Whether every output index of the axis has this slot's image (no flag needed)."""
        return all(len(im) > self.slot for im in ax.images)


@dataclass
class RowImages:
    """The row images of one loop nest over ``space``, keyed by (view, axis, form): the slots
    of each, in slot order."""

    space: tuple[int, ...]
    found: dict[tuple[str, int, Affine], tuple[RowImage, ...]] = field(default_factory=dict)
    # the first coordinate of another kind (joins, gathers, a scatter's positions) the walk made
    # (the space's rank plus its number); None: it made none
    first_other: int | None = None
    # Coordinates kept for the row images before any other (`sites.walk`): a walk that numbered
    # another coordinate first is run again with as many kept as it found images.
    reserve: int = 0

    def numbered_first(self) -> bool:
        """Whether the row images hold the first coordinates past the space, one each, and
        every coordinate of another kind comes after them: the element function numbers its
        row images first (``q0``, ``q1``... from the row's bases, `emit.ElementWriter.body`)
        and the others after, so the walk's forms must number them the same way."""
        coords = sorted(r.coord for r in self.images)
        rank = len(self.space)
        dense = coords == list(range(rank, rank + len(coords)))
        return dense and (self.first_other is None or self.first_other >= rank + len(coords))

    def key(self, node: str, axis: int, form: Affine, ax: AxisImages) -> tuple[str, int, Affine] | None:
        """The key of ``form`` as a row image of ``axis``, or None where it cannot be one: the
        form moves along the row (a weight on the last axis) or reads a new coordinate of
        another kind (a gather's; a row image's own index is constant along the row: a view
        read through another view's row image, as a pad below a pad's adjoint, is one too),
        an index has more than `WIDTH_MOST` images, or the table is too long."""
        rank, extents = len(self.space), {r.coord: r.extent for r in self.images}
        past = form.w[rank:]
        if any(x and rank + k not in extents for k, x in enumerate(past)):
            return None
        if any(len(im) > WIDTH_MOST for im in ax.images) or len(ax.images) > TABLE_MAX:
            return None
        ext = (*self.space, *(extents.get(rank + k, 1) for k in range(len(past))))
        c = idx.canonical(form, ext)
        if len(c.w) >= rank and c.w[rank - 1]:  # a weight on the last axis: the row moves along it
            return None
        lo, hi = c.bounds(ext)
        return (node, axis, c) if 0 <= lo <= hi < len(ax.images) else None

    def coordinates(
        self, node: str, axis: int, form: Affine, ax: AxisImages, extent: int, new: int
    ) -> tuple[Affine, ...] | None:
        """The coordinates of the row image's slots (``new``: the walk's next free coordinate,
        the first of them when they are new), or None where ``form`` cannot be one (`key`)."""
        key = self.key(node, axis, form, ax)
        if key is None:
            return None
        if key not in self.found:
            width = max(1, max((len(im) for im in ax.images), default=1))
            slots = [tuple(im[k] if len(im) > k else -1 for im in ax.images) for k in range(width)]
            self.found[key] = tuple(RowImage(node, axis, key[2], t, extent, new + k, k) for k, t in enumerate(slots))
        return tuple(idx.axis(r.coord, r.coord + 1) for r in self.found[key])

    def lookup(self, node: str, axis: int, form: Affine, ax: AxisImages) -> tuple[RowImage, ...] | None:
        """The slots of the row image found for (view, axis, form) by the nest's walk, if any."""
        key = self.key(node, axis, form, ax)
        return None if key is None else self.found.get(key)

    @property
    def images(self) -> list[RowImage]:
        """Every slot of the row images, in the order of their coordinates."""
        return sorted((r for slots in self.found.values() for r in slots), key=lambda r: r.coord)

    @property
    def count(self) -> int:
        """The coordinates the row images add to the walk's (one per slot)."""
        return sum(len(slots) for slots in self.found.values())


def statements(images: list[RowImage], rank: int, reads: int, index: str, rb: str = "rb") -> list[str]:
    """Per row (outer coordinates ``c<a>`` of the loop space's ``rank`` set): slot m's input
    index ``q<m>`` (0 where it has none) into ``rb[reads + 2m + 1]`` and whether it has one
    into ``rb[reads + 2m]`` (``rb``: the array's name); a slot read through earlier slots'
    indices uses their ``q``."""
    out, number = [], {r.coord: m for m, r in enumerate(images)}
    for m, r in enumerate(images):
        outer = [f"c{a} * {x}" for a, x in enumerate(r.form.w[:rank]) if x]
        nested = [f"q{number[rank + k]} * {x}" for k, x in enumerate(r.form.w[rank:]) if x]  # defined above
        at = " + ".join([str(r.form.b), *outer, *nested])
        has, index_at = reads + 2 * m, reads + 2 * m + 1
        out.append(f"{{ const int t = F_ri{m}[{at}]; {rb}[{has}] = t >= 0; {rb}[{index_at}] = t >= 0 ? t : 0; }}")
        out.append(f"const {index} q{m} = {rb}[{index_at}]; (void)q{m};")
    return out


def tables(images: list[RowImage], token: str) -> list[str]:
    """The C++ tables of the row images' slots (named under the kernel's hashed name ``token``)."""
    return [f"DP_CONST int {token}_ri{m}[] = {{{', '.join(map(str, r.table))}}};" for m, r in enumerate(images)]

"""`embed_slice`'s per-axis images (`ops.shape._embed_images`, read by the C++ lowering through
`backends.cxx.sites.image_map`) against their definition, index by index: output index ``k``
holds input element ``(k - start) / step`` where that is an integer in ``[0, n)``, nothing
elsewhere; ``[lo, hi]`` is the run where the one image is ``k - start`` (the interior). The
step-1 case is built as runs, not index by index, so it is checked over starts before, inside
and past the output, empty inputs and outputs."""

from __future__ import annotations

import itertools

from dpt_ir.ir import indexing as idx
from dpt_ir.ops.shape import EmbedAttrs, _embed_images


def _by_definition(n: int, d: int, start: int, step: int) -> idx.AxisImages:
    """From the slice the embed inverts: input element ``m`` sits at output ``start + m step``."""
    at = {start + m * step: m for m in range(n) if 0 <= start + m * step < d}
    images = tuple((at[k],) if k in at else () for k in range(d))
    interior = [k for k in range(d) if images[k] == (k - start,)]
    return idx.AxisImages(images, -start, interior[0] if interior else 0, interior[-1] if interior else -1)


def test_images_follow_the_definition() -> None:
    for n, d, start, step in itertools.product(range(7), range(10), range(-12, 12), (1, 2, 3)):
        attrs = EmbedAttrs.model_construct(starts=(start,), steps=(step,), shape=(d,))
        (got,) = _embed_images(attrs, (n,), (d,)).axes
        assert got == _by_definition(n, d, start, step), (n, d, start, step)


def test_tables_of_an_axis() -> None:
    ax = idx.AxisImages(((), (0,), (1,), ()), -1, 1, 2)
    assert (ax.tables.width, ax.tables.images, ax.tables.counts, ax.tables.least) == (1, [0, 0, 1, 0], [0, 1, 1, 0], 0)
    two = idx.AxisImages(((0, 1), (2,)), 0, 1, 1)
    assert (two.tables.width, two.tables.images, two.tables.counts, two.tables.least) == (2, [0, 1, 2, 0], [2, 1], 1)

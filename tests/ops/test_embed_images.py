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
    images = []
    for k in range(d):
        m, r = divmod(k - start, step)
        images.append((m,) if r == 0 and 0 <= m < n else ())
    run = [im == (k - start,) for k, im in enumerate(images)]
    lo = run.index(True) if any(run) else 0
    hi = lo + sum(run) - 1 if step == 1 else lo - 1 + int(any(run))
    return idx.AxisImages(tuple(images), -start, lo, hi)


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

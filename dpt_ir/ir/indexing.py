"""Integer index forms of views, stencils and scatters.

- `Affine` coordinate forms, backend-neutral, for layout views whose input coordinates are
  affine in the output's (`OpDef.view_affine`): the C++ path renders them, and `split`
  proves a reshape affine (every coordinate in range) before it is used;
- integer-arithmetic strings (``"(j0 * 3 + p)"``, literals folded: `add`, `mul`) where the
  op table describes a map symbolically and the compiler evaluates it itself (the images a
  pad's adjoint counts). No backend syntax.
"""

from __future__ import annotations

import functools
from collections.abc import Sequence
from dataclasses import dataclass


def _lit(e: str) -> int | None:
    try:
        return int(e)
    except ValueError:
        return None


def add(a: str, b: str | int) -> str:
    b = str(b)
    la, lb = _lit(a), _lit(b)
    if la is not None and lb is not None:
        return str(la + lb)
    if lb == 0:
        return a
    if la == 0:
        return b
    if lb is not None and lb < 0:
        return f"({a} - {-lb})"
    return f"({a} + {b})"


def mul(a: str, k: int) -> str:
    la = _lit(a)
    if la is not None:
        return str(la * k)
    if k == 0:
        return "0"
    if k == 1:
        return a
    return f"({a} * {k})"


def strides(shape: Sequence[int]) -> list[int]:
    """Row-major element strides."""
    out, acc = [], 1
    for d in reversed(shape):
        out.append(acc)
        acc *= d
    return out[::-1]


# -- Affine coordinate forms: backend-neutral index maps of layout views -------------------
@dataclass(frozen=True)
class Affine:
    """The integer form ``b + sum(w[a] * c[a])`` over the coordinates ``c`` of a loop space
    (one weight per space axis). Layout views (`OpDef.view_affine`) map the coordinate forms
    of an output element to those of the input element it reads; a backend renders them."""

    b: int
    w: tuple[int, ...]

    def __add__(self, other: Affine) -> Affine:
        n = max(len(self.w), len(other.w))  # a missing weight is 0 (forms over more coordinates)
        a, b = self.padded(n).w, other.padded(n).w
        return Affine(self.b + other.b, tuple(x + y for x, y in zip(a, b, strict=True)))

    def padded(self, n: int) -> Affine:
        """The same form over ``n`` coordinates (at least its own)."""
        return Affine(self.b, self.w + (0,) * (n - len(self.w)))

    def scaled(self, k: int) -> Affine:
        return Affine(self.b * k, tuple(x * k for x in self.w))

    def shifted(self, k: int) -> Affine:
        return Affine(self.b + k, self.w)

    def bounds(self, extents: Sequence[int]) -> tuple[int, int]:
        """Least and greatest value over ``0 <= c[a] < extents[a]``."""
        w = self.padded(len(extents)).w
        lo = self.b + sum(min(0, x * (n - 1)) for x, n in zip(w, extents, strict=True))
        hi = self.b + sum(max(0, x * (n - 1)) for x, n in zip(w, extents, strict=True))
        return lo, hi


Coords = tuple[Affine, ...]  # one form per axis of an array


def zero(rank: int) -> Affine:
    return Affine(0, (0,) * rank)


def canonical(form: Affine, space: Sequence[int]) -> Affine:
    """``form`` over ``space`` with no weight on axes of extent 1 (their coordinate is always
    0) and no trailing zero weights, so equal offsets compare equal."""
    w = [0 if n == 1 else x for x, n in zip(form.padded(len(space)).w, space, strict=True)]
    while w and w[-1] == 0:
        w.pop()
    return Affine(form.b, tuple(w))


def axis(a: int, rank: int) -> Affine:
    """The coordinate ``c[a]`` of a space of ``rank`` axes."""
    return Affine(0, tuple(int(k == a) for k in range(rank)))


def aligned_coords(coords: Coords, out_shape: Sequence[int], in_shape: Sequence[int]) -> Coords:
    """The coordinates an input of ``in_shape`` reads when it NumPy-broadcasts to an output
    of ``out_shape`` at ``coords`` (size-1 axes read index 0)."""
    lead = len(out_shape) - len(in_shape)
    rank = len(coords[0].w) if coords else 0
    return tuple(zero(rank) if d == 1 else coords[lead + k] for k, d in enumerate(in_shape))


def flat(coords: Coords, shape: Sequence[int], rank: int) -> Affine:
    """The row-major flat offset of ``coords`` (per axis, or flat: `flat_coords`) in an array
    of ``shape``."""
    if is_flat(coords, shape):
        return coords[0].padded(rank)
    total = zero(rank)
    for c, s in zip(coords, strides(shape), strict=True):
        total = total + c.scaled(s)
    return total


def split(offset: Affine, shape: Sequence[int], extents: Sequence[int]) -> Coords | None:
    """Coordinates in ``shape`` whose row-major offset is ``offset`` over the space of
    ``extents``, each an affine form in range there; None when no such forms exist (the
    split would need a division or modulus of a loop coordinate)."""
    st = strides(shape)
    offset = offset.padded(len(extents))
    rank = len(offset.w)
    rows = [[0] * rank for _ in shape]
    for a, x in enumerate(offset.w):
        if x == 0:
            continue
        d = next((d for d, s in enumerate(st) if abs(x) >= s and shape[d] > 1), None)
        if d is None or x % st[d]:
            return None
        rows[d][a] = x // st[d]
    rest, b = offset.b, []
    for s in st:
        b.append(rest // s)
        rest -= b[-1] * s
    out = tuple(Affine(bd, tuple(r)) for bd, r in zip(b, rows, strict=True))
    for c, n in zip(out, shape, strict=True):
        lo, hi = c.bounds(extents)
        if lo < 0 or hi >= n:
            return None
    return out


def flat_coords(offset: Affine) -> Coords:
    """Flat coordinates: the element at row-major ``offset`` of an array of any rank, as one
    form (a view that preserves the layout reads its input at the same flat offset). An
    array of rank other than 1 read at flat coordinates can be loaded, not evaluated
    coordinate-wise (`is_flat`)."""
    return (offset,)


def is_flat(coords: Coords, shape: Sequence[int]) -> bool:
    """Whether ``coords`` are flat coordinates (`flat_coords`) of an array of ``shape``."""
    return len(coords) != len(shape)


@dataclass(frozen=True)
class AxisImages:
    """One axis of a view that reads each axis independently (`OpDef.axis_images`): output
    index ``k`` reads the input indices ``images[k]`` (several: summed in order; none: the
    view's fill value). Where ``lo <= k <= hi`` the only image is ``k + shift``."""

    images: tuple[tuple[int, ...], ...]
    shift: int
    lo: int
    hi: int

    @property
    def plain(self) -> bool:
        """Every output index is its interior shift (no boundary on this axis)."""
        return self.lo == 0 and self.hi == len(self.images) - 1

    @functools.cached_property
    def tables(self) -> AxisTables:
        """The axis's images as tables (`AxisTables`), made once per axis: an embed's flat axis
        has 10⁵-10⁶ indices, and a kernel's edge asks for them per read."""
        images = self.images
        width = max(map(len, images), default=0)
        if width == 1:
            flat = [im[0] if im else 0 for im in images]
        else:
            flat = [v for im in images for v in (*im, *([0] * (width - len(im))))]
        counts = list(map(len, images))
        return AxisTables(width, flat, counts, min(counts, default=0))


@dataclass(frozen=True)
class AxisTables:
    """An axis's images per output index as tables: ``width`` slots per index (the most images
    of any index), ``images`` their input indices (``width`` per index, unused slots 0),
    ``counts`` how many each index has, ``least`` the fewest any index has."""

    width: int
    images: list[int]
    counts: list[int]
    least: int


@dataclass(frozen=True)
class ImageMap:
    """The per-axis images of a view (`AxisImages`) and the value of an output element with
    no image on some axis (a constant pad's ``cval``)."""

    axes: tuple[AxisImages, ...]
    fill: float = 0.0

"""Integer index expressions for Warp code, as strings, with light simplification.

Shape ops describe, for each output element, which input element they read; these
helpers build those expressions (``"i0"``, ``"(i1 * 3 + 2)"``...). Literals are folded so
that generated kernels stay readable and cheap.
"""

from __future__ import annotations

from collections.abc import Sequence


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


def linearize(index: Sequence[str], shape: Sequence[int]) -> str:
    """Flat row-major offset of ``index`` in an array of ``shape`` (size-1 axes skipped)."""
    total = "0"
    for e, s, d in zip(index, strides(shape), shape, strict=True):
        if d != 1:
            total = add(total, mul(e, s))
    return total


def delinearize(flat: str, shape: Sequence[int]) -> list[str]:
    """Row-major multi-index of the non-negative flat offset ``flat`` (which is below the
    product of ``shape``, so the leading axis needs no modulo)."""
    out = []
    for k, (s, d) in enumerate(zip(strides(shape), shape, strict=True)):
        if d == 1:
            out.append("0")
            continue
        e = flat if s == 1 else f"({flat} // {s})"
        out.append(e if k == 0 or all(x == 1 for x in shape[:k]) else f"({e} % {d})")
    return out


def broadcast_index(index: Sequence[str], out_shape: Sequence[int], in_shape: Sequence[int]) -> tuple[str, ...]:
    """Index into an input that NumPy-broadcasts to ``out_shape``."""
    lead = len(out_shape) - len(in_shape)
    return tuple("0" if d == 1 else index[lead + k] for k, d in enumerate(in_shape))


def clamp(e: str, lo: int, hi: int) -> str:
    """``e`` limited to [lo, hi] (for reads that must stay in bounds when unused)."""
    return f"wp.min(wp.max({e}, {lo}), {hi})"

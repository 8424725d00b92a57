"""Stencil family: boundary extension (`pad`), its adjoint (`pad_adjoint`) and the
constant-weight correlation without boundary (`correlate_valid`).

The user-facing filters (`dp.correlate`, `dp.convolve`, `dp.gaussian_filter`... in
`dpt_ir.api.imaging`) are ``correlate_valid(pad(x, mode))``, which reproduces
``scipy.ndimage``'s boundary modes exactly. Every adjoint is a gather: the adjoint of
``correlate_valid`` correlates the zero-padded cotangent with the flipped weights; the
adjoint of ``pad`` folds each padded position back onto the input element it copied,
summing in a fixed order. No scatter, no atomics.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.mirror import MirrorSum, mirror_sum
from dpt_ir.ir.registry import Derivative, GradContext, Linear, OpDef, register_op, without_cval
from dpt_ir.ir.rules import Attrs
from dpt_ir.ir.types import FLOAT_DTYPES, TensorType
from dpt_ir.ops import batch_rules

Mode = Literal["reflect", "constant", "nearest", "mirror", "wrap"]
NUMPY_MODES = {"reflect": "symmetric", "mirror": "reflect", "nearest": "edge", "wrap": "wrap", "constant": "constant"}


class PadAttrs(Attrs):
    before: tuple[int, ...]
    after: tuple[int, ...]
    mode: Mode = "reflect"
    cval: float = 0.0


class CorrelateAttrs(Attrs):
    """``weights``: nested lists, one level per axis of the input. ``accumulate``: where the
    taps are summed. ``float64`` (SciPy's): in double, rounded once to the input's dtype.
    ``dtype``: in the input's own dtype, for float32 an ordered chain ``s = w0 * x0; s =
    fmaf(w_t, x_t, s)`` over the non-zero taps in row-major order with the weights rounded to
    float32 (each fused step rounds once: error at most ``(taps - 1) * 2^-24 * sum |w x|``
    beyond the weights' rounding), as float32 stencils run in XLA and PyTorch; it computes
    twice the elements per vector instruction. float64 data accumulate in float64 either way."""

    weights: list[Any]
    accumulate: Literal["float64", "dtype"] = "float64"


def _check_pad(x: TensorType, a: PadAttrs, where: str) -> None:
    if not len(a.before) == len(a.after) == x.ndim:
        raise ContractError(
            f"{where}: before and after need one width per axis ({x.ndim}), found {list(a.before)} and {list(a.after)}"
        )
    if any(w < 0 for w in (*a.before, *a.after)):
        raise ContractError(f"{where}: pad widths must be non-negative, found {list(a.before)}, {list(a.after)}")
    for k, n in enumerate(x.shape):
        if n == 0 and (a.before[k] or a.after[k]) and a.mode != "constant":
            raise ContractError(f"{where}: cannot extend an empty axis {k} in mode {a.mode!r}")


def _infer_pad(inputs: tuple[TensorType, ...], a: PadAttrs, where: str) -> TensorType:
    (x,) = inputs
    _check_pad(x, a, where)
    shape = tuple(n + b + e for n, b, e in zip(x.shape, a.before, a.after, strict=True))
    return TensorType(shape=shape, dtype=x.dtype)


def _infer_pad_adjoint(inputs: tuple[TensorType, ...], a: PadAttrs, where: str) -> TensorType:
    (g,) = inputs
    shape = tuple(n - b - e for n, b, e in zip(g.shape, a.before, a.after, strict=True))
    if len(a.before) != g.ndim or any(d < 0 for d in shape):
        raise ContractError(f"{where}: pad widths {list(a.before)}, {list(a.after)} exceed the shape {list(g.shape)}")
    t = TensorType(shape=shape, dtype=g.dtype)
    _check_pad(t, a, where)
    return t


def _pad_ref(a: PadAttrs, x: np.ndarray) -> np.ndarray:
    widths = list(zip(a.before, a.after, strict=True))
    if a.mode == "constant":
        return np.pad(x, widths, mode="constant", constant_values=np.asarray(a.cval, x.dtype))
    return np.pad(x, widths, mode=NUMPY_MODES[a.mode])


def _pad_adjoint_ref(a: PadAttrs, g: np.ndarray) -> np.ndarray:
    shape = tuple(n - b - e for n, b, e in zip(g.shape, a.before, a.after, strict=True))
    size = math.prod(shape)
    flat = np.arange(size).reshape(shape)
    if a.mode == "constant":
        owner = np.pad(flat, list(zip(a.before, a.after, strict=True)), constant_values=-1)
    else:
        owner = np.pad(flat, list(zip(a.before, a.after, strict=True)), mode=NUMPY_MODES[a.mode])
    keep = owner >= 0
    out = np.bincount(owner[keep].ravel(), weights=g[keep].ravel().astype(np.float64), minlength=size)
    return out.reshape(shape).astype(g.dtype)


def _longest_run(flags: list[bool]) -> tuple[int, int] | None:
    """First and last index of the longest run of True (None if there is none)."""
    best, start = None, None
    for k, flag in enumerate([*flags, False]):
        if flag and start is None:
            start = k
        elif not flag and start is not None:
            if best is None or k - start > best[1] - best[0] + 1:
                best = (start, k - 1)
            start = None
    return best


def _preimages(k: str, n: int, b: int, e: int, mode: str) -> list[tuple[str, str | None]]:
    """Positions of a padded axis (length n + b + e) that copy input element ``k``, each
    with the condition under which it is one (None: always). Only the images that can
    land inside the padded axis for some ``k`` are listed."""
    length = n + b + e
    if n == 0:  # an empty axis has no element to copy (and no period)
        return []
    if mode == "constant":
        return [(idx.add(k, b), None)]
    if mode == "nearest":
        out: list[tuple[str, str | None]] = [(idx.add(k, b), None)]
        out += [(str(q), f"{k} == 0") for q in range(b)]
        out += [(str(q), f"{k} == {n - 1}") for q in range(n + b, length)]
        return out
    if mode == "mirror" and n == 1:
        return [(str(q), None) for q in range(length)]
    period = {"wrap": n, "reflect": 2 * n, "mirror": 2 * n - 2}[mode]
    # (expression of k, the range it spans as k runs over 0..n-1, an extra condition)
    families: list[tuple[str, int, int, str | None]] = [(k, 0, n - 1, None)]
    if mode == "reflect":
        families.append((f"({period - 1} - {k})", n, 2 * n - 1, None))
    elif mode == "mirror":
        families.append((f"({period} - {k})", n - 1, 2 * n - 2, f"{k} != 0 and {k} != {n - 1}"))
    out = []
    for base, lo, hi, cond in families:
        first = math.floor((-b - hi) / period)
        last = math.ceil((length - 1 - b - lo) / period)
        for m in range(first, last + 1):
            shift = m * period + b
            if hi + shift < 0 or lo + shift > length - 1:
                continue  # this image never lands inside the padded axis
            pos = idx.add(base, shift)
            always = lo + shift >= 0 and hi + shift <= length - 1
            inside = None if always else f"{pos} >= 0 and {pos} < {length}"
            out.append((pos, " and ".join(c for c in (cond, inside) if c) or None))
    return out


def preimage_count(a: PadAttrs, shape: tuple[int, ...]) -> int:
    """Reads per element of pad_adjoint (the product over axes of the images listed)."""
    return math.prod(len(_preimages("k", n, b, e, a.mode)) for n, b, e in zip(shape, a.before, a.after, strict=True))


# -- Per-axis images (`OpDef.axis_images`), from the reference's own boundary semantics ----
def _owners(n: int, b: int, e: int, mode: str) -> np.ndarray:
    """For each position of a padded axis, the input index it copies (-1: the fill)."""
    if mode == "constant":
        return np.pad(np.arange(n), (b, e), constant_values=-1)
    return np.pad(np.arange(n), (b, e), mode=NUMPY_MODES[mode])


def _interior(images: list[tuple[int, ...]], shift: int) -> tuple[int, int]:
    """The longest run of indices whose only image is ``k + shift`` (an empty run: (0, -1))."""
    run = _longest_run([im == (k + shift,) for k, im in enumerate(images)])
    return run if run is not None else (0, -1)


def _pad_images(a: PadAttrs, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> idx.ImageMap:
    axes = []
    for n, b, e in zip(in_shape, a.before, a.after, strict=True):
        images = [() if p < 0 else (int(p),) for p in _owners(n, b, e, a.mode)]
        axes.append(idx.AxisImages(tuple(images), -b, *_interior(images, -b)))
    return idx.ImageMap(tuple(axes), float(a.cval))


def _pad_adjoint_images(a: PadAttrs, in_shape: tuple[int, ...], out_shape: tuple[int, ...]) -> idx.ImageMap:
    axes = []
    for n, b, e in zip(out_shape, a.before, a.after, strict=True):
        owners = _owners(n, b, e, a.mode)
        images = [tuple(int(p) for p in np.flatnonzero(owners == k)) for k in range(n)]
        axes.append(idx.AxisImages(tuple(images), b, *_interior(images, b)))
    return idx.ImageMap(tuple(axes))


def _pad_grad(c: GradContext) -> Any:
    return c.gy.builder.emit("pad_adjoint", [c.gy], c.attrs.model_dump())


def _pad_adjoint_grad(c: GradContext) -> Any:
    # The transpose of the linear part of pad: the padding value contributes nothing.
    return c.gy.builder.emit("pad", [c.gy], {**c.attrs.model_dump(), "cval": 0.0})


register_op(
    OpDef(
        name="pad",
        kind="shape",
        arity=1,
        attrs=PadAttrs,
        infer=_infer_pad,
        reference=_pad_ref,
        derivative=Derivative({0: _pad_grad}),
        linear=Linear(((0,),), without_cval),
        axis_images=_pad_images,
        batch_attrs=batch_rules.unpadded_first_axis,
        doc="extend by before/after elements per axis with a scipy.ndimage boundary mode",
    )
)
register_op(
    OpDef(
        name="pad_adjoint",
        kind="shape",
        arity=1,
        attrs=PadAttrs,
        infer=_infer_pad_adjoint,
        reference=_pad_adjoint_ref,
        derivative=Derivative({0: _pad_adjoint_grad}),
        linear=Linear(((0,),)),
        axis_images=_pad_adjoint_images,
        code_copies=preimage_count,
        batch_attrs=batch_rules.unpadded_first_axis,
        doc="the adjoint of pad: each input element sums the padded positions that copied it",
    )
)


def weights_array(attrs: CorrelateAttrs) -> np.ndarray:
    return np.asarray(attrs.weights, dtype=np.float64)


def _infer_correlate(inputs: tuple[TensorType, ...], a: CorrelateAttrs, where: str) -> TensorType:
    (x,) = inputs
    try:
        w = weights_array(a)
    except ValueError:
        raise ContractError(f"{where}: weights must be a rectangular nested list of numbers") from None
    if x.dtype not in FLOAT_DTYPES:
        raise ContractError(f"{where}: expected a float32 or float64 input, found {x.dtype}")
    if w.ndim != x.ndim or any(k < 1 or k > n for k, n in zip(w.shape, x.shape, strict=True)):
        raise ContractError(
            f"{where}: weights of shape {list(w.shape)} do not fit an input of shape "
            f"{list(x.shape)} (expected one axis per input axis, each 1..size)"
        )
    if not np.all(np.isfinite(w)):
        raise ContractError(f"{where}: weights must be finite")
    return TensorType(shape=tuple(n - k + 1 for n, k in zip(x.shape, w.shape, strict=True)), dtype=x.dtype)


def _correlate_ref(a: CorrelateAttrs, x: np.ndarray) -> np.ndarray:
    # As scipy.ndimage: float64 weights and accumulation for every float input, one rounding
    # to the input's dtype at the end; zero weights are skipped (0 * inf does not make NaN).
    # ``accumulate="dtype"`` on float32: the backend's fmaf chain, each step rounded exactly.
    w = weights_array(a).astype(np.float64)
    out_shape = tuple(n - k + 1 for n, k in zip(x.shape, w.shape, strict=True))
    views = [(w[t], x[tuple(slice(o, o + n) for o, n in zip(t, out_shape, strict=True))]) for t in np.ndindex(*w.shape)]
    if a.accumulate == "dtype" and x.dtype == np.float32:
        return _fma_chain([(wt, v) for wt, v in views if wt != 0], out_shape)
    mirror = mirror_sum(w)
    if mirror is not None:
        return _mirror_ref(mirror, [v for _, v in views], out_shape).astype(x.dtype)
    out = np.zeros(out_shape, dtype=np.float64)
    for wt, v in views:
        if wt != 0:
            out += wt * v
    return out.astype(x.dtype)


def _mirror_ref(m: MirrorSum, views: list[np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """`MirrorSum`'s order in float64 (NumPy rounds each operation; it never fuses)."""
    with np.errstate(invalid="ignore", over="ignore"):
        out = m.centre[1] * views[m.centre[0]].astype(np.float64) if m.centre else None
        for lo, hi, wt in m.pairs:
            term = (views[lo].astype(np.float64) + m.sign * views[hi].astype(np.float64)) * wt
            out = term if out is None else out + term
    return np.zeros(shape) if out is None else out


def _fma_chain(views: list[tuple[float, np.ndarray]], shape: tuple[int, ...]) -> np.ndarray:
    """``s = w0 * x0; s = fmaf(w_t, x_t, s)`` in float32, each step correctly rounded: the
    product of two floats is exact in double, the sum's error is found exactly (TwoSum) and
    the double rounded to odd before the one rounding to float32, which is then the correct
    rounding of the exact ``w_t * x_t + s`` (53 >= 2 * 24 + 2 bits)."""
    if not views:
        return np.zeros(shape, np.float32)
    (w0, x0), rest = views[0], views[1:]
    s = np.float32(w0) * x0.astype(np.float32)
    with np.errstate(invalid="ignore", over="ignore"):
        for wt, v in rest:
            p = np.float64(np.float32(wt)) * v.astype(np.float64)
            c = s.astype(np.float64)
            r = p + c
            bp = r - c
            e = (p - bp) + (c - (r - bp))  # TwoSum: p + c == r + e exactly (finite r)
            even = (r.view(np.int64) & 1) == 0
            fix = np.isfinite(r) & (e != 0) & even
            r = np.where(fix, np.nextafter(r, np.where(e > 0, np.inf, -np.inf)), r)
            s = r.astype(np.float32)
    return s


def _correlate_grad(c: GradContext) -> Any:
    w = weights_array(c.attrs)
    k = [d - 1 for d in w.shape]
    padded = c.gy.builder.emit("pad", [c.gy], {"before": k, "after": k, "mode": "constant", "cval": 0.0})
    flipped = w[tuple(slice(None, None, -1) for _ in w.shape)]
    return F.apply("correlate_valid", padded, weights=flipped.tolist(), accumulate=c.attrs.accumulate)


def taps(attrs: CorrelateAttrs, shape: tuple[int, ...] = ()) -> int:
    """Non-zero weights: the reads per output element (fusion's recompute cost)."""
    return int(np.count_nonzero(weights_array(attrs)))


register_op(
    OpDef(
        name="correlate_valid",
        kind="stencil",
        arity=1,
        attrs=CorrelateAttrs,
        infer=_infer_correlate,
        reference=_correlate_ref,
        derivative=Derivative({0: _correlate_grad}),
        linear=Linear(((0,),)),
        weights=weights_array,
        tap_accumulation=lambda a: a.accumulate,
        reads_per_element=taps,
        batch_attrs=batch_rules.flat_first_tap(weights_array),
        doc="sum_t w[t] * x[i + t] over the positions where the weights fit (no boundary)",
    )
)

"""The cubic B-spline prefilter of scipy.ndimage along one axis, and its adjoint, as ops.

- ``spline_filter1d(x; axis, mode, npad, cval)``: ``npad`` elements of prepadding per side
  (edge values under ``nearest``, ``cval`` under ``grid-constant``: scipy's
  ``_prepad_for_spline_filter``), then the filter along ``axis``;
- ``spline_filter1d_adjoint``: its transpose. Each is the other's derivative.

Both are the line matrix of (pad, then filter): built by running the recursion of
`dpt_ir.reference.spline_ref` on the unit vectors (for the adjoint, the transposed recursion: each
step transposed, in reverse order), without the entries below `FILTER_DROP` of their row's
largest (the pole is -0.268: a row keeps at most ~63 entries, and what is dropped is below
float64 resolution). Interpreter and kernels apply that matrix as a CSR along the axis,
each output element summing its row in order (`apply_rows`), so they agree bit for bit,
special values included; the truncation means a non-finite input reaches ~30 samples to
either side, not the whole line as in scipy's recursion (the interpolating functions of
`dpt_ir.api.resample` add ``sum(0 * x)`` before filtering, which gives scipy's NaNs). Adjoint form: the compile-time
transpose (`ADJOINT_FORM`), an ordered gather.
"""

from __future__ import annotations

import functools
from typing import Any

import numpy as np

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import Derivative, GradContext, OpDef, SparseRows, register_op
from dpt_ir.ir.rules import Attrs
from dpt_ir.ir.types import TensorType
from dpt_ir.ops.resample import ADJOINT_FORM, Mode, check_float
from dpt_ir.reference import spline_ref as spline

FILTER_DROP = 2.0**-60


class FilterAttrs(Attrs):
    """``npad`` > 0 first extends the axis by ``npad`` per side (``nearest``: edge values;
    ``grid-constant``: ``cval``), scipy's prepadding before the filter."""

    axis: int
    mode: Mode = "mirror"
    npad: int = 0
    cval: float = 0.0


def _infer_filter(inputs: tuple[TensorType, ...], a: FilterAttrs, where: str, sign: int = 1) -> TensorType:
    (x,) = inputs
    check_float(x, where)
    if not 0 <= a.axis < x.ndim:
        raise ContractError(f"{where}: axis must be in [0, {x.ndim}), found {a.axis}")
    if a.npad < 0 or (a.npad and a.mode not in ("nearest", "grid-constant")):
        raise ContractError(f"{where}: npad must be 0, or > 0 under nearest / grid-constant, found {a.npad}")
    shape = list(x.shape)
    shape[a.axis] += sign * 2 * a.npad
    if shape[a.axis] < 0:
        raise ContractError(f"{where}: a cotangent axis of {x.shape[a.axis]} cannot lose 2 x {a.npad} padding")
    return TensorType(shape=tuple(shape), dtype=x.dtype)


def _embedding(n: int, npad: int, mode: str) -> np.ndarray:
    """The (n + 2 npad, n) matrix of the prepadding (edge copies under nearest, zeros else)."""
    e = np.zeros((n + 2 * npad, n))
    e[npad : npad + n] = np.eye(n)
    if npad and mode == "nearest":
        e[:npad, 0] = 1.0
        e[npad + n :, n - 1] = 1.0
    return e


@functools.lru_cache(maxsize=64)
def _filter_matrix(n: int, mode: str, npad: int, adjoint: bool) -> tuple[np.ndarray, np.ndarray]:
    """The line matrix of pad-then-filter (its transpose when ``adjoint``, built from the
    transposed recursion), and the forward's response to ``cval = 1``."""
    e = _embedding(n, npad, mode)
    forward = spline.filter_matrix(n + 2 * npad, mode)
    m = e.T @ spline.filter_matrix(n + 2 * npad, mode, adjoint=True) if adjoint else forward @ e
    unit = forward @ (1.0 - e.sum(axis=1)) if mode == "grid-constant" else np.zeros(n + 2 * npad)
    return m, unit


def _filter_rows(a: FilterAttrs, n: int, adjoint: bool) -> SparseRows:
    m, unit = _filter_matrix(n, a.mode, a.npad, adjoint)
    keep = np.abs(m) >= FILTER_DROP * np.abs(m).max(axis=1, keepdims=True, initial=0.0)
    rows, cols = np.nonzero(keep)
    rowptr = np.searchsorted(rows, np.arange(m.shape[0] + 1))
    bias = a.cval * unit if not adjoint and a.cval != 0.0 and bool(unit.any()) else None
    return SparseRows(rowptr, cols, m[rows, cols], bias, a.axis)


def apply_rows(rows: SparseRows, x: np.ndarray) -> np.ndarray:
    """``rows`` applied along ``rows.axis`` of ``x`` in float64, each output element summing
    its row in CSR order, as the kernels do (`dpt_ir.backends.cxx.sparse`)."""
    lines = np.moveaxis(np.asarray(x, dtype=np.float64), rows.axis, -1)
    counts = np.diff(rows.rowptr)
    acc = np.zeros((*lines.shape[:-1], len(counts)))
    for j in range(int(counts.max(initial=0))):
        live = counts > j
        k = np.minimum(rows.rowptr[:-1] + j, len(rows.cols) - 1)
        term = rows.vals[k] * lines[..., rows.cols[k]]
        acc = np.where(live, acc + term, acc)
    if rows.bias is not None:
        acc = acc + rows.bias
    return np.moveaxis(acc, -1, rows.axis)


def _filter_op(name: str, adjoint: bool, partner: str, doc: str) -> OpDef:
    def reference(a: FilterAttrs, x: np.ndarray) -> np.ndarray:
        shape = list(x.shape)
        shape[a.axis] += (-2 if adjoint else 2) * a.npad
        return apply_rows(rows(a, tuple(shape)), x).astype(x.dtype)

    def grad(c: GradContext) -> Any:
        return c.gy.builder.emit(partner, [c.gy], {**c.attrs.model_dump(), "cval": 0.0})

    def rows(a: FilterAttrs, shape: tuple[int, ...]) -> SparseRows:
        # the unpadded line length: the adjoint's output, the forward's output less the padding
        return _filter_rows(a, shape[a.axis] if adjoint else shape[a.axis] - 2 * a.npad, adjoint)

    def infer(inputs: tuple[TensorType, ...], a: FilterAttrs, where: str) -> TensorType:
        return _infer_filter(inputs, a, where, -1 if adjoint else 1)

    return OpDef(
        name=name,
        kind="stencil",
        arity=1,
        attrs=FilterAttrs,
        infer=infer,
        reference=reference,
        derivative=Derivative({0: grad}),
        sparse_rows=rows,
        reads_per_element=lambda a, shape: max(int(np.diff(rows(a, shape).rowptr).max(initial=0)), 1),
        doc=doc,
    )


register_op(
    _filter_op(
        "spline_filter1d",
        False,
        "spline_filter1d_adjoint",
        "scipy.ndimage's cubic spline prefilter along axis (causal + anti-causal recursion, per-mode "
        "initialisation), after npad elements of prepadding per side",
    )
)
register_op(
    _filter_op(
        "spline_filter1d_adjoint",
        True,
        "spline_filter1d",
        f"the transpose of spline_filter1d (the transposed recursion, then the prepadding folded back); "
        f"adjoint form: {ADJOINT_FORM}",
    )
)

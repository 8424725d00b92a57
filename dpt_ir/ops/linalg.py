"""The matrix product op, ``matmul``: ``np.matmul`` of two float tensors, either operand's last
two axes optionally swapped (``transpose_a`` / ``transpose_b``: the gradients read their
operands transposed without writing a transposed copy).

Assumes: both operands have one float dtype (float32 or float64; `dpt_ir.api.linalg.matmul`
casts them there) and rank >= 1; a transpose flag is set only on an operand of rank >= 2.
Guarantees: NumPy's semantics: a 1-D ``a`` is a row (``1 x k``) and a 1-D ``b`` a column
(``k x 1``), that axis removed from the result; the leading (batch) axes broadcast. The
NumPy reference sums float32 products in float64 and rounds once, as the kernels do (in a
fixed order: see docs/gather-scatter.md), so compiled and interpreted results differ only
by the order of float64 additions. Both gradients are matrix products of the cotangent
with the other operand (``dA = dC @ B^T``, ``dB = A^T @ dC``, transposes as flags), summed
over the batch axes an operand was broadcast along (autodiff's ``sum_to``). Its lowering is
data: the `Contraction` that says where each output element reads.
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import Contraction, Derivative, GradContext, Linear, OpDef, register_op
from dpt_ir.ir.rules import Attrs
from dpt_ir.ir.types import FLOAT_DTYPES, TensorType, broadcast_shapes


class MatmulAttrs(Attrs):
    transpose_a: bool = False  # use a's last two axes swapped (rank >= 2 only)
    transpose_b: bool = False  # use b's last two axes swapped (rank >= 2 only)


def _matrix_dims(shape: tuple[int, ...], transposed: bool, side: str) -> tuple[tuple[int, ...], int, int]:
    """(batch axes, rows, columns) of an operand as the product sees it: a vector is a row
    (``a``) or a column (``b``)."""
    if len(shape) == 1:
        return ((), 1, shape[0]) if side == "a" else ((), shape[0], 1)
    rows, cols = shape[-2:]
    return (tuple(shape[:-2]), cols, rows) if transposed else (tuple(shape[:-2]), rows, cols)


def _infer(inputs: tuple[TensorType, ...], attrs: MatmulAttrs, where: str) -> TensorType:
    a, b = inputs
    for t, name in ((a, "first"), (b, "second")):
        if t.dtype not in FLOAT_DTYPES:
            raise ContractError(f"{where}: matmul needs float32 or float64 operands, found {t.dtype} ({name})")
        if t.ndim == 0:
            raise ContractError(f"{where}: matmul needs operands of rank >= 1, found a rank-0 {name} operand")
    if a.dtype != b.dtype:
        raise ContractError(f"{where}: matmul needs one dtype for both operands, found {a.dtype} and {b.dtype}")
    for t, flag in ((a, "transpose_a"), (b, "transpose_b")):
        if getattr(attrs, flag) and t.ndim < 2:
            raise ContractError(f"{where}: {flag} needs an operand of rank >= 2, found rank {t.ndim}")
    batch_a, m, k_a = _matrix_dims(a.shape, attrs.transpose_a, "a")
    batch_b, k_b, n = _matrix_dims(b.shape, attrs.transpose_b, "b")
    if k_a != k_b:
        raise ContractError(
            f"{where}: shapes {list(a.shape)} and {list(b.shape)} do not fit: the contracted axis of the first "
            f"({k_a}) must equal that of the second ({k_b})"
        )
    batch = broadcast_shapes(batch_a, batch_b, where=f"{where}: the batch axes of {list(a.shape)} and {list(b.shape)}")
    shape = (*batch, *([m] if a.ndim > 1 else []), *([n] if b.ndim > 1 else []))
    return TensorType(dtype=a.dtype, shape=shape)


def _reference(attrs: MatmulAttrs, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul`` in float64 (float32 products summed in float64, rounded once)."""
    x = np.swapaxes(a, -1, -2) if attrs.transpose_a else a
    y = np.swapaxes(b, -1, -2) if attrs.transpose_b else b
    with np.errstate(all="ignore"):
        return np.matmul(x.astype(np.float64), y.astype(np.float64)).astype(a.dtype)


def _operand(
    shape: tuple[int, ...], transposed: bool, side: str, batch: tuple[int, ...]
) -> tuple[tuple[int, ...], int, int]:
    """(batch strides aligned to the output's batch axes, row stride, column stride) of an
    operand, in elements of its row-major buffer; broadcast axes get stride 0."""
    zeros = (0,) * len(batch)
    if len(shape) == 1:  # a row (one row, unit column stride) or a column (unit row stride)
        return (zeros, 0, 1) if side == "a" else (zeros, 1, 0)
    strides = idx.strides(shape)
    own = shape[:-2]
    lead = len(batch) - len(own)
    aligned = tuple(0 if d < lead or own[d - lead] == 1 else strides[d - lead] for d in range(len(batch)))
    row, col = strides[-2], strides[-1]
    return (aligned, col, row) if transposed else (aligned, row, col)


def contraction(attrs: MatmulAttrs, shapes: tuple[tuple[int, ...], ...]) -> Contraction:
    """Where each output element of a matmul node reads (`Contraction`)."""
    sa, sb = shapes
    batch_a, m, k = _matrix_dims(sa, attrs.transpose_a, "a")
    batch_b, _, n = _matrix_dims(sb, attrs.transpose_b, "b")
    batch = tuple(np.broadcast_shapes(batch_a, batch_b))
    a_batch, a_row, a_col = _operand(sa, attrs.transpose_a, "a", batch)
    b_batch, b_row, b_col = _operand(sb, attrs.transpose_b, "b", batch)
    return Contraction(batch, m, k, n, a_batch, a_row, a_col, b_batch, b_row, b_col)


def _as_matrices(c: GradContext) -> tuple[Any, Any, Any, bool, bool]:
    """The operands and the cotangent with vectors promoted to matrices (a row ``a``, a
    column ``b``; the cotangent gets the removed axes back), and the transpose flags."""
    a, b, gy = c.input(0), c.input(1), c.gy
    ta, tb = c.attrs.transpose_a, c.attrs.transpose_b
    batch_a, m, _ = _matrix_dims(a.shape, ta, "a")
    batch_b, _, n = _matrix_dims(b.shape, tb, "b")
    batch = tuple(np.broadcast_shapes(batch_a, batch_b))
    if a.ndim == 1:
        a = F.reshape(a, (1, a.shape[0]))
    if b.ndim == 1:
        b = F.reshape(b, (b.shape[0], 1))
    if gy.shape != (*batch, m, n):
        gy = F.reshape(gy, (*batch, m, n))
    return a, b, gy, ta, tb


def _mm(x: Any, y: Any, ta: bool, tb: bool) -> Any:
    return x.builder.emit("matmul", [x, y], {"transpose_a": ta, "transpose_b": tb})


def _grad_a(c: GradContext) -> Any:
    """``dA = dC @ op(B)^T`` (``ta``: its transpose ``op(B) @ dC^T``), at A's matrix shape
    with the broadcast batch axes; autodiff sums those and restores a vector's shape."""
    _, b, gy, ta, tb = _as_matrices(c)
    g = _mm(b, gy, tb, True) if ta else _mm(gy, b, False, not tb)
    return _restore(g, c.input_type(0).shape)


def _grad_b(c: GradContext) -> Any:
    """``dB = op(A)^T @ dC`` (``tb``: its transpose ``dC^T @ op(A)``)."""
    a, _, gy, ta, tb = _as_matrices(c)
    g = _mm(gy, a, True, ta) if tb else _mm(a, gy, not ta, False)
    return _restore(g, c.input_type(1).shape)


def _restore(g: Any, shape: tuple[int, ...]) -> Any:
    """A matrix gradient of a vector operand (a ``1 x k`` row or ``k x 1`` column per batch)
    summed over the batch and reshaped to the vector; others are left to autodiff's sum_to."""
    if len(shape) != 1:
        return g
    if g.ndim > 2:
        g = F.sum(g, axis=tuple(range(g.ndim - 2)))
    return F.reshape(g, shape)


register_op(
    OpDef(
        name="matmul",
        kind="contraction",
        arity=2,
        attrs=MatmulAttrs,
        infer=_infer,
        reference=_reference,
        contraction=contraction,
        empty_value=0.0,  # a product over an empty k: zeros, as np.matmul
        derivative=Derivative(formulas={0: _grad_a, 1: _grad_b}, saved_inputs=(0, 1)),
        linear=Linear(((0,), (1,))),
        swap_flags=("transpose_a", "transpose_b"),
        cost="expensive",
        doc="matrix product (np.matmul: batched, broadcast, 1-D vectors); transpose_a/b swap an operand's last axes",
    )
)

__all__ = ["MatmulAttrs", "contraction"]

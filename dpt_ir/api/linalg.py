"""`matmul` and the ``@`` operator, with NumPy's semantics.

Assumes: operands are numeric dp tensors of rank >= 1 (bool is refused: NumPy's boolean
matmul is a logical reduction, not a sum).
Guarantees: after NumPy's promotions (1-D operands become a row (``a``) or column (``b``)
and that axis is removed from the result; batch axes broadcast), float operands give one
``matmul`` node (`dpt_ir.ops.linalg`): its own kernel, tiled on CUDA and a fixed-order
loop on the CPU, float32 summed in float64, its gradients matmul nodes with transpose
flags. Integer operands, which the tile kernels do not take, expand into broadcast,
multiply and sum nodes (one fused reduction kernel). Mismatched shapes are a
ContractError naming both shapes. This is coverage, not BLAS speed.
"""

from __future__ import annotations

from typing import Any

from dpt_ir.api import core as F
from dpt_ir.ir.builder import Tensor, op_site, records_origin
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import broadcast_shapes, is_float


def _check(a: Tensor, b: Tensor, where: str) -> None:
    for t in (a, b):
        if t.ndim == 0:
            raise ContractError(f"{where}: matmul needs operands of rank >= 1, found a rank-0 tensor %{t.name}")
        if t.dtype == "bool":
            raise ContractError(f"{where}: matmul needs numeric operands, found bool %{t.name} (cast it first)")
    k_a, k_b = a.shape[-1], b.shape[-2] if b.ndim > 1 else b.shape[0]
    if k_a != k_b:
        raise ContractError(
            f"{where}: shapes {list(a.shape)} and {list(b.shape)} do not fit: the last axis of the first "
            f"({k_a}) must equal the {'second-to-last' if b.ndim > 1 else 'only'} axis of the second ({k_b})"
        )


@records_origin
def matmul(a: Any, b: Any) -> Tensor:
    """The matrix product ``a @ b`` (``np.matmul``): 2-D, batched over broadcast leading
    axes, and 1-D vectors (promoted to a matrix, the added axis removed from the result).
    Float operands give a ``matmul`` node, whose gradients are matrix products too."""
    where = "op 'matmul'"
    for x in (a, b):
        if not isinstance(x, Tensor):
            raise ContractError(
                f"{where}: expected dp tensors, found {type(x).__name__} (declare arrays as graph inputs)"
            )
    a, b = F.lift([a, b], where)
    where = op_site("matmul", [a, b])
    _check(a, b, where)
    shapes = f"{where}: the batch axes (all but the last two) of {list(a.shape)} and {list(b.shape)}"
    vec_a, vec_b = a.ndim == 1, b.ndim == 1
    broadcast_shapes(a.shape[:-2] if not vec_a else (), b.shape[:-2] if not vec_b else (), where=shapes)
    if is_float(a.dtype):
        # The innermost builder: inside a loop body an operand may be a tensor of the graph around it.
        return F.builder_of([a, b], where).emit("matmul", [a, b])
    return _integer_matmul(a, b)


def _integer_matmul(a: Tensor, b: Tensor) -> Tensor:
    """``sum(a[..., :, :, None] * b[..., None, :, :], axis=-2)`` with vectors promoted and
    their axes removed again: the products stay in registers of one reduction kernel."""
    vec_a, vec_b = a.ndim == 1, b.ndim == 1
    if vec_a:
        a = F.reshape(a, (1, a.shape[0]))
    if vec_b:
        b = F.reshape(b, (b.shape[0], 1))
    # (..., m, k, 1) * (..., 1, k, n), summed over k: the multiply broadcasts.
    out = F.sum(F.expand_dims(a, a.ndim) * F.expand_dims(b, b.ndim - 2), axis=-2)
    drop = ([out.ndim - 2] if vec_a else []) + ([out.ndim - 1] if vec_b else [])
    return F.squeeze(out, tuple(drop)) if drop else out


def _bind_operators() -> None:
    Tensor.__matmul__ = lambda self, other: matmul(self, other)  # type: ignore[attr-defined]
    Tensor.__rmatmul__ = lambda self, other: matmul(other, self)  # type: ignore[attr-defined]


_bind_operators()

"""Objective support: `guard`, an identity whose kernels flag a violated precondition.

The objectives themselves (`dp.squared_error`, `dp.poisson_deviance` in
`dpt_ir.api.imaging`) are composites that expand to primitives; `guard` is how they make
"negative counts" or "negative weights" a `NumericalError` at the checkpoint instead of
a silently wrong loss.
"""

from __future__ import annotations

from typing import Any

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import Derivative, OpDef, register_op
from dpt_ir.ir.rules import Attrs, elementwise_rule
from dpt_ir.ir.types import TensorType


class GuardAttrs(Attrs):
    message: str


def _infer_guard(inputs: tuple[TensorType, ...], attrs: GuardAttrs, where: str) -> TensorType:
    x, ok = inputs
    if ok.dtype != "bool":
        raise ContractError(f"{where}: the condition of guard must be bool, found {ok.dtype}")
    if x.shape != elementwise_rule("any")((x, TensorType(shape=ok.shape, dtype=x.dtype)), attrs, where).shape:
        raise ContractError(f"{where}: the condition's shape {list(ok.shape)} must broadcast to {list(x.shape)}")
    return x


def _guard_ref(attrs: Any, x: Any, ok: Any) -> Any:
    return x


register_op(
    OpDef(
        name="guard",
        kind="elementwise",
        arity=2,
        attrs=GuardAttrs,
        infer=_infer_guard,
        reference=_guard_ref,
        derivative=Derivative({0: lambda c: c.gy}, nondifferentiable=(1,)),
        cxx="{0}",
        cxx_domain="{1}",
        doc="x unchanged; compiled kernels report `message` where the condition is false",
    )
)

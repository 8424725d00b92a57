"""Type rules shared by the op families, and the attribute models they use."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import FLOAT_DTYPES, TensorType, broadcast_shapes

# What dtypes an elementwise op accepts and what it returns:
#   float    - floating inputs, same dtype out (exp, log, pow, ...)
#   numeric  - any non-bool dtype, same dtype out (neg, abs, add, maximum, ...)
#   compare  - any dtype, bool out
#   logical  - bool inputs, bool out
#   any      - any dtype, same dtype out (where's branches)
DTypeRule = Literal["float", "numeric", "compare", "logical", "any"]
RULE_WORDS: dict[str, str] = {
    "float": "float32 or float64",
    "numeric": "a numeric dtype (not bool)",
    "compare": "any dtype",
    "logical": "bool",
    "any": "any dtype",
}


class Attrs(BaseModel):
    """Base of attribute models: frozen, no unknown keys."""

    model_config = ConfigDict(frozen=True, extra="forbid")


def _accepts(rule: DTypeRule, dtype: str) -> bool:
    if rule == "float":
        return dtype in FLOAT_DTYPES
    if rule == "numeric":
        return dtype != "bool"
    if rule == "logical":
        return dtype == "bool"
    return True


def elementwise_rule(rule: DTypeRule) -> Callable[[tuple[TensorType, ...], Any, str], TensorType]:
    """Type rule of an elementwise op: inputs share one dtype and broadcast together."""

    def infer(inputs: tuple[TensorType, ...], attrs: Any, where: str) -> TensorType:
        dtypes = {t.dtype for t in inputs}
        if len(dtypes) > 1:
            found = ", ".join(t.dtype for t in inputs)
            raise ContractError(f"{where}: inputs must share one dtype (the builder inserts casts), found {found}")
        dtype = inputs[0].dtype
        if not _accepts(rule, dtype):
            raise ContractError(f"{where}: expected {RULE_WORDS[rule]} inputs, found {dtype}")
        shape = broadcast_shapes(*(t.shape for t in inputs), where=where)
        out = "bool" if rule in ("compare", "logical") else dtype
        return TensorType(shape=shape, dtype=out)  # type: ignore[arg-type]

    return infer


def check_axes(axes: tuple[int, ...], ndim: int, where: str) -> None:
    """Canonical axes: sorted, unique, each in [0, ndim)."""
    if list(axes) != sorted(set(axes)):
        raise ContractError(f"{where}: axes must be sorted and unique, found {list(axes)}")
    for a in axes:
        if not 0 <= a < ndim:
            raise ContractError(
                f"{where}: axis {a} is out of range for a tensor of rank {ndim} (expected 0 <= axis < {ndim})"
            )


def reduced_shape(shape: tuple[int, ...], axes: tuple[int, ...], keepdims: bool) -> tuple[int, ...]:
    if keepdims:
        return tuple(1 if i in axes else d for i, d in enumerate(shape))
    return tuple(d for i, d in enumerate(shape) if i not in axes)

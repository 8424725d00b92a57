"""Dtypes, tensor types, broadcasting and type promotion.

Promotion follows NumPy 2 (NEP 50) restricted to the dtypes dpt_ir supports:
tensor-with-tensor promotion is NumPy's ``result_type``; a Python scalar is *weak* and
takes the tensor's dtype unless its kind is higher (a float scalar with an integer
tensor gives float64, an int scalar with a bool tensor gives int32, where NumPy would
give int64, which dpt_ir does not support).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any, Literal, Self

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError, field_validator

from dpt_ir.ir.errors import ContractError

DType = Literal["float32", "float64", "int32", "uint8", "bool"]
DTYPES: tuple[str, ...] = ("bool", "uint8", "int32", "float32", "float64")
FLOAT_DTYPES: tuple[str, ...] = ("float32", "float64")
INT_DTYPES: tuple[str, ...] = ("uint8", "int32")
SHORT_NAMES: dict[str, str] = {
    "float32": "f32",
    "float64": "f64",
    "int32": "i32",
    "uint8": "u8",
    "bool": "bool",
}
FROM_SHORT: dict[str, str] = {v: k for k, v in SHORT_NAMES.items()}
Scalar = bool | int | float


def check_dtype(dtype: object, where: str) -> str:
    """Return ``dtype`` as a canonical dtype name, or raise ContractError naming ``where``."""
    if isinstance(dtype, str) and dtype in FROM_SHORT:
        return FROM_SHORT[dtype]
    if isinstance(dtype, str) and dtype in DTYPES:
        return dtype
    try:
        name = np.dtype(dtype).name  # type: ignore[arg-type]
    except TypeError:
        name = repr(dtype)
    if name in DTYPES:
        return name
    raise ContractError(f"{where}: unsupported dtype {name!r}; expected one of {', '.join(DTYPES)}")


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def numpy_dtype(dtype: str) -> np.dtype:
    return np.dtype(dtype)


def promote(a: str, b: str) -> str:
    """NumPy's result type of two tensor dtypes (closed over the supported set)."""
    return np.result_type(np.dtype(a), np.dtype(b)).name


def promote_scalar(tensor_dtype: str, value: Scalar) -> str:
    """Result dtype of a tensor of ``tensor_dtype`` combined with a weak Python scalar."""
    if isinstance(value, bool):
        return tensor_dtype
    if isinstance(value, int):
        return "int32" if tensor_dtype == "bool" else tensor_dtype
    if isinstance(value, float):
        return tensor_dtype if is_float(tensor_dtype) else "float64"
    raise ContractError(f"expected a Python bool, int or float constant, found {type(value)!r}")


def scalar_dtype(value: Scalar) -> str:
    """Default dtype of a Python scalar standing alone (no tensor to take it from)."""
    if isinstance(value, bool):
        return "bool"
    if isinstance(value, int):
        return "int32"
    return "float64"


def describe_validation_error(exc: ValidationError, what: str) -> str:
    """A pydantic error as one line per problem: where, what was expected, what was found."""
    lines = []
    for e in exc.errors():
        loc = "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in e["loc"]).lstrip(".")
        lines.append(f"{loc or 'document'}: {e['msg']} (found {e.get('input')!r})")
    return f"invalid {what}: " + "; ".join(lines)


class FrozenModel(BaseModel):
    """Base of the IR's frozen models: constructing one with bad fields, or assigning to a
    field of one, raises ContractError (never a pydantic error)."""

    model_config = ConfigDict(frozen=True, extra="forbid")

    def __init__(self, **data: Any) -> None:
        try:
            super().__init__(**data)
        except ValidationError as exc:
            raise ContractError(describe_validation_error(exc, type(self).__name__)) from None

    # Tell pydantic this __init__ only wraps the base one, so validating a whole document
    # does not call it per nested model and error locations stay document paths.
    __init__.__pydantic_base_init__ = True  # type: ignore[attr-defined]

    def __setattr__(self, name: str, value: Any) -> None:
        raise ContractError(
            f"{self._label()}: is frozen, cannot assign {name!r}; expected a new object "
            "(with_(...), or Graph.replace)"
        )

    def __delattr__(self, name: str) -> None:
        raise ContractError(f"{self._label()}: is frozen, cannot delete {name!r}")

    def with_(self, **changes: Any) -> Self:
        """This model with ``changes`` (field name -> value), validated as a new model (never
        an unchecked copy): a bad field raises ContractError."""
        return type(self)(**{**dict(self), **changes})

    def _label(self) -> str:
        name = self.__dict__.get("name")
        return type(self).__name__ + (f" {name!r}" if name is not None else "")


class TensorType(FrozenModel):
    """Static type of a value: a shape (tuple of non-negative ints) and a dtype."""

    shape: tuple[int, ...]
    dtype: DType

    @field_validator("shape")
    @classmethod
    def _non_negative(cls, shape: tuple[int, ...]) -> tuple[int, ...]:
        for d in shape:
            if d < 0:
                raise ValueError(f"negative dimension {d} in shape {list(shape)}")
        return shape

    @property
    def ndim(self) -> int:
        return len(self.shape)

    @property
    def size(self) -> int:
        return math.prod(self.shape)

    @property
    def nbytes(self) -> int:
        return self.size * np.dtype(self.dtype).itemsize

    def short(self) -> str:
        """``f32[512,512]``: the spelling used by the textual IR."""
        return f"{SHORT_NAMES[self.dtype]}[{','.join(str(d) for d in self.shape)}]"

    def __str__(self) -> str:
        return self.short()


def make_type(shape: Sequence[int], dtype: object, where: str) -> TensorType:
    """Build a TensorType, turning every problem into a ContractError naming ``where``."""
    try:
        dims = tuple(int(d) for d in shape)
    except (TypeError, ValueError):
        raise ContractError(f"{where}: shape must be a sequence of ints, found {shape!r}") from None
    for d, orig in zip(dims, shape, strict=True):
        if isinstance(orig, bool) or not isinstance(orig, int | np.integer):
            raise ContractError(f"{where}: shape must hold ints, found {orig!r} in {shape!r}")
        if d < 0:
            raise ContractError(f"{where}: dimensions must be non-negative, found {d} in shape {list(dims)}")
    return TensorType(shape=dims, dtype=check_dtype(dtype, where))  # type: ignore[arg-type]


def broadcast_shapes(*shapes: tuple[int, ...], where: str = "broadcast") -> tuple[int, ...]:
    """NumPy broadcasting of ``shapes``; ContractError naming ``where`` when they do not fit."""
    ndim = max((len(s) for s in shapes), default=0)
    out: list[int] = []
    for i in range(ndim):
        dims = {s[len(s) - ndim + i] for s in shapes if len(s) - ndim + i >= 0}
        dims.discard(1)
        if len(dims) > 1:
            pretty = " and ".join(str(list(s)) for s in shapes)
            raise ContractError(
                f"{where}: shapes {pretty} do not broadcast (axis {i - ndim} has sizes "
                f"{sorted(dims)}; expected equal sizes or 1)"
            )
        out.append(dims.pop() if dims else 1)
    return tuple(out)


def normalize_axis(axis: int, ndim: int, where: str) -> int:
    """A single axis in ``[-ndim, ndim)`` as a non-negative int."""
    if isinstance(axis, bool) or not isinstance(axis, int | np.integer):
        raise ContractError(f"{where}: axis must be an int, found {axis!r}")
    if ndim == 0:
        raise ContractError(f"{where}: axis {axis} is out of range: a rank-0 tensor has no axes")
    if not -ndim <= axis < ndim:
        raise ContractError(
            f"{where}: axis {axis} is out of range for a tensor of rank {ndim} (expected -{ndim} <= axis < {ndim})"
        )
    return int(axis) % ndim


def normalize_axes(axis: int | Sequence[int] | None, ndim: int, where: str) -> tuple[int, ...]:
    """NumPy's ``axis=`` argument (None, int or tuple) as sorted unique non-negative axes."""
    if axis is None:
        return tuple(range(ndim))
    if isinstance(axis, int | np.integer):
        axes = [axis]
    elif isinstance(axis, Sequence) and not isinstance(axis, str):
        axes = list(axis)
    else:
        raise ContractError(f"{where}: axis must be None, an int or a sequence of ints, found {axis!r}")
    norm = [normalize_axis(a, ndim, where) for a in axes]
    if len(set(norm)) != len(norm):
        raise ContractError(f"{where}: repeated axis in {list(axes)}")
    return tuple(sorted(norm))

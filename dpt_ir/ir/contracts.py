"""The one front door: how a value a user passes as a graph input (or a seed) is checked.

`dp.interpret`, `dp.interpret_grad` and every compiled entry point (`Program.run`,
`value_and_grad`, `tp.forward`, `tp.backward`, through `ExecutionPlan.bind`) call these
functions, so a value is accepted by all of them or refused by all of them with the same
`ContractError` text (naming the input, what was expected and what was found).

Accepted kinds, for an input declared ``T[shape]`` (``what`` is "input" or "seed"):

- **NumPy array (or NumPy scalar) of dtype T** and shape ``shape``: used as is.
- **NumPy array of dtype T, strided or Fortran-ordered**: accepted, copied to a
  C-contiguous array first (one copy per call; pass C-contiguous arrays to avoid it).
- **NumPy array of another dtype**: refused (no silent casts): ``expected dtype T, found D``.
- **Any other object with a dtype** (``__array__``: a torch CPU tensor, a JAX array):
  converted with ``np.asarray``, then treated as a NumPy array (its dtype must be T).
- **wp.array of dtype T, contiguous**, of shape ``shape`` (a 0-d input also takes shape
  ``(1,)``): compiled programs bind it by reference, never copied, and it must be on the
  program's device; the interpreter reads it back to the host, from any device.
- **wp.array, strided**: refused (``expected a contiguous wp.array``): it is bound by
  reference, and a silent copy would hide that.
- **Python bool, int or float**, for a 0-d input: converted to T if it converts exactly.
- **(Nested) list or tuple of Python numbers**, rectangular, of shape ``shape``: converted
  to T if every element converts exactly.
- **Anything else** (str, None, dict, complex numbers, ragged lists): refused
  (``expected real numbers or bools of dtype T``).

Converting exactly: to an integer or bool dtype, every element must be representable as
is (``1.5`` or ``300`` for uint8 or ``2`` for bool are refused); to a float dtype, an int
must be exactly representable, a float is rounded to nearest (as ``np.float32(0.1)``),
but a finite value that would overflow to infinity is refused. The same rule holds for
seeds, which the runtime passes through `bind` as well.
"""

from __future__ import annotations

import sys
from collections.abc import Mapping
from typing import Any

import numpy as np

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import DTYPES, TensorType

_NP_DTYPES = {name: np.dtype(name) for name in DTYPES}


def check_names(graph: str, values: Mapping[str, Any], names: Mapping[str, Any], what: str = "input") -> None:
    """``values`` holds exactly the keys of ``names``; ContractError listing the missing
    and unexpected ones otherwise."""
    if values.keys() == names.keys():
        return
    missing = [n for n in names if n not in values]
    extra = [n for n in values if n not in names]
    if missing or extra:
        parts = ([f"missing {what}(s) {missing}"] if missing else []) + (
            [f"unexpected {what}(s) {extra}"] if extra else []
        )
        raise ContractError(f"graph {graph!r}: {'; '.join(parts)}; expected exactly {list(names)}")


def is_warp_array(value: Any) -> bool:
    """Whether ``value`` is a `wp.array`, without importing Warp (the interpreter needs none:
    if Warp was never imported, nothing can be a `wp.array`)."""
    warp = sys.modules.get("warp")
    return warp is not None and isinstance(value, warp.array)


def host_array(name: str, value: Any, t: TensorType, what: str = "input") -> np.ndarray:
    """``value`` (anything but a `wp.array`) as a C-contiguous NumPy array of exactly
    ``t``'s shape and dtype, by the table of the module docstring; ContractError otherwise."""
    if (
        type(value) is np.ndarray
        and value.shape == t.shape
        and value.dtype == _NP_DTYPES[t.dtype]
        and value.flags.c_contiguous
    ):
        return value  # the common case, which the checks below return as is
    python = _is_python(value)
    try:
        arr = value if isinstance(value, np.ndarray) else np.asarray(value)
    except ValueError:  # numpy refuses ragged nested sequences
        raise ContractError(
            f"{what} {name!r}: expected a rectangular array of shape {list(t.shape)}, "
            f"found a ragged {type(value).__name__}"
        ) from None
    if arr.dtype.kind not in "biuf":
        raise ContractError(
            f"{what} {name!r}: expected real numbers or bools of dtype {t.dtype} (a NumPy array, a wp.array or "
            f"Python numbers), found {type(value).__name__} of dtype {arr.dtype}"
        )
    if arr.shape != t.shape:
        raise ContractError(f"{what} {name!r}: expected shape {list(t.shape)}, found {list(arr.shape)}")
    if arr.dtype != np.dtype(t.dtype):
        if not python:
            raise ContractError(f"{what} {name!r}: expected dtype {t.dtype}, found {arr.dtype}")
        arr = _convert_exactly(name, arr, t.dtype, what)
    # Not np.ascontiguousarray: it turns a 0-d array into shape (1,).
    return arr if arr.flags.c_contiguous else arr.copy(order="C")


def check_warp_array(name: str, value: Any, t: TensorType, what: str = "input", device: str | None = None) -> None:
    """A `wp.array` for ``t``: its shape (``(1,)`` also for a 0-d input), dtype, contiguity
    and, when ``device`` is given, its device; ContractError otherwise."""
    shape = tuple(value.shape)
    if shape != t.shape and not (t.shape == () and shape == (1,)):
        raise ContractError(f"{what} {name!r}: expected shape {list(t.shape)}, found {list(shape)}")
    if value.dtype is not getattr(sys.modules["warp"], t.dtype):
        found = getattr(value.dtype, "__name__", str(value.dtype))
        raise ContractError(f"{what} {name!r}: expected dtype {t.dtype}, found wp.array of {found}")
    if device is not None and str(value.device) != device:
        raise ContractError(f"{what} {name!r}: expected an array on {device}, found one on {value.device}")
    if not value.is_contiguous:
        raise ContractError(f"{what} {name!r}: expected a contiguous wp.array, found strides {value.strides}")


def _is_python(value: Any) -> bool:
    """A Python number or a (nested) list/tuple: values with no dtype of their own."""
    if isinstance(value, np.generic):  # np.float64 subclasses float, but has a dtype
        return False
    return isinstance(value, bool | int | float | list | tuple)


def _convert_exactly(name: str, arr: np.ndarray, dtype: str, what: str) -> np.ndarray:
    """``arr`` (converted from Python numbers) as ``dtype``, refusing any change of value
    except float rounding to nearest; see the module docstring."""
    with np.errstate(all="ignore"):
        converted = arr.astype(dtype)
    if np.dtype(dtype).kind == "f" and arr.dtype.kind == "f":
        lost = np.isfinite(arr) & ~np.isfinite(converted)
    else:
        lost = converted.astype(arr.dtype) != arr
    if np.any(lost):
        bad = arr.reshape(-1)[np.flatnonzero(lost.reshape(-1))[0]].item()
        raise ContractError(
            f"{what} {name!r}: expected values representable as {dtype} exactly, found {bad!r} "
            "(convert it yourself if the change is intended)"
        )
    return converted


def check_inputs(graph: Any, inputs: Mapping[str, Any]) -> dict[str, np.ndarray]:
    """The interpreter's inputs: exactly ``graph``'s declared inputs, each as a host NumPy
    array of its declared type (a `wp.array` is checked as for a compiled program, on any
    device, and read back); ContractError naming the input otherwise."""
    declared = {i.name: i.type for i in graph.inputs}
    check_names(graph.name, inputs, declared)
    out = {}
    for name, t in declared.items():
        value = inputs[name]
        if is_warp_array(value):
            check_warp_array(name, value, t)
            out[name] = value.numpy().reshape(t.shape)
        else:
            out[name] = host_array(name, value, t)
    return out

"""The ``dp.*`` functions, with NumPy's names and signatures, and `Tensor`'s operators.

Each function normalises its arguments (Python scalars become constants of the weakly
promoted dtype, mixed dtypes get explicit casts, NumPy ``axis=`` becomes canonical
``axes``) and emits one node of the op table.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import numpy as np

from dpt_ir.ir.builder import GraphBuilder, Tensor, innermost, op_site
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.rules import reduced_shape
from dpt_ir.ir.types import (
    Scalar,
    check_dtype,
    is_float,
    normalize_axes,
    normalize_axis,
    promote,
    promote_scalar,
    scalar_dtype,
)

TensorLike = Tensor | Scalar


def builder_of(args: Sequence[object], where: str) -> GraphBuilder:
    builders = {id(a.builder): a.builder for a in args if isinstance(a, Tensor)}
    if not builders:
        raise ContractError(f"{where}: expected at least one dp tensor argument, found only constants")
    if len(builders) > 1:
        inner = innermost(builders.values())
        if inner is not None:  # a loop body reading tensors of the graphs around it
            return inner
        names = sorted(b.name for b in builders.values())
        raise ContractError(f"{where}: tensors from different graph builders {names} cannot mix")
    return next(iter(builders.values()))


def _is_scalar(x: object) -> bool:
    return isinstance(x, bool | int | float | np.generic) and np.ndim(x) == 0


def _py(x: Any) -> Scalar:
    return x.item() if isinstance(x, np.generic) else x


def _check_operand(x: object, where: str) -> None:
    if not isinstance(x, Tensor) and not _is_scalar(x):
        raise ContractError(
            f"{where}: expected a dp tensor or a Python scalar, found {type(x).__name__}"
            " (declare arrays as graph inputs)"
        )


def lift(args: Sequence[TensorLike], where: str, dtype: str | None = None) -> list[Tensor]:
    """Turn scalars into constants and cast tensors to one common dtype (NumPy 2 rules),
    or to ``dtype`` when given."""
    for a in args:
        _check_operand(a, where)
    b = builder_of(args, where)
    tensors = [a for a in args if isinstance(a, Tensor)]
    if dtype is None:
        dtype = tensors[0].dtype
        for t in tensors[1:]:
            dtype = promote(dtype, t.dtype)
        for s in args:
            if not isinstance(s, Tensor):
                dtype = promote_scalar(dtype, _py(s))
    out = []
    for a in args:
        if isinstance(a, Tensor):
            out.append(a if a.dtype == dtype else cast(a, dtype))
        else:
            out.append(b.constant(coerce_scalar(_py(a), dtype), dtype))
    return out


def coerce_scalar(value: Scalar, dtype: str) -> Scalar:
    if dtype == "bool":
        return bool(value)
    if is_float(dtype):
        return float(value)
    if float(value) != int(value):
        raise ContractError(f"constant {value!r} cannot be represented as {dtype} exactly")
    return int(value)


def apply(op: str, *args: TensorLike, **attrs: Any) -> Tensor:
    """Emit ``op`` on ``args`` after lifting and promoting them to one dtype."""
    tensors = lift(args, f"op {op!r}")
    return builder_of(tensors, f"op {op!r}").emit(op, tensors, attrs)


def _unary(op: str, doc: str) -> Any:
    def f(x: Tensor) -> Tensor:
        return apply(op, x)

    f.__name__ = op
    f.__doc__ = doc
    return f


def _binary(op: str, doc: str) -> Any:
    def f(a: TensorLike, b: TensorLike) -> Tensor:
        return apply(op, a, b)

    f.__name__ = op
    f.__doc__ = doc
    return f


negative = neg = _unary("neg", "Elementwise -x.")
absolute = abs = _unary("abs", "Elementwise |x|.")
exp = _unary("exp", "Elementwise e**x.")
log = _unary("log", "Natural logarithm.")
log1p = _unary("log1p", "log(1 + x), accurate near 0.")
expm1 = _unary("expm1", "exp(x) - 1, accurate near 0.")
sqrt = _unary("sqrt", "Square root.")
rsqrt = _unary("rsqrt", "1 / sqrt(x).")
square = _unary("square", "x * x.")
reciprocal = _unary("reciprocal", "1 / x.")
sin = _unary("sin", "Sine.")
cos = _unary("cos", "Cosine.")
tanh = _unary("tanh", "Hyperbolic tangent.")
sigmoid = _unary("sigmoid", "1 / (1 + exp(-x)).")
relu = _unary("relu", "max(x, 0).")
softplus = _unary("softplus", "log(1 + exp(x)), computed stably.")
erf = _unary("erf", "The error function.")
sign = _unary("sign", "-1, 0 or 1 (not differentiable).")
floor = _unary("floor", "Round down (not differentiable).")
ceil = _unary("ceil", "Round up (not differentiable).")
stop_gradient = _unary("stop_gradient", "x unchanged, passing no derivative: zero gradient, tangent and Hessian.")

add = _binary("add", "a + b.")
subtract = sub = _binary("sub", "a - b.")
multiply = mul = _binary("mul", "a * b.")
power = pow = _binary("pow", "a ** b (floating).")
maximum = _binary("maximum", "Elementwise maximum; a tie sends the gradient to a.")
minimum = _binary("minimum", "Elementwise minimum; a tie sends the gradient to a.")
arctan2 = atan2 = _binary("atan2", "atan2(a, b), the angle of the point (b, a).")
less = lt = _binary("lt", "a < b.")
less_equal = le = _binary("le", "a <= b.")
greater = gt = _binary("gt", "a > b.")
greater_equal = ge = _binary("ge", "a >= b.")
equal = eq = _binary("eq", "a == b.")
not_equal = ne = _binary("ne", "a != b.")
logical_and = _binary("logical_and", "a and b, on bool tensors.")
logical_or = _binary("logical_or", "a or b, on bool tensors.")
logical_not = _unary("logical_not", "not a, on a bool tensor.")


def divide(a: TensorLike, b: TensorLike) -> Tensor:
    """True division a / b; integer operands are promoted to float64 as in NumPy."""
    tensors = lift([a, b], "op 'div'")
    if not is_float(tensors[0].dtype):
        tensors = [cast(t, "float64") for t in tensors]
    return builder_of(tensors, "op 'div'").emit("div", tensors)


div = true_divide = divide


def where(condition: TensorLike, x: TensorLike, y: TensorLike) -> Tensor:
    """``x`` where ``condition`` is true, else ``y`` (condition must be bool)."""
    where_ = "op 'where'"
    for a in (condition, x, y):
        _check_operand(a, where_)
    b = builder_of([condition, x, y], where_)
    cond = condition if isinstance(condition, Tensor) else b.constant(bool(_py(condition)), "bool")
    if cond.dtype != "bool":
        raise ContractError(
            f"{where_}: condition %{cond.name} must be bool, found {cond.dtype} (compare it, e.g. dp.where(c > 0, ...))"
        )
    if isinstance(x, Tensor) or isinstance(y, Tensor):
        branches = lift([x, y], where_)
    else:
        dtype = promote_scalar(scalar_dtype(_py(x)), _py(y))
        branches = [b.constant(coerce_scalar(_py(v), dtype), dtype) for v in (x, y)]
    return b.emit("where", [cond, *branches])


def clamp(x: Tensor, lo: TensorLike | None = None, hi: TensorLike | None = None) -> Tensor:
    """Limit ``x`` to [lo, hi]; scalar bounds are attributes, tensor bounds compose
    maximum/minimum. The gradient passes where lo <= x <= hi."""
    if lo is None and hi is None:
        raise ContractError("op 'clamp': give at least one of lo and hi")
    if isinstance(lo, Tensor) or isinstance(hi, Tensor):
        out = x
        if lo is not None:
            out = maximum(out, lo)
        if hi is not None:
            out = minimum(out, hi)
        return out
    (t,) = lift([x], "op 'clamp'")
    return t.builder.emit("clamp", [t], {"lo": _bound(lo), "hi": _bound(hi)})


def _bound(v: object) -> float | None:
    if v is None:
        return None
    if not _is_scalar(v):
        raise ContractError(f"op 'clamp': bounds must be scalars or tensors, found {type(v).__name__}")
    return float(_py(v))  # type: ignore[arg-type]


clip = clamp


def cast(x: Tensor, dtype: object) -> Tensor:
    """Convert ``x`` to ``dtype`` (float to int truncates toward zero, as NumPy)."""
    name = check_dtype(dtype, "op 'cast'")
    if not isinstance(x, Tensor):
        raise ContractError(f"op 'cast': expected a dp tensor, found {type(x).__name__}")
    if x.dtype == name:
        return x
    return x.builder.emit("cast", [x], {"dtype": name})


astype = cast


# -- reductions --------------------------------------------------------------------
def _reduce(op: str, x: Tensor, axis: Any, keepdims: bool) -> Tensor:
    (x,) = lift([x], f"op {op!r}")
    where = op_site(op, [x])
    axes = normalize_axes(axis, x.ndim, where)
    return x.builder.emit(op, [x], {"axes": list(axes), "keepdims": bool(keepdims)})


def sum(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Sum over ``axis`` (None: all axes)."""
    return _reduce("sum", x, axis, keepdims)


def mean(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """Mean over ``axis``; its backward saves only the element count."""
    return _reduce("mean", x, axis, keepdims)


def max(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Maximum over ``axis``; the gradient goes to the first maximal element."""
    return _reduce("max", x, axis, keepdims)


def min(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:  # noqa: A001
    """Minimum over ``axis``; the gradient goes to the first minimal element."""
    return _reduce("min", x, axis, keepdims)


amax, amin = max, min


def logsumexp(x: Tensor, axis: Any = None, keepdims: bool = False) -> Tensor:
    """log(sum(exp(x))) over ``axis``, computed stably."""
    return _reduce("logsumexp", x, axis, keepdims)


def argmax(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int32) of the first maximum along ``axis``, or in the flattened array."""
    return _arg("argmax", x, axis, keepdims)


def argmin(x: Tensor, axis: int | None = None, keepdims: bool = False) -> Tensor:
    """Index (int32) of the first minimum along ``axis``, or in the flattened array."""
    return _arg("argmin", x, axis, keepdims)


def _arg(op: str, x: Tensor, axis: int | None, keepdims: bool) -> Tensor:
    (x,) = lift([x], f"op {op!r}")
    where = op_site(op, [x])
    if axis is None and keepdims:
        return _reduce(op, x, None, True)
    if axis is None:
        return _reduce(op, x, None, False)
    return _reduce(op, x, normalize_axis(axis, x.ndim, where), keepdims)


# -- shape ops ---------------------------------------------------------------------
def _shape_arg(shape: Any, where: str) -> list[int]:
    if isinstance(shape, int | np.integer):
        shape = (shape,)
    if isinstance(shape, np.ndarray) and shape.ndim == 1:
        shape = tuple(shape)
    if not isinstance(shape, Sequence) or isinstance(shape, str):
        raise ContractError(f"{where}: shape must be a sequence of ints, found {shape!r}")
    for d in shape:
        if isinstance(d, bool) or not isinstance(d, int | np.integer):
            raise ContractError(f"{where}: shape must hold ints, found {d!r} in {shape!r}")
    return [int(d) for d in shape]


def broadcast_to(x: TensorLike, shape: Sequence[int]) -> Tensor:
    """Broadcast ``x`` to ``shape`` (NumPy rules)."""
    (t,) = lift([x], "op 'broadcast_to'")
    dims = _shape_arg(shape, op_site("broadcast_to", [t]))
    if tuple(dims) == t.shape:
        return t
    return t.builder.emit("broadcast_to", [t], {"shape": dims})


def reshape(x: Tensor, shape: Any) -> Tensor:
    """Reshape (row-major); one dimension may be -1."""
    (t,) = lift([x], "op 'reshape'")
    where = op_site("reshape", [t])
    dims = _shape_arg(shape, where)
    if dims.count(-1) > 1:
        raise ContractError(f"{where}: at most one -1 in shape {dims}")
    if -1 in dims:
        known = math.prod(d for d in dims if d != -1)
        if known == 0 or t.size % known:
            raise ContractError(
                f"{where}: cannot reshape %{t.name} of shape {list(t.shape)} ({t.size} elements) into {dims}"
            )
        dims[dims.index(-1)] = t.size // known
    if tuple(dims) == t.shape:
        return t
    return t.builder.emit("reshape", [t], {"shape": dims})


def expand_dims(x: Tensor, axis: int | Sequence[int]) -> Tensor:
    """Insert size-1 axes at ``axis`` (positions in the result)."""
    (t,) = lift([x], "op 'expand_dims'")
    where = op_site("expand_dims", [t])
    n = len(axis) if isinstance(axis, Sequence) else 1
    axes = normalize_axes(axis, t.ndim + n, where)
    return t.builder.emit("expand_dims", [t], {"axes": list(axes)})


def squeeze(x: Tensor, axis: int | Sequence[int] | None = None) -> Tensor:
    """Remove size-1 axes (all of them when ``axis`` is None)."""
    (t,) = lift([x], "op 'squeeze'")
    where = op_site("squeeze", [t])
    if axis is None:
        axes: tuple[int, ...] = tuple(i for i, d in enumerate(t.shape) if d == 1)
    else:
        axes = normalize_axes(axis, t.ndim, where)
    if not axes:
        return t
    return t.builder.emit("squeeze", [t], {"axes": list(axes)})


def transpose(x: Tensor, axes: Sequence[int] | None = None) -> Tensor:
    """Permute axes (reverse them when ``axes`` is None)."""
    (t,) = lift([x], "op 'transpose'")
    where = op_site("transpose", [t])
    perm = list(range(t.ndim))[::-1] if axes is None else [normalize_axis(a, t.ndim, where) for a in axes]
    if perm == list(range(t.ndim)):
        return t
    return t.builder.emit("transpose", [t], {"axes": perm})


def concatenate(arrays: Sequence[Tensor], axis: int = 0) -> Tensor:
    """Join tensors along an existing ``axis``."""
    where = "op 'concat'"
    if not isinstance(arrays, Sequence) or not arrays:
        raise ContractError(f"{where}: expected a non-empty sequence of tensors, found {arrays!r}")
    tensors = lift(list(arrays), where)
    ax = normalize_axis(axis, tensors[0].ndim, op_site("concat", tensors))
    if len(tensors) == 1:
        return tensors[0]
    return builder_of(tensors, where).emit("concat", tensors, {"axis": ax})


concat = concatenate


def getitem(x: Tensor, index: Any) -> Tensor:
    """NumPy basic indexing: ints, slices (any non-zero step), None and Ellipsis.
    ``Tensor.__getitem__`` is `dpt_ir.api.gather.getitem`, which adds integer index arrays
    (tensors, integer arrays or lists) and hands the rest to this function."""
    where = f"indexing %{x.name}"
    items = list(index) if isinstance(index, tuple) else [index]
    for it in items:
        if not (
            it is None
            or it is Ellipsis
            or isinstance(it, slice)
            or (isinstance(it, int | np.integer) and not isinstance(it, bool))
        ):
            raise ContractError(f"{where}: only ints, slices, None and ... are supported, found {it!r}")
    if items.count(Ellipsis) > 1:
        raise ContractError(f"{where}: an index can only have a single ellipsis ('...')")
    n_real = len([it for it in items if it is not None and it is not Ellipsis])
    if n_real > x.ndim:
        raise ContractError(f"{where}: too many indices ({n_real}) for a tensor of rank {x.ndim}")
    if Ellipsis in items:
        k = items.index(Ellipsis)
        items[k : k + 1] = [slice(None)] * (x.ndim - n_real)
    return _apply_index(x, items, where)


def _check_slice(s: slice, where: str) -> None:
    for part in (s.start, s.stop, s.step):
        if part is not None and (isinstance(part, bool) or not isinstance(part, int | np.integer)):
            raise ContractError(f"{where}: slice bounds and steps must be ints or None, found {s!r}")
    if s.step == 0:
        raise ContractError(f"{where}: slice step cannot be zero, found {s!r}")


def _iterate(x: Tensor) -> Any:
    """Iterate over the first axis, as NumPy does: yields ``x[0]``, ``x[1]``, ..."""
    return (x[i] for i in range(len(x)))


def _length(x: Tensor) -> int:
    """Size of the first axis, as NumPy's ``len``; a rank-0 tensor has none."""
    if x.ndim == 0:
        raise ContractError(f"tensor %{x.name}: len() of a rank-0 tensor (expected rank >= 1)")
    return x.shape[0]


def _apply_index(x: Tensor, items: list[Any], where: str) -> Tensor:
    starts, stops, steps, squeeze_axes, new_axes = [], [], [], [], []
    dim = 0
    out_pos = 0
    for it in items:
        if it is None:
            new_axes.append(out_pos)
            out_pos += 1
            continue
        if dim >= x.ndim:
            break
        size = x.shape[dim]
        if isinstance(it, slice):
            _check_slice(it, where)
            start, stop, step = it.indices(size)
            starts.append(start), stops.append(stop), steps.append(step)
        else:
            i = int(it)
            if not -size <= i < size:
                raise ContractError(f"{where}: index {i} is out of bounds for axis {dim} with size {size}")
            i %= size
            starts.append(i), stops.append(i + 1), steps.append(1)
            squeeze_axes.append(dim)
        dim += 1
        out_pos += 0 if not isinstance(it, slice) else 1
    while dim < x.ndim:
        starts.append(0), stops.append(x.shape[dim]), steps.append(1)
        dim += 1
    out = x
    if (starts, stops, steps) != ([0] * x.ndim, list(x.shape), [1] * x.ndim):
        out = x.builder.emit("slice", [x], {"starts": starts, "stops": stops, "steps": steps})
    if squeeze_axes:
        out = out.builder.emit("squeeze", [out], {"axes": squeeze_axes})
    if new_axes:
        out = out.builder.emit("expand_dims", [out], {"axes": new_axes})
    return out


# -- helpers used by derivative formulas ---------------------------------------------
def sum_to(x: Tensor, shape: tuple[int, ...]) -> Tensor:
    """Sum ``x`` over the axes along which ``shape`` was broadcast to ``x.shape``.

    Axes of length 1 are not summed but reshaped away (a leading batch axis of one shot):
    a sum over them adds one term, so the reshape has the same values (``-0.0`` kept, as
    NumPy's) and stays a view that fuses, where a reduction would be a kernel boundary."""
    if x.shape == tuple(shape):
        return x
    lead = x.ndim - len(shape)
    axes = [i for i in range(x.ndim) if x.shape[i] != 1 and (i < lead or shape[i - lead] == 1)]
    out = sum(x, axis=tuple(axes), keepdims=True) if axes else x
    return reshape(out, shape)


def unreduce(g: Tensor, shape: tuple[int, ...], axes: Sequence[int], keepdims: bool) -> Tensor:
    """Broadcast a reduction's cotangent ``g`` back to the reduced input's ``shape``."""
    if not keepdims:
        g = reshape(g, reduced_shape(tuple(shape), tuple(axes), True))
    return broadcast_to(g, shape)


def iota(builder: GraphBuilder, shape: Sequence[int], axes: Sequence[int]) -> Tensor:
    """Each element's row-major index within the sub-array spanned by ``axes`` (int32)."""
    return builder.emit("iota", [], {"shape": list(shape), "axes": list(axes)})


def zeros_like(x: Tensor) -> Tensor:
    return x.builder.constant(coerce_scalar(0, x.dtype), x.dtype, x.shape)


# -- Tensor operators ------------------------------------------------------------------
def _bind_operators() -> None:
    def rev(f: Any) -> Any:
        return lambda a, b: f(b, a)

    ops: dict[str, Any] = {
        "__add__": add,
        "__radd__": rev(add),
        "__sub__": subtract,
        "__rsub__": rev(subtract),
        "__mul__": multiply,
        "__rmul__": rev(multiply),
        "__truediv__": divide,
        "__rtruediv__": rev(divide),
        "__pow__": power,
        "__rpow__": rev(power),
        "__neg__": negative,
        "__abs__": absolute,
        "__pos__": lambda a: a,
        "__lt__": less,
        "__le__": less_equal,
        "__gt__": greater,
        "__ge__": greater_equal,
        "__eq__": equal,
        "__ne__": not_equal,
        "__and__": logical_and,
        "__rand__": rev(logical_and),
        "__or__": logical_or,
        "__ror__": rev(logical_or),
        "__invert__": logical_not,
        "__iter__": _iterate,
        "__len__": _length,
        "T": property(lambda a: transpose(a)),
        "sum": sum,
        "mean": mean,
        "max": max,
        "min": min,
        "reshape": lambda a, *shape: reshape(a, shape[0] if len(shape) == 1 else shape),
        "transpose": lambda a, *axes: transpose(a, (axes[0] if len(axes) == 1 else axes) or None),
        "astype": cast,
    }
    for name, fn in ops.items():
        setattr(Tensor, name, fn)


_bind_operators()

"""Elementwise ops: unary math, binary arithmetic, comparisons, logic, where, clamp, cast,
and the source ops constant and iota. Gradients of broadcast inputs are summed back to
the input's shape by autodiff, so formulas here work at the output's shape."""

from __future__ import annotations

import math
import operator
from typing import Any

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import CXX_FLOATS, CxxSite, Derivative, GradContext, Linear, OpDef, register_op
from dpt_ir.ir.rules import Attrs, DTypeRule, check_axes, elementwise_rule
from dpt_ir.ir.types import DType, TensorType

_erf = np.frompyfunc(math.erf, 1, 1)

def _softplus(x: np.ndarray) -> np.ndarray:
    return np.maximum(x, 0) + np.log1p(np.exp(-np.abs(x)))


def _sigmoid(x: np.ndarray) -> np.ndarray:
    with np.errstate(over="ignore"):
        return 1.0 / (1.0 + np.exp(-x))


def _unary(
    name: str,
    rule: DTypeRule,
    ref: Any,
    formula: Any = None,
    saved_inputs: tuple[int, ...] = (),
    saved_output: bool = False,
    doc: str = "",
    **traits: Any,
) -> OpDef:
    deriv = None
    if formula is not None:
        deriv = Derivative({0: formula}, saved_inputs=saved_inputs, saved_output=saved_output)
    return register_op(
        OpDef(
            name=name,
            kind="elementwise",
            arity=1,
            infer=elementwise_rule(rule),
            reference=lambda attrs, x: ref(x),
            derivative=deriv,
            doc=doc,
            **traits,
        )
    )


def _abs_cxx(site: CxxSite) -> str:
    # The sign bit cleared for floats (|-0| is +0, as in NumPy); a select for integers.
    (x,), t = site.args, site.out_type
    return f"dp_abs({x})" if t in CXX_FLOATS else f"({x} < ({t})0 ? ({t})-{x} : {x})"


def _x(c: GradContext) -> Any:
    return c.input(0)


_unary("neg", "numeric", np.negative, lambda c: -c.gy, cxx="(-{0})", doc="-x", involution=True, linear=Linear(((0,),)))
_unary(
    "abs",
    "numeric",
    np.abs,
    lambda c: c.gy * F.sign(_x(c)),
    (0,),
    doc="|x|; gradient sign(x), 0 at 0",
    cxx=_abs_cxx,
)
_unary(
    "exp",
    "float",
    np.exp,
    lambda c: c.gy * c.out,
    saved_output=True,
    work=8,
    doc="e ** x",
    cxx="dp_exp({0})",
)
_unary(
    "log",
    "float",
    np.log,
    lambda c: c.gy / _x(c),
    (0,),
    cxx_domain="{0} >= ({T})0",
    work=8,
    doc="natural logarithm (domain x >= 0)",
    cxx="dp_log({0})",
)
_unary(
    "log1p",
    "float",
    np.log1p,
    lambda c: c.gy / (1.0 + _x(c)),
    (0,),
    cxx_domain="{0} >= ({T})-1",
    work=8,
    doc="log(1 + x), accurate near 0 (domain x >= -1)",
    cxx="dp_log1p({0})",
)
_unary(
    "expm1",
    "float",
    np.expm1,
    lambda c: c.gy * (c.out + 1.0),
    saved_output=True,
    work=8,
    doc="exp(x) - 1, accurate near 0",
    cxx="dp_expm1({0})",
)
_unary(
    "sqrt",
    "float",
    np.sqrt,
    lambda c: c.gy * 0.5 / c.out,
    saved_output=True,
    cxx_domain="{0} >= ({T})0",
    work=4,
    doc="square root (domain x >= 0)",
    cxx="dp_sqrt({0})",
)
_unary(
    "rsqrt",
    "float",
    lambda x: 1.0 / np.sqrt(x),
    lambda c: c.gy * -0.5 * c.out * c.out * c.out,
    saved_output=True,
    cxx_domain="{0} >= ({T})0",
    work=4,
    doc="1 / sqrt(x) (domain x >= 0)",
    cxx="dp_rsqrt({0})",
)
_unary(
    "square", "numeric", np.square, lambda c: c.gy * 2.0 * _x(c), (0,), doc="x * x", cxx="({0} * {0})"
)
_unary(
    "reciprocal",
    "float",
    np.reciprocal,
    lambda c: -c.gy * c.out * c.out,
    saved_output=True,
    work=4,
    doc="1 / x",
    cxx="(({T})1 / {0})",
)
_unary(
    "sin",
    "float",
    np.sin,
    lambda c: c.gy * F.cos(_x(c)),
    (0,),
    work=8,
    doc="sine",
    cxx="dp_sin_t<P>({0}, big)",
)
_unary(
    "cos",
    "float",
    np.cos,
    lambda c: -c.gy * F.sin(_x(c)),
    (0,),
    work=8,
    doc="cosine",
    cxx="dp_cos_t<P>({0}, big)",
)
_unary(
    "tanh",
    "float",
    np.tanh,
    lambda c: c.gy * (1.0 - c.out * c.out),
    saved_output=True,
    work=8,
    doc="hyperbolic tangent",
    cxx="dp_tanh({0})",
)
_unary(
    "sigmoid",
    "float",
    _sigmoid,
    lambda c: c.gy * c.out * (1.0 - c.out),
    saved_output=True,
    work=8,
    doc="1 / (1 + exp(-x))",
    cxx="dp_sigmoid({0})",
)
_unary(
    "relu",
    "numeric",
    lambda x: np.maximum(x, 0).astype(x.dtype),
    lambda c: F.where(_x(c) > 0, c.gy, 0),
    (0,),
    doc="max(x, 0); gradient 0 at 0",
    cxx="({0} < ({T})0 ? ({T})0 : {0})",
)
_unary(
    "softplus",
    "float",
    _softplus,
    lambda c: c.gy * F.sigmoid(_x(c)),
    (0,),
    work=8,
    doc="log(1 + exp(x)), computed without overflow",
    cxx="dp_softplus({0})",
)
_unary(
    "erf",
    "float",
    lambda x: np.asarray(_erf(x), dtype=x.dtype),  # frompyfunc gives a bare float for 0-d input
    lambda c: c.gy * (2.0 / math.sqrt(math.pi)) * F.exp(-F.square(_x(c))),
    (0,),
    work=8,
    doc="the error function",
    cxx="dp_erf({0})",
)
_unary(
    "sign",
    "numeric",
    np.sign,
    doc="not differentiable",
    cxx="({0} > ({T})0 ? ({T})1 : ({0} < ({T})0 ? ({T})-1 : {0}))",
    piecewise_constant=True,
)
_unary("floor", "float", np.floor, doc="not differentiable", cxx="dp_floor({0})", piecewise_constant=True)
_unary("ceil", "float", np.ceil, doc="not differentiable", cxx="dp_ceil({0})", piecewise_constant=True)
_unary(
    "stop_gradient",
    "numeric",
    np.positive,  # a copy, -0 and NaN kept
    doc="x unchanged; passes no derivative (zero, at every order)",
    cxx="{0}",
    stops_gradient=True,
)
_unary("logical_not", "logical", np.logical_not, involution=True, doc="not a (bool)", cxx="(!{0})")


def _binary(
    name: str,
    rule: DTypeRule,
    ref: Any,
    formulas: dict[int, Any] | None = None,
    saved_inputs: tuple[int, ...] = (),
    saved_output: bool = False,
    doc: str = "",
    **traits: Any,
) -> OpDef:
    deriv = None
    if formulas is not None:
        deriv = Derivative(formulas, saved_inputs=saved_inputs, saved_output=saved_output)
    return register_op(
        OpDef(
            name=name,
            kind="elementwise",
            arity=2,
            infer=elementwise_rule(rule),
            reference=lambda attrs, a, b: ref(a, b),
            derivative=deriv,
            doc=doc,
            **traits,
        )
    )


def _a(c: GradContext) -> Any:
    return c.input(0)


def _b(c: GradContext) -> Any:
    return c.input(1)


def _pow_wrt_base(c: GradContext) -> Any:
    # d/da a**b = b * a**(b - 1), and 0 where b == 0 (PyTorch's convention: a**0 is the
    # constant 1, also at a == 0 where a**-1 is infinite). Reading a**0 there, not 0 * inf,
    # keeps every intermediate finite, so the status check sees no NaN.
    exponent = F.where(_b(c) == 0, 1.0, _b(c))
    return c.gy * _b(c) * F.power(_a(c), exponent - 1.0)


def _pow_wrt_exponent(c: GradContext) -> Any:
    # d/db a**b = a**b * log(a); 0 where a == 0 and b >= 0 (0**b is constant there:
    # PyTorch's convention), read as log(1) so no intermediate is 0 * -inf. A zero base with
    # b < 0 gives a**b * log(a) = inf * -inf = -inf (the one-sided limit, as PyTorch); a
    # negative base gives NaN, as log(a) does.
    base = F.where((_a(c) == 0) & (_b(c) >= 0), 1.0, _a(c))
    return c.gy * c.out * F.log(base)


def _atan2_scale(c: GradContext) -> Any:
    # d atan2(a, b) = (b da - a db) / (a**2 + b**2); at the origin, where the quotient is
    # 0 / 0, the gradient is 0 (PyTorch's convention), read as 1 / 1 times a zero numerator.
    r2 = F.square(_a(c)) + F.square(_b(c))
    return c.gy / F.where(r2 == 0, 1.0, r2)


_binary(
    "add",
    "numeric",
    np.add,
    {0: lambda c: c.gy, 1: lambda c: c.gy},
    identity=0.0,
    commutative=True,
    linear=Linear(((0, 1),)),
    doc="a + b",
    cxx="({0} + {1})",
)
_binary(
    "sub",
    "numeric",
    np.subtract,
    {0: lambda c: c.gy, 1: lambda c: -c.gy},
    identity=0.0,
    linear=Linear(((0, 1),)),
    doc="a - b",
    cxx="({0} - {1})",
)
_binary(
    "mul",
    "numeric",
    np.multiply,
    {0: lambda c: c.gy * _b(c), 1: lambda c: c.gy * _a(c)},
    (0, 1),
    identity=1.0,
    commutative=True,
    linear=Linear(((0,), (1,))),
    doc="a * b",
    cxx="({0} * {1})",
)
_binary(
    "div",
    "float",
    np.divide,
    {0: lambda c: c.gy / _b(c), 1: lambda c: -c.gy * c.out / _b(c)},
    (1,),
    True,
    identity=1.0,
    work=4,
    divides_as=("mul", "reciprocal"),
    linear=Linear(((0,),)),
    doc="true division a / b (floating)",
    cxx="({0} / {1})",
)
_binary(
    "pow",
    "float",
    np.power,
    {0: _pow_wrt_base, 1: _pow_wrt_exponent},
    (0, 1),
    True,
    doc="a ** b; gradient wrt a is 0 where b == 0, wrt b is 0 where a == 0 and b >= 0",
    cxx_domain="{0} >= ({T})0 || {1} == dp_floor({1})",
    identity=1.0,
    work=8,
    cxx="dp_pow({0}, {1})",
)


def _takes_a(cmp: Any) -> Any:
    # Where the forward takes a: a wins or ties, or a is NaN (NaN propagates, as in NumPy;
    # a NaN b loses every comparison, so the forward takes b). The gradient follows the
    # forward's choice, so a NaN result's gradient goes to the NaN operand.
    return lambda c: cmp(_a(c), _b(c)) | (_a(c) != _a(c))


def _extremum_formulas(cmp: Any) -> dict[int, Any]:
    takes_a = _takes_a(cmp)
    return {0: lambda c: F.where(takes_a(c), c.gy, 0), 1: lambda c: F.where(takes_a(c), 0, c.gy)}


_binary(
    "maximum",
    "numeric",
    np.maximum,
    _extremum_formulas(operator.ge),
    (0, 1),
    doc="a tie sends the gradient to a; a NaN result sends it to the NaN operand (a if both)",
    cxx="(({0} >= {1} || {0} != {0}) ? {0} : {1})",
)
_binary(
    "minimum",
    "numeric",
    np.minimum,
    _extremum_formulas(operator.le),
    (0, 1),
    doc="a tie sends the gradient to a; a NaN result sends it to the NaN operand (a if both)",
    cxx="(({0} <= {1} || {0} != {0}) ? {0} : {1})",
)
_binary(
    "atan2",
    "float",
    np.arctan2,
    {0: lambda c: _atan2_scale(c) * _b(c), 1: lambda c: -_atan2_scale(c) * _a(c)},
    (0, 1),
    work=8,
    doc="atan2(a, b), the angle of the point (b, a)",
    cxx="dp_atan2({0}, {1})",
)
for _name, _ref, _sym in [
    ("lt", np.less, "<"),
    ("le", np.less_equal, "<="),
    ("gt", np.greater, ">"),
    ("ge", np.greater_equal, ">="),
    ("eq", np.equal, "=="),
    ("ne", np.not_equal, "!="),
]:
    _binary(_name, "compare", _ref, doc="not differentiable", cxx=f"({{0}} {_sym} {{1}})")
_binary("logical_and", "logical", np.logical_and, doc="a and b (bool)", cxx="({0} && {1})")
_binary("logical_or", "logical", np.logical_or, doc="a or b (bool)", cxx="({0} || {1})")


def _infer_where(inputs: tuple[TensorType, ...], attrs: Any, where: str) -> TensorType:
    cond, a, b = inputs
    if cond.dtype != "bool":
        raise ContractError(f"{where}: condition must be bool, found {cond.dtype}")
    branch = elementwise_rule("any")((a, b), attrs, where)
    shape = elementwise_rule("any")((cond, TensorType(shape=branch.shape, dtype="bool")), attrs, where)
    return TensorType(shape=shape.shape, dtype=branch.dtype)


register_op(
    OpDef(
        name="where",
        kind="elementwise",
        arity=3,
        infer=_infer_where,
        reference=lambda attrs, c, a, b: np.where(c, a, b),
        derivative=Derivative(
            {1: lambda c: F.where(c.input(0), c.gy, 0), 2: lambda c: F.where(c.input(0), 0, c.gy)},
            saved_inputs=(0,),
            nondifferentiable=(0,),
        ),
        linear=Linear(((1, 2),)),
        cxx="({0} ? {1} : {2})",
        doc="x where condition else y; the condition gets no gradient",
    )
)


class ClampAttrs(Attrs):
    lo: float | None = None
    hi: float | None = None


def _clamp_ref(attrs: ClampAttrs, x: np.ndarray) -> np.ndarray:
    out = x
    if attrs.lo is not None:
        out = np.maximum(out, np.asarray(attrs.lo, x.dtype))
    if attrs.hi is not None:
        out = np.minimum(out, np.asarray(attrs.hi, x.dtype))
    return out


def _clamp_grad(c: GradContext) -> Any:
    x, inside = c.input(0), None
    if c.attrs.lo is not None:
        inside = x >= c.attrs.lo
    if c.attrs.hi is not None:
        upper = x <= c.attrs.hi
        inside = upper if inside is None else inside & upper
    return F.where(inside, c.gy, 0)


def _infer_clamp(inputs: tuple[TensorType, ...], attrs: ClampAttrs, where: str) -> TensorType:
    if attrs.lo is None and attrs.hi is None:
        raise ContractError(f"{where}: clamp needs lo or hi, found neither")
    if attrs.lo is not None and attrs.hi is not None and attrs.lo > attrs.hi:
        raise ContractError(f"{where}: clamp expects lo <= hi, found lo={attrs.lo} > hi={attrs.hi}")
    return elementwise_rule("float")(inputs, attrs, where)


def _clamp_cxx(site: CxxSite) -> str:
    (x,), t, out = site.args, site.out_type, site.args[0]
    if site.attrs.hi is not None:
        hi = cxx_literal(float(site.attrs.hi), t)
        out = f"({x} > {hi} ? {hi} : {out})"
    if site.attrs.lo is not None:
        lo = cxx_literal(float(site.attrs.lo), t)
        out = f"({x} < {lo} ? {lo} : {out})"
    return out


register_op(
    OpDef(
        name="clamp",
        kind="elementwise",
        arity=1,
        attrs=ClampAttrs,
        infer=_infer_clamp,
        reference=_clamp_ref,
        cxx=_clamp_cxx,
        derivative=Derivative({0: _clamp_grad}, saved_inputs=(0,)),
        doc="x limited to [lo, hi]; the gradient passes where lo <= x <= hi",
    )
)


class CastAttrs(Attrs):
    dtype: DType


def _cast_cxx(site: CxxSite) -> str:
    (x,), (src,), dst = site.args, site.in_types, site.out_type
    if src == "bool":
        return f"({x} ? ({dst})1 : ({dst})0)"
    if dst == "bool":
        return f"({x} != ({src})0)"
    return f"(({dst}){x})"


register_op(
    OpDef(
        name="cast",
        kind="elementwise",
        arity=1,
        attrs=CastAttrs,
        infer=lambda inputs, attrs, where: TensorType(shape=inputs[0].shape, dtype=attrs.dtype),
        reference=lambda attrs, x: x.astype(attrs.dtype),
        cxx=_cast_cxx,
        derivative=Derivative({0: lambda c: F.cast(c.gy, c.input_type(0).dtype)}),
        linear=Linear(((0,),)),
        doc="dtype conversion; only floating values carry gradients",
    )
)


class ConstantAttrs(Attrs):
    value: bool | int | float
    dtype: DType
    shape: tuple[int, ...] = ()


def cxx_literal(value: bool | int | float, c_type: str) -> str:
    """A typed C++ literal: floats as the float64 hex literal cast to the type (the rounding
    Warp's ``wp.float32(v)`` does), NaN and infinities through dp_math.h (cast to the type)."""
    if c_type == "bool":
        return "true" if value else "false"
    if c_type not in CXX_FLOATS:
        return f"(({c_type}){int(value)})"
    v = float(value)
    cast = "" if c_type == "float" else f"({c_type})"  # dp_nan() and dp_inf() are float
    if math.isnan(v):
        return f"({cast}dp_nan())"
    if math.isinf(v):
        return f"({cast}{'-' if v < 0 else ''}dp_inf())"
    return f"(({c_type}){v.hex()})"


def _infer_constant(inputs: tuple[TensorType, ...], attrs: ConstantAttrs, where: str) -> TensorType:
    if any(d < 0 for d in attrs.shape):
        raise ContractError(f"{where}: negative dimension in constant shape {list(attrs.shape)}")
    v = attrs.value
    ok = {
        "bool": isinstance(v, bool),
        "uint8": isinstance(v, int) and not isinstance(v, bool) and 0 <= v < 256,
        "int32": isinstance(v, int) and not isinstance(v, bool) and -(2**31) <= v < 2**31,
        "float32": isinstance(v, float),
        "float64": isinstance(v, float),
    }
    if not ok[attrs.dtype]:
        raise ContractError(f"{where}: constant value {v!r} does not fit dtype {attrs.dtype}")
    return TensorType(shape=attrs.shape, dtype=attrs.dtype)


register_op(
    OpDef(
        name="constant",
        kind="elementwise",
        arity=0,
        attrs=ConstantAttrs,
        infer=_infer_constant,
        reference=lambda attrs: np.full(attrs.shape, attrs.value, dtype=attrs.dtype),
        constant_value=lambda attrs: attrs.value,
        cxx=lambda site: cxx_literal(site.attrs.value, site.out_type),
        doc="a tensor filled with one value (Python scalars in expressions become these)",
    )
)


class IotaAttrs(Attrs):
    shape: tuple[int, ...]
    axes: tuple[int, ...]


def _infer_iota(inputs: tuple[TensorType, ...], attrs: IotaAttrs, where: str) -> TensorType:
    check_axes(attrs.axes, len(attrs.shape), where)
    return TensorType(shape=attrs.shape, dtype="int32")


def _iota_ref(attrs: IotaAttrs) -> np.ndarray:
    sub = tuple(attrs.shape[a] for a in attrs.axes)
    grids = np.indices(attrs.shape, dtype=np.int64)
    flat = np.zeros(attrs.shape, dtype=np.int64)
    for a, _ in zip(attrs.axes, sub, strict=True):
        flat = flat * attrs.shape[a] + grids[a]
    return flat.astype(np.int32)


def _iota_cxx(site: CxxSite) -> str:
    flat = "0"
    for a in site.attrs.axes:
        flat = f"({flat} * {site.out_shape[a]} + {site.index[a]})"
    return f"((int){flat})"


register_op(
    OpDef(
        name="iota",
        kind="elementwise",
        arity=0,
        attrs=IotaAttrs,
        infer=_infer_iota,
        reference=_iota_ref,
        cxx=_iota_cxx,
        doc="each element's row-major index within the sub-array spanned by axes (int32)",
    )
)

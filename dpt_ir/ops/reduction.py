"""Reductions over any set of axes, with keepdims: sum, mean, max, min, logsumexp, and
the non-differentiable argmax/argmin (row-major flat index within the reduced axes, the
first extremum on ties, int32). Sums of integers and bools accumulate in int32; float sums,
means and log-sum-exps accumulate in float64 and round once, in the reference as compiled."""

from __future__ import annotations

import math
from typing import Any

import numpy as np

from dpt_ir.api import core as F
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.registry import (
    CXX_FLOATS,
    CxxReduce,
    Derivative,
    GradContext,
    LanePass,
    Linear,
    OpDef,
    Signature,
    register_op,
)
from dpt_ir.ir.rules import Attrs, check_axes, reduced_shape
from dpt_ir.ir.types import TensorType
from dpt_ir.ops import batch_rules


class ReduceAttrs(Attrs):
    axes: tuple[int, ...]
    keepdims: bool = False


def _rule(name: str, dtypes: str, out_dtype: str | None = None, identity: bool = True) -> Any:
    """The type rule of reduction ``name``; without an ``identity`` (max, min, the
    arg-reductions) a reduction over an empty axis is a ContractError, as NumPy raises."""

    def infer(inputs: tuple[TensorType, ...], attrs: ReduceAttrs, where: str) -> TensorType:
        (x,) = inputs
        check_axes(attrs.axes, x.ndim, where)
        empty = [a for a in attrs.axes if x.shape[a] == 0]
        if empty and not identity:
            raise ContractError(
                f"{where}: dp.{name} reduces axis {empty[0]} of shape {list(x.shape)}, which is empty, and has no "
                "identity (expected non-empty reduced axes; NumPy raises here too: use dp.sum, dp.mean or "
                "dp.logsumexp, which have one, or reduce a non-empty axis)"
            )
        if dtypes == "float" and x.dtype not in ("float32", "float64"):
            raise ContractError(f"{where}: expected a float32 or float64 input, found {x.dtype}")
        if dtypes == "numeric" and x.dtype == "bool":
            raise ContractError(f"{where}: expected a numeric input, found bool")
        if out_dtype is None and x.dtype in ("bool", "uint8", "int32"):
            dtype = "int32" if dtypes == "sum" else x.dtype
        else:
            dtype = out_dtype or x.dtype
        return TensorType(shape=reduced_shape(x.shape, attrs.axes, attrs.keepdims), dtype=dtype)

    return infer


def _count(sig: Signature) -> int:
    return math.prod(sig.inputs[0].shape[a] for a in sig.attrs.axes)


def _unreduce(c: GradContext, g: Any) -> Any:
    return F.unreduce(g, c.input_type(0).shape, c.attrs.axes, c.attrs.keepdims)


def _extremum_grad(arg_op: str) -> Any:
    """The cotangent goes to the first extremal element; a NaN result (a NaN in the
    slice) gives the whole slice a NaN gradient, as PyTorch's amax/amin and JAX's max do:
    never a finite gradient for a NaN value."""

    def formula(c: GradContext) -> Any:
        x, axes = c.input(0), c.attrs.axes
        idx = x.builder.emit(arg_op, [x], {"axes": list(axes), "keepdims": True})
        first = F.iota(x.builder, x.shape, axes) == idx
        result = _unreduce(c, c.out)
        return F.where(result == result, F.where(first, _unreduce(c, c.gy), 0), result)

    return formula


def _lse_pieces(x: Any, axes: tuple[int, ...]) -> tuple[Any, Any, Any]:
    """logsumexp's pieces as IR, kept over ``axes``: the shift ``m`` (the maximum; 0 where it
    is not finite, as the reference and the C++ lanes shift), ``e = exp(x - m)`` and
    ``s = sum(e)`` (float64 lanes, rounded once). The derivative formula and the expansion
    build the same nodes, so cse shares them: the gradient ``e / s`` reuses the forward's.

    ``m`` passes no derivative (`stop_gradient`): ``log(sum(exp(x - c))) + c`` is logsumexp for
    any ``c``, so its derivative in ``m`` is zero, and a derived plan (jvp, hvp) that
    differentiated the shift again ran the maximum's derivative (an argmax) for terms that
    cancel."""
    top = F.max(x, axis=axes, keepdims=True)
    m = F.stop_gradient(F.where(F.abs(top) <= float(np.finfo(x.dtype).max), top, 0.0))
    e = F.exp(x - m)
    return m, e, F.sum(e, axis=axes, keepdims=True)


def _lse_expansion(attrs: ReduceAttrs, inputs: tuple[Any, ...]) -> Any:
    """logsumexp as ``log(s) + m`` (`_lse_pieces`): the same bits as the fused reduction
    (a float32 sum of two float32 values rounds as its float64 sum does). None over an
    empty slice (no maximum to shift by): the node stays."""
    (x,) = inputs
    if any(x.shape[a] == 0 for a in attrs.axes):
        return None
    m, _, s = _lse_pieces(x, attrs.axes)
    out = F.log(s) + m
    return out if attrs.keepdims else F.squeeze(out, axis=attrs.axes)


def _lse_grad(c: GradContext) -> Any:
    """``gy * exp(x - lse)``. Expanded (`GradContext.expanded`), as ``gy * e / s``: softmax
    from the forward's pieces (one exp per element), exact where ``lse`` rounds (``x`` near
    the dtype's maximum). Else from the fused node's output, PyTorch's formula (one reduction
    launch and one exp per element in the gradient, no pieces). An empty slice has an empty
    gradient."""
    x, axes = c.input(0), c.attrs.axes
    if any(x.shape[a] == 0 for a in axes):
        return _unreduce(c, c.gy) * F.zeros_like(x)
    if not c.expanded:
        return _unreduce(c, c.gy) * F.exp(x - _unreduce(c, c.out))
    _, e, s = _lse_pieces(x, axes)
    return _unreduce(c, c.gy) * (e / s)


def _move_last(x: np.ndarray, axes: tuple[int, ...]) -> np.ndarray:
    keep = [i for i in range(x.ndim) if i not in axes]
    moved = np.transpose(x, keep + list(axes))
    return moved.reshape(moved.shape[: len(keep)] + (math.prod(x.shape[a] for a in axes),))  # (-1 fails when empty)


def _arg_ref(fn: Any) -> Any:
    def ref(attrs: ReduceAttrs, x: np.ndarray) -> np.ndarray:
        flat = fn(_move_last(x, attrs.axes), axis=-1).astype(np.int32)
        if attrs.keepdims:
            flat = flat.reshape(reduced_shape(x.shape, attrs.axes, True))
        return flat

    return ref


def _logsumexp_ref(attrs: ReduceAttrs, x: np.ndarray) -> np.ndarray:
    # In float64, rounded once, as the compiled reduction accumulates (see _sum_ref).
    x64 = x.astype(np.float64)
    m = np.max(x64, axis=attrs.axes, keepdims=True) if x.size else np.zeros((), np.float64)
    m = np.where(np.isfinite(m), m, 0)
    out = np.log(np.sum(np.exp(x64 - m), axis=attrs.axes, keepdims=True)) + m
    return (out if attrs.keepdims else np.squeeze(out, axis=attrs.axes)).astype(x.dtype)


def _sum_ref(attrs: ReduceAttrs, x: np.ndarray) -> np.ndarray:
    # Floats accumulate in float64 and round once, as the compiled sums do (DESIGN §6):
    # a float32 sum whose partial sums pass float32's max but whose result does not is
    # finite, where NumPy's float32 accumulation gives inf (docs/design-decisions.md).
    if x.dtype.kind in "biu":
        return np.sum(x, axis=attrs.axes, keepdims=attrs.keepdims, dtype="int32")
    return np.asarray(np.sum(x, axis=attrs.axes, keepdims=attrs.keepdims, dtype=np.float64)).astype(x.dtype)


def _mean_ref(attrs: ReduceAttrs, x: np.ndarray) -> np.ndarray:
    # In float64 for every float dtype, rounded once (see _sum_ref).
    return np.asarray(np.mean(x, axis=attrs.axes, keepdims=attrs.keepdims, dtype=np.float64)).astype(x.dtype)


# -- C++ lowering (dpt_ir/backends/cxx): 8 lanes fixed by element index, merged in a fixed
# tree (dp_math.h's dp_lanes_*), partials combined in order. Float sums accumulate in
# float64 lanes; integer sums in unsigned lanes (wrapping as int32 does); float max/min keep
# NaN flag lanes beside the value lanes. float64 lanes call dp_math.h's double overloads.
_C_INTS = ("int", "unsigned char", "bool")


def _sum_cxx(mean: bool) -> Any:
    def template(in_t: str, out_t: str) -> CxxReduce | None:
        if in_t in CXX_FLOATS:
            acc, x = "double", "(double){x}"
        elif in_t in _C_INTS and not mean:
            acc, x = "unsigned", "(unsigned){x}"
        else:
            return None
        count = "{p_s} / (double){count}" if mean else "{p_s}"
        lanes = LanePass(
            ((("s", acc, f"({acc})0"),)), f"{{a_s}} += {x};", "{p_s} = dp_lanes_sum({l_s});", "{a_s} += {b_s};"
        )
        return CxxReduce((("s", acc),), (lanes,), "{p_s} += {o_s};", f"({out_t})({count})")

    return template


def _extremum_cxx(sense: str, with_index: bool) -> Any:
    # sense "gt" (max) or "lt" (min); NaN wins as in NumPy, the first index wins ties.
    def template(in_t: str, out_t: str) -> CxxReduce | None:
        if in_t not in (*CXX_FLOATS, "int", "unsigned char"):
            return None
        init = f"dp_limits<{in_t}>::lowest()" if sense == "gt" else f"dp_limits<{in_t}>::highest()"
        if with_index:
            lanes = LanePass(
                (("v", in_t, init), ("i", "int", "dp_limits<int>::highest()")),
                f"{{{{ const bool u = dp_arg_better_{sense}({{x}}, {{r}}, {{a_v}}, {{a_i}}); "
                "{a_v} = u ? {x} : {a_v}; {a_i} = u ? {r} : {a_i}; }}",
                f"dp_arg_lanes_{sense}({{l_v}}, {{l_i}}, {{p_v}}, {{p_i}});",
            )
            combine = f"dp_arg_fold_{sense}({{p_v}}, {{p_i}}, {{o_v}}, {{o_i}});"
            return CxxReduce((("v", in_t), ("i", "int")), (lanes,), combine, "{p_i}")
        lanes = LanePass(
            (("m", in_t, init), ("n", "int", "0")),
            f"{{a_m}} = dp_sel_{sense}({{x}}, {{a_m}}); {{a_n}} |= (int)({{x}} != {{x}});",
            f"{{p_m}} = dp_lanes_{sense}({{l_m}}, {{l_n}});",
        )
        return CxxReduce((("m", in_t),), (lanes,), f"{{p_m}} = dp_nan_{sense}({{p_m}}, {{o_m}});", f"({out_t}){{p_m}}")

    return template


def _logsumexp_cxx(in_t: str, out_t: str) -> CxxReduce | None:
    # Two passes: the maximum m (not finite: 0, as the reference shifts), then the sum of
    # exp(x - m) in float64 lanes; partials (m, s) rescale to the larger m when combined.
    if in_t not in CXX_FLOATS:
        return None
    top = LanePass(
        (("m", in_t, f"dp_limits<{in_t}>::lowest()"), ("n", "int", "0")),
        "{a_m} = dp_sel_gt({x}, {a_m}); {a_n} |= (int)({x} != {x});",
        "{p_m} = dp_finite_or_zero(dp_lanes_gt({l_m}, {l_n}));",
    )
    total = LanePass(
        (("s", "double", "0.0"),),
        "{a_s} += (double){x};",
        "{p_s} = dp_lanes_sum({l_s});",
        "{a_s} += {b_s};",
        map="dp_exp({x} - {p_m})",
    )
    return CxxReduce(
        (("m", in_t), ("s", "double")),
        (top, total),
        "dp_lse_fold({p_m}, {p_s}, {o_m}, {o_s});",
        f"({out_t})((double)dp_log(({in_t}){{p_s}}) + (double){{p_m}})",
    )


def _reduction(
    name: str,
    dtypes: str,
    identity: float | None,
    ref: Any,
    derivative: Derivative | None,
    doc: str,
    cxx: Any,
    expansion: Any = None,
    out_dtype: str | None = None,
    linear: Linear | None = None,
) -> None:
    """Register reduction ``name``; ``identity``: its value over an empty slice
    (`OpDef.empty_value`), None where NumPy raises (its type rule refuses an empty axis)."""
    register_op(
        OpDef(
            name=name,
            kind="reduction",
            arity=1,
            attrs=ReduceAttrs,
            infer=_rule(name, dtypes, out_dtype, identity is not None),
            reference=ref,
            derivative=derivative,
            cxx_reduce=cxx,
            doc=doc,
            expansion=expansion,
            empty_value=identity,
            linear=linear,
            batch_attrs=batch_rules.first_kept,
        )
    )


_reduction(
    "sum",
    "sum",
    0.0,
    _sum_ref,
    Derivative({0: lambda c: _unreduce(c, c.gy)}),
    "sum over axes (integers accumulate in int32)",
    _sum_cxx(mean=False),
    linear=Linear(((0,),)),
)
_reduction(
    "mean",
    "float",
    math.nan,
    _mean_ref,
    Derivative({0: lambda c: _unreduce(c, c.gy / float(c.derived("count")))}, derived={"count": _count}),
    "mean over axes; the backward saves only the element count",
    _sum_cxx(mean=True),
    linear=Linear(((0,),)),
)
_reduction(
    "max",
    "numeric",
    None,
    lambda attrs, x: np.max(x, axis=attrs.axes, keepdims=attrs.keepdims),
    Derivative({0: _extremum_grad("argmax")}, saved_inputs=(0,), saved_output=True),
    "maximum over axes; the gradient goes to the first maximal element (NaN to a NaN slice)",
    _extremum_cxx("gt", with_index=False),
)
_reduction(
    "min",
    "numeric",
    None,
    lambda attrs, x: np.min(x, axis=attrs.axes, keepdims=attrs.keepdims),
    Derivative({0: _extremum_grad("argmin")}, saved_inputs=(0,), saved_output=True),
    "minimum over axes; the gradient goes to the first minimal element (NaN to a NaN slice)",
    _extremum_cxx("lt", with_index=False),
)
_reduction(
    "logsumexp",
    "float",
    -math.inf,
    _logsumexp_ref,
    Derivative({0: _lse_grad}, saved_inputs=(0,), saved_output=True),
    "log(sum(exp(x))) over axes, computed stably",
    _logsumexp_cxx,
    expansion=_lse_expansion,
)
_reduction(
    "argmax",
    "numeric",
    None,
    _arg_ref(np.argmax),
    None,
    "flat index of the first maximum within the reduced axes (not differentiable)",
    _extremum_cxx("gt", with_index=True),
    out_dtype="int32",
)
_reduction(
    "argmin",
    "numeric",
    None,
    _arg_ref(np.argmin),
    None,
    "flat index of the first minimum within the reduced axes (not differentiable)",
    _extremum_cxx("lt", with_index=True),
    out_dtype="int32",
)

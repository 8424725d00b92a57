"""scipy.ndimage's B-spline prefilter along one axis, and its adjoint, as ops of kind ``recurrence``.

- ``spline_filter1d(x; axis, mode, npad, cval, order)``: ``npad`` elements of prepadding per
  side (edge values under ``nearest``, ``cval`` under ``grid-constant``: scipy's
  ``_prepad_for_spline_filter``), then the recursive filter of ``order`` along ``axis``;
- ``spline_filter1d_adjoint``: its transpose. Each is the other's derivative.

Both are a `Recurrence` (`dpt_ir.ir.recurrence`), the line program of scipy's ``ni_splines.c``
(`dpt_ir.reference.spline_ref`): the gain, then per pole the boundary initialisation of the
first coefficient (a linear functional of the line, its weights computed here once), the
causal pass, the initialisation of the last one and the anti-causal pass; the adjoint runs
each step transposed, in reverse order, and folds the prepadding back. O(1) work per element
per pole and exact: no truncation, and a non-finite value reaches the whole line, as in
scipy. Interpreter (`dpt_ir.reference.recurrence_ref`) and kernels run the same operations,
so they agree bit for bit. Adjoint form: the transposed recursion, run along the same lines.
"""

from __future__ import annotations

import functools
import math
from typing import Any

import numpy as np
from pydantic import field_validator

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.recurrence import RecStep, Recurrence, init_step
from dpt_ir.ir.registry import Derivative, GradContext, Linear, OpDef, register_op, without_cval
from dpt_ir.ir.rules import Attrs
from dpt_ir.ir.types import TensorType
from dpt_ir.ops.resample import Mode, check_float
from dpt_ir.reference import recurrence_ref
from dpt_ir.reference import spline_ref as spline


class FilterAttrs(Attrs):
    """``npad`` > 0 first extends the axis by ``npad`` per side (``nearest``: edge values;
    ``grid-constant``: ``cval``), scipy's prepadding before the filter; ``order`` 2 to 5."""

    axis: int
    mode: Mode = "mirror"
    npad: int = 0
    cval: float = 0.0
    order: int = 3

    @field_validator("order")
    @classmethod
    def _order(cls, v: int) -> int:
        if v not in spline.FILTER_ORDERS:
            raise ValueError(f"order must be one of {spline.FILTER_ORDERS}, found {v}")
        return v


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


@functools.lru_cache(maxsize=128)
def _steps(m: int, mode: str, order: int, adjoint: bool) -> tuple[RecStep, ...]:
    """The filter's steps on a work line of ``m`` (none for ``m`` <= 1: scipy skips such a line);
    the adjoint's are the transposes, in reverse order."""
    if m <= 1:
        return ()
    poles, family = spline.filter_poles(order), spline.filter_family(mode)
    gain = RecStep("scale", z=spline.filter_gain(poles))
    forward: list[RecStep] = [gain]
    backward: list[RecStep] = []
    for z in poles:
        first = spline.init_functional(m, z, family, True)
        last = spline.init_functional(m, z, family, False)
        forward += [init_step("init", 0, first), RecStep("causal", z=z), init_step("init", m - 1, last),
                    RecStep("anticausal", z=z)]  # fmt: skip
        backward = [RecStep("anticausal_t", z=z), init_step("init_t", m - 1, last), RecStep("causal_t", z=z),
                    init_step("init_t", 0, first), *backward]  # fmt: skip
    return (*backward, gain) if adjoint else tuple(forward)


def program(a: FilterAttrs, in_shape: tuple[int, ...], adjoint: bool) -> Recurrence:
    """The `Recurrence` of the node: forward, load with the prepadding and filter; adjoint,
    the transposed filter, then crop the padding (folding the edge copies back under nearest)."""
    n_in = in_shape[a.axis]
    m = n_in if adjoint else n_in + 2 * a.npad
    n_out = n_in - 2 * a.npad if adjoint else m
    outer, inner = math.prod(in_shape[: a.axis]), math.prod(in_shape[a.axis + 1 :])
    fill = None if a.mode == "nearest" else a.cval
    pad, crop = (0, a.npad) if adjoint else (a.npad, 0)
    steps = _steps(m, a.mode, a.order, adjoint)
    return Recurrence(a.axis, outer, inner, n_in, n_out, m, pad, fill, crop, a.mode == "nearest", steps)


def _filter_op(name: str, adjoint: bool, partner: str, doc: str) -> OpDef:
    def reference(a: FilterAttrs, x: np.ndarray) -> np.ndarray:
        return recurrence_ref.run(program(a, x.shape, adjoint), x)

    def grad(c: GradContext) -> Any:
        return c.gy.builder.emit(partner, [c.gy], {**c.attrs.model_dump(), "cval": 0.0})

    def infer(inputs: tuple[TensorType, ...], a: FilterAttrs, where: str) -> TensorType:
        return _infer_filter(inputs, a, where, -1 if adjoint else 1)

    return OpDef(
        name=name,
        kind="recurrence",
        arity=1,
        attrs=FilterAttrs,
        infer=infer,
        reference=reference,
        derivative=Derivative({0: grad}),
        linear=Linear(((0,),), without_cval),
        recurrence=lambda a, shape: program(a, shape, adjoint),
        cost="expensive",
        doc=doc,
    )


register_op(
    _filter_op(
        "spline_filter1d",
        False,
        "spline_filter1d_adjoint",
        "scipy.ndimage's spline prefilter of order 2-5 along axis (gain, then per pole a causal and an "
        "anti-causal recursion from scipy's per-mode initialisations), after npad elements of prepadding per side",
    )
)
register_op(
    _filter_op(
        "spline_filter1d_adjoint",
        True,
        "spline_filter1d",
        "the transpose of spline_filter1d (each step of the recursion transposed, in reverse order, "
        "then the prepadding folded back); adjoint form: the transposed recursion along the same lines",
    )
)

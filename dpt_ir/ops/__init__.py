"""The op table. Importing this package registers every built-in op family and proves
the table complete (each `register_op` call checks its op's derivative entry) and
compilable (`registry.check_lowered`: every built-in op but the loop ops has a C++
lowering)."""

from dpt_ir.ir.registry import (
    ALL_INPUTS,
    Derivative,
    GradContext,
    NoAttrs,
    OpDef,
    Signature,
    all_ops,
    check_lowered,
    get_op,
    register_op,
)
from dpt_ir.ops import (  # noqa: F401  (registration)
    elementwise,
    fanbeam,
    gather,
    linalg,
    loop,
    loop_reverse,
    objective,
    radon,
    reduction,
    resample,
    shape,
    spline_filter,
    stencil,
)

__all__ = [
    "ALL_INPUTS",
    "Derivative",
    "GradContext",
    "NoAttrs",
    "OpDef",
    "Signature",
    "all_ops",
    "get_op",
    "register_op",
]

check_lowered(all_ops())

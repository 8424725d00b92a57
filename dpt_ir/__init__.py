"""dpt_ir: compile differentiable operator graphs into fused NVIDIA Warp kernels."""

from dpt_ir import ops as _ops  # noqa: F401  (registers the op table)
from dpt_ir.api.core import (
    abs,
    absolute,
    add,
    amax,
    amin,
    arctan2,
    argmax,
    argmin,
    astype,
    atan2,
    broadcast_to,
    cast,
    ceil,
    clamp,
    clip,
    concat,
    concatenate,
    cos,
    div,
    divide,
    eq,
    equal,
    erf,
    exp,
    expand_dims,
    expm1,
    floor,
    ge,
    greater,
    greater_equal,
    gt,
    le,
    less,
    less_equal,
    log,
    log1p,
    logical_and,
    logical_not,
    logical_or,
    logsumexp,
    lt,
    max,
    maximum,
    mean,
    min,
    minimum,
    mul,
    multiply,
    ne,
    neg,
    negative,
    not_equal,
    pow,
    power,
    reciprocal,
    relu,
    reshape,
    rsqrt,
    sigmoid,
    sign,
    sin,
    softplus,
    sqrt,
    square,
    squeeze,
    stop_gradient,
    sub,
    subtract,
    sum,
    tanh,
    transpose,
    true_divide,
    where,
)
from dpt_ir.api.fanbeam import fanbeam
from dpt_ir.api.gather import add_at, take, take_along_axis
from dpt_ir.api.imaging import (
    convolve,
    convolve1d,
    correlate,
    correlate1d,
    gaussian_filter,
    gradient,
    poisson_deviance,
    squared_error,
)
from dpt_ir.api.linalg import matmul
from dpt_ir.api.loops import fori_loop, scan
from dpt_ir.api.resample import (
    affine_transform,
    map_coordinates,
    radon,
    rotate,
    shift,
    spline_filter,
    spline_filter1d,
    zoom,
)
from dpt_ir.driver.compile import compile
from dpt_ir.ir.builder import GraphBuilder, Tensor
from dpt_ir.ir.errors import ContractError, LifecycleError, NumericalError
from dpt_ir.ir.graph import Graph, Input, Node, Output
from dpt_ir.ir.types import TensorType
from dpt_ir.ops import Derivative, GradContext, OpDef, all_ops, get_op, register_op
from dpt_ir.reference.interpreter import interpret, interpret_grad, interpret_hvp, interpret_jvp
from dpt_ir.runtime.program import Program, TapePass
from dpt_ir.version import __version__

"""The op table as test data: cases that exercise every registered op.

Each `OpCase` builds a small graph through the public API (``dp.*`` functions, Python
operators, or ``GraphBuilder.emit`` for ops that only autodiff emits), generates inputs
inside the op's smooth domain (no ties for max/min, positive bases for log/sqrt/pow,
values away from the kinks of abs/relu/clamp and from the integers for floor/ceil),
names the inputs to differentiate and gives an independent NumPy reference of the
output. `tests/ops/test_op_table.py` checks them against the interpreter and finite differences; a
compiled-backend test reuses them unchanged:

    for case in CASES:
        for dtype in case.dtypes:
            graph = case.build(dtype)
            inputs = case.inputs(np.random.default_rng(0), dtype)
            ... compare against dp.interpret / dp.interpret_grad(graph, case.wrt, ...)

Every graph has exactly one output, named ``out`` (`OUTPUT`).
"""

from __future__ import annotations

import math
import operator
import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
from scipy import ndimage, signal, special

import dpt_ir as dp
from dpt_ir.ops.gather import table_attrs

OUTPUT = "out"
FLOATS: tuple[str, ...] = ("float64", "float32")
Domain = Callable[[np.random.Generator, tuple[int, ...]], np.ndarray]


@dataclass(frozen=True)
class OpCase:
    """One exercise of one registered op.

    - ``op``: the op under test; ``build`` always gives a graph with a node of this op.
    - ``name``: unique id, ``<op>/<label>``.
    - ``build(dtype)``: the graph, its floating inputs declared with ``dtype`` (one of
      ``dtypes``); one output, ``out``.
    - ``inputs(rng, dtype)``: a dict input name -> array of the declared dtype, inside
      the op's smooth domain.
    - ``wrt``: the inputs to differentiate (empty for a value-only case).
    - ``expect(**inputs)``: an independent NumPy reference of ``out``.
    - ``fd_step``: an absolute finite-difference step for cases whose inputs are chosen
      so that perturbed values stay exact (e.g. float32 inputs); None: the default.
    - ``grad_oracle``: special-value cases (`SPECIAL_CASES`) only: where the expected
      gradient comes from (see `tests/ops/test_special_values.py`): ``torch:<name>`` (PyTorch's
      autograd of the function ``<name>`` in its table), ``rule:<name>`` (a documented
      dpt_ir rule, written out in NumPy there), ``linear`` (the op is linear in its float
      inputs: the gradient at the special values equals the one at zeros).
    """

    op: str
    name: str
    build: Callable[[str], dp.Graph]
    inputs: Callable[[np.random.Generator, str], dict[str, np.ndarray]]
    expect: Callable[..., np.ndarray]
    wrt: tuple[str, ...] = ()
    dtypes: tuple[str, ...] = FLOATS
    fd_step: float | None = None
    grad_oracle: str = ""


# -- input domains --------------------------------------------------------------------
def uniform(lo: float = -2.0, hi: float = 2.0) -> Domain:
    return lambda rng, shape: rng.uniform(lo, hi, shape)


def magnitude(lo: float, hi: float) -> Domain:
    """A random sign times U(lo, hi): bounded away from zero."""
    return lambda rng, shape: rng.choice([-1.0, 1.0], shape) * rng.uniform(lo, hi, shape)


def avoiding(points: Sequence[float], lo: float = -2.0, hi: float = 2.0, gap: float = 0.05) -> Domain:
    """U(lo, hi) resampled until every value is at least ``gap`` away from ``points``."""
    pts = np.asarray(points, dtype=np.float64)

    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        x = rng.uniform(lo, hi, shape)
        while (bad := np.min(np.abs(np.subtract.outer(x, pts)), axis=-1) < gap).any():
            x = np.where(bad, rng.uniform(lo, hi, shape), x)
        return x

    return gen


def distinct(scale: float = 0.3) -> Domain:
    """Values at least ``scale / 2`` apart from each other: no ties within a tensor."""

    def gen(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
        n = math.prod(shape)
        x = (rng.permutation(n) - n / 2) * scale + rng.uniform(0.0, scale / 2, n)
        return x.reshape(shape)

    return gen


def grid(offset: float) -> Domain:
    """(k + offset) / 4 plus jitter below 0.05: grids of offsets 0 and 0.5 never tie."""
    return lambda rng, shape: (rng.integers(-8, 8, shape) + offset) * 0.25 + rng.uniform(-0.05, 0.05, shape)


def small_ints(lo: int = -2, hi: int = 3) -> Domain:
    """Integers in [lo, hi): ties are frequent (comparisons, argmax)."""
    return lambda rng, shape: rng.integers(lo, hi, shape)


def nonzero_ints(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.choice([-1, 1], shape) * rng.integers(1, 5, shape)


def bools(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    return rng.random(shape) < 0.5


def dyadic(rng: np.random.Generator, shape: tuple[int, ...]) -> np.ndarray:
    """Multiples of 1/16 in [-2, 2]: exact in float32, also after a step of 2**-8."""
    return rng.integers(-32, 33, shape) / 16.0


# -- case construction ------------------------------------------------------------------
NAMES = ("a", "b", "c", "d")


@dataclass(frozen=True)
class Arg:
    """One graph input of a case: its shape, its domain, and its dtype (None: the
    case's float dtype). Floating inputs are differentiated unless ``grad`` is False."""

    shape: tuple[int, ...]
    domain: Domain
    dtype: str | None = None
    grad: bool = True

    def dtype_for(self, case_dtype: str) -> str:
        return self.dtype or case_dtype

    def differentiable(self, case_dtype: str) -> bool:
        return self.grad and self.dtype_for(case_dtype) in FLOATS


def case(
    op: str,
    label: str,
    args: Sequence[Arg],
    fn: Callable[..., dp.Tensor],
    expect: Callable[..., np.ndarray],
    *,
    grad: bool | None = None,
    dtypes: tuple[str, ...] | None = None,
) -> OpCase:
    """A case whose graph is ``out = fn(a, b, ...)`` over inputs declared by ``args``.

    ``expect`` takes the input arrays positionally. The case differentiates its floating
    inputs when ``grad`` (default: whether ``op`` is differentiable). It runs in both
    float dtypes when some input follows the case's dtype, else in float64 only.
    """
    names = NAMES[: len(args)]
    if grad is None:
        grad = dp.get_op(op).differentiable
    if dtypes is None:
        dtypes = FLOATS if any(a.dtype is None for a in args) else ("float64",)

    def build(dtype: str) -> dp.Graph:
        g = dp.GraphBuilder(f"case_{op}")
        xs = [
            g.input(n, a.shape, a.dtype_for(dtype), requires_grad=a.differentiable(dtype))
            for n, a in zip(names, args, strict=True)
        ]
        g.output(OUTPUT, fn(*xs))
        return g.build()

    def inputs(rng: np.random.Generator, dtype: str) -> dict[str, np.ndarray]:
        return {n: np.array(a.domain(rng, a.shape), dtype=a.dtype_for(dtype)) for n, a in zip(names, args, strict=True)}

    wrt = tuple(n for n, a in zip(names, args, strict=True) if grad and a.differentiable("float64"))
    return OpCase(
        op=op,
        name=f"{op}/{label}",
        build=build,
        inputs=inputs,
        expect=lambda **kw: expect(*(kw[n] for n in names)),
        wrt=wrt,
        dtypes=dtypes,
    )


def _dims(shape: tuple[int, ...]) -> str:
    return "x".join(map(str, shape)) if shape else "scalar"


def _emit(op: str, **attrs: Any) -> Callable[..., dp.Tensor]:
    """``fn`` of a case that applies ``op`` to its inputs with ``GraphBuilder.emit``."""
    return lambda *xs: xs[0].builder.emit(op, list(xs), attrs)


# -- elementwise unary ------------------------------------------------------------------
SHAPES: tuple[tuple[int, ...], ...] = ((), (5,), (3, 4), (2, 3, 2))
UNARY: tuple[tuple[str, Callable[..., dp.Tensor], Callable[..., np.ndarray], Domain], ...] = (
    ("neg", dp.negative, np.negative, uniform()),
    ("abs", dp.absolute, np.abs, avoiding([0.0])),
    ("exp", dp.exp, np.exp, uniform()),
    ("log", dp.log, np.log, uniform(0.2, 3.0)),
    ("log1p", dp.log1p, np.log1p, uniform(-0.5, 2.0)),
    ("expm1", dp.expm1, np.expm1, uniform()),
    ("sqrt", dp.sqrt, np.sqrt, uniform(0.2, 3.0)),
    ("rsqrt", dp.rsqrt, lambda a: 1.0 / np.sqrt(a), uniform(0.2, 3.0)),
    ("square", dp.square, lambda a: a * a, uniform()),
    ("reciprocal", dp.reciprocal, lambda a: 1.0 / a, magnitude(0.3, 2.0)),
    ("sin", dp.sin, np.sin, uniform(-3.0, 3.0)),
    ("cos", dp.cos, np.cos, uniform(-3.0, 3.0)),
    ("tanh", dp.tanh, np.tanh, uniform(-3.0, 3.0)),
    ("sigmoid", dp.sigmoid, special.expit, uniform(-4.0, 4.0)),
    ("relu", dp.relu, lambda a: np.where(a > 0, a, 0.0), avoiding([0.0])),
    ("softplus", dp.softplus, lambda a: np.logaddexp(0.0, a), uniform(-4.0, 4.0)),
    ("erf", dp.erf, special.erf, uniform()),
    ("sign", dp.sign, np.sign, small_ints()),
    ("floor", dp.floor, np.floor, uniform(-3.0, 3.0)),
    ("ceil", dp.ceil, np.ceil, uniform(-3.0, 3.0)),
    ("stop_gradient", dp.stop_gradient, lambda a: a, uniform()),
)


def unary_cases() -> list[OpCase]:
    out = [case(op, f"rank{len(shape)}", [Arg(shape, dom)], fn, ref) for op, fn, ref, dom in UNARY for shape in SHAPES]
    int32 = [Arg((3, 4), small_ints(-4, 5), "int32")]
    out += [
        case("neg", "operator", [Arg((3, 4), uniform())], operator.neg, np.negative),
        case("abs", "builtin", [Arg((2, 3), avoiding([0.0]))], abs, np.abs),
        case("sigmoid", "wide", [Arg((8,), uniform(-40.0, 40.0))], dp.sigmoid, special.expit),
        case("softplus", "wide", [Arg((8,), uniform(-40.0, 40.0))], dp.softplus, lambda a: np.logaddexp(0, a)),
        case("sign", "nonzero", [Arg((3, 4), avoiding([0.0]))], dp.sign, np.sign),
        case("floor", "integers", [Arg((3, 4), small_ints())], dp.floor, np.floor),
        case("ceil", "integers", [Arg((3, 4), small_ints())], dp.ceil, np.ceil),
        case("neg", "int32", int32, dp.negative, np.negative),
        case("abs", "int32", int32, dp.absolute, np.abs),
        case("square", "int32", int32, dp.square, np.square),
        case("relu", "int32", int32, dp.relu, lambda a: np.maximum(a, 0)),
        case("sign", "int32", int32, dp.sign, np.sign),
        case("logical_not", "2d", [Arg((3, 4), bools, "bool")], dp.logical_not, np.logical_not),
        case("logical_not", "operator", [Arg((5,), bools, "bool")], operator.invert, np.logical_not),
        case("logical_not", "scalar", [Arg((), bools, "bool")], dp.logical_not, np.logical_not),
    ]
    return out


# -- elementwise binary -----------------------------------------------------------------
PAIRS: tuple[tuple[tuple[int, ...], tuple[int, ...]], ...] = (
    ((), ()),
    ((5,), (5,)),
    ((3, 1), (1, 4)),
    ((4,), (2, 3, 4)),
    ((2, 3, 4), ()),
)
BINARY: tuple[tuple[str, Callable[..., dp.Tensor], Callable[..., np.ndarray], Domain, Domain], ...] = (
    ("add", operator.add, np.add, uniform(), uniform()),
    ("sub", operator.sub, np.subtract, uniform(), uniform()),
    ("mul", operator.mul, np.multiply, uniform(), uniform()),
    ("div", operator.truediv, np.divide, uniform(), magnitude(0.5, 2.0)),
    ("pow", operator.pow, np.power, uniform(0.5, 2.0), uniform(-1.5, 1.5)),
    ("maximum", dp.maximum, np.maximum, grid(0.0), grid(0.5)),
    ("minimum", dp.minimum, np.minimum, grid(0.0), grid(0.5)),
    ("atan2", dp.arctan2, np.arctan2, magnitude(0.5, 2.0), magnitude(0.5, 2.0)),
)


def binary_cases() -> list[OpCase]:
    out = [
        case(op, f"{_dims(sa)}_{_dims(sb)}", [Arg(sa, da), Arg(sb, db)], fn, ref)
        for op, fn, ref, da, db in BINARY
        for sa, sb in PAIRS
    ]
    x = [Arg((3, 4), uniform())]
    off_grid = [Arg((3, 4), grid(0.5))]
    nonzero = [Arg((3, 4), magnitude(0.5, 2.0))]
    out += [
        case("add", "scalar_right", x, lambda a: a + 1.5, lambda a: a + 1.5),
        case("add", "scalar_left", x, lambda a: 1.5 + a, lambda a: 1.5 + a),
        case("sub", "scalar_right", x, lambda a: a - 1.5, lambda a: a - 1.5),
        case("sub", "scalar_left", x, lambda a: 1.5 - a, lambda a: 1.5 - a),
        case("mul", "scalar_left", x, lambda a: -0.7 * a, lambda a: -0.7 * a),
        case("mul", "int_scalar", x, lambda a: a * 3, lambda a: a * 3),
        case("div", "scalar_right", x, lambda a: a / 2.5, lambda a: a / 2.5),
        case("div", "scalar_left", nonzero, lambda a: 2.5 / a, lambda a: 2.5 / a),
        case("pow", "scalar_exponent", [Arg((3, 4), uniform(0.3, 2.0))], lambda a: a**2.5, lambda a: a**2.5),
        case("pow", "scalar_base", x, lambda a: 2.0**a, lambda a: 2.0**a),
        case("pow", "function", [Arg((4,), uniform(0.5, 2.0)), Arg((3, 4), uniform())], dp.power, np.power),
        case("maximum", "scalar", off_grid, lambda a: dp.maximum(a, 0.3), lambda a: np.maximum(a, 0.3)),
        case("minimum", "scalar", off_grid, lambda a: dp.minimum(0.3, a), lambda a: np.minimum(0.3, a)),
        case("atan2", "scalar_right", nonzero, lambda a: dp.arctan2(a, 1.5), lambda a: np.arctan2(a, 1.5)),
        case("atan2", "scalar_left", nonzero, lambda a: dp.arctan2(1.5, a), lambda a: np.arctan2(1.5, a)),
    ]
    ints = [Arg((3, 1), small_ints(-4, 5), "int32"), Arg((1, 4), small_ints(-4, 5), "int32")]
    for op, fn, ref, _, _ in BINARY:
        if op not in ("div", "pow", "atan2"):
            out.append(case(op, "int32", ints, fn, ref))
    out.append(
        case(
            "div",
            "int32_true_divide",
            [Arg((3, 4), small_ints(-4, 5), "int32"), Arg((3, 4), nonzero_ints, "int32")],
            operator.truediv,
            np.true_divide,
        )
    )
    return out


# (op, dp function, Python operator, NumPy reference)
COMPARE: tuple[tuple[str, Callable[..., dp.Tensor], Callable[..., Any], Callable[..., np.ndarray]], ...] = (
    ("lt", dp.less, operator.lt, np.less),
    ("le", dp.less_equal, operator.le, np.less_equal),
    ("gt", dp.greater, operator.gt, np.greater),
    ("ge", dp.greater_equal, operator.ge, np.greater_equal),
    ("eq", dp.equal, operator.eq, np.equal),
    ("ne", dp.not_equal, operator.ne, np.not_equal),
)


def compare_cases() -> list[OpCase]:
    out = []
    ties = small_ints()
    for op, fn, sym, ref in COMPARE:
        out += [
            case(op, "broadcast", [Arg((3, 1), ties), Arg((1, 4), ties)], fn, ref),
            case(op, "int32", [Arg((5,), ties, "int32"), Arg((5,), ties, "int32")], sym, ref),
            case(op, "scalar", [Arg((2, 3), ties)], lambda a, s=sym: s(a, 0.0), lambda a, r=ref: r(a, 0.0)),
            case(op, "mixed", [Arg((2, 3), ties, "int32"), Arg((3,), ties)], fn, ref),
        ]
    b = [Arg((3, 1), bools, "bool"), Arg((1, 4), bools, "bool")]
    out += [
        case("logical_and", "broadcast", b, dp.logical_and, np.logical_and),
        case("logical_and", "operator", b, operator.and_, np.logical_and),
        case("logical_and", "scalar", b[:1], lambda a: dp.logical_and(a, True), lambda a: a & True),
        case("logical_or", "broadcast", b, dp.logical_or, np.logical_or),
        case("logical_or", "operator", b, operator.or_, np.logical_or),
        case("logical_or", "scalar", b[:1], lambda a: dp.logical_or(False, a), lambda a: a | False),
    ]
    return out


def select_cases() -> list[OpCase]:
    """where, clamp and cast."""
    cond = Arg((3, 1), bools, "bool")
    out = [
        case("where", "broadcast", [cond, Arg((1, 4), uniform()), Arg((3, 4), uniform())], dp.where, np.where),
        case(
            "where",
            "scalar_condition",
            [Arg((), bools, "bool"), Arg((2, 3), uniform()), Arg((), uniform())],
            dp.where,
            np.where,
        ),
        case(
            "where",
            "rank3",
            [Arg((4,), bools, "bool"), Arg((2, 3, 4), uniform()), Arg((3, 1), uniform())],
            dp.where,
            np.where,
        ),
        case(
            "where",
            "computed_condition",
            [Arg((2, 5), avoiding([0.2]))],
            lambda a: dp.where(a > 0.2, dp.square(a), -a),
            lambda a: np.where(a > 0.2, a * a, -a),
        ),
        case(
            "where",
            "scalar_branch",
            [cond, Arg((3, 4), uniform())],
            lambda c, a: dp.where(c, a, 0.5),
            lambda c, a: np.where(c, a, 0.5),
        ),
        case(
            "where",
            "int32",
            [cond, Arg((1, 4), small_ints(), "int32"), Arg((3, 4), small_ints(), "int32")],
            dp.where,
            np.where,
        ),
    ]
    bounds = avoiding([-0.5, 0.7])
    out += [
        case(
            "clamp",
            "both",
            [Arg((3, 4), bounds)],
            lambda a: dp.clamp(a, -0.5, 0.7),
            lambda a: np.clip(a, -0.5, 0.7),
        ),
        case("clamp", "lo", [Arg((5,), bounds)], lambda a: dp.clamp(a, lo=-0.5), lambda a: np.maximum(a, -0.5)),
        case(
            "clamp",
            "hi",
            [Arg((2, 3, 2), bounds)],
            lambda a: dp.clip(a, None, 0.7),
            lambda a: np.minimum(a, 0.7),
        ),
        case(
            "clamp",
            "scalar",
            [Arg((), bounds)],
            lambda a: dp.clip(a, -0.5, 0.7),
            lambda a: np.clip(a, -0.5, 0.7),
        ),
    ]
    return out + cast_cases()


def _other(dtype: str) -> str:
    return "float32" if dtype == "float64" else "float64"


def _cast_case(label: str, fn: Callable[[dp.Tensor, str], dp.Tensor], input_dtype: Callable[[str], str]) -> OpCase:
    """A cast between the float dtypes, on dyadic values so a finite-difference step of
    2**-8 stays exact in float32 and the derivative (1) is exact."""

    def build(dtype: str) -> dp.Graph:
        g = dp.GraphBuilder("case_cast")
        a = g.input("a", (3, 4), input_dtype(dtype))
        g.output(OUTPUT, fn(a, dtype))
        return g.build()

    return OpCase(
        op="cast",
        name=f"cast/{label}",
        build=build,
        inputs=lambda rng, dtype: {"a": dyadic(rng, (3, 4)).astype(input_dtype(dtype))},
        expect=lambda a: a,
        wrt=("a",),
        fd_step=2.0**-8,
    )


def cast_cases() -> list[OpCase]:
    off_ints = avoiding(range(-3, 4), -3.0, 3.0)
    return [
        _cast_case("from_other_float", lambda a, dtype: dp.cast(a, dtype), _other),
        _cast_case("round_trip", lambda a, dtype: dp.cast(a, _other(dtype)).astype(dtype), lambda d: d),
        case(
            "cast",
            "to_int32",
            [Arg((3, 4), off_ints)],
            lambda a: dp.cast(a, "int32"),
            lambda a: a.astype(np.int32),
            grad=False,
        ),
        case(
            "cast",
            "int32_to_float",
            [Arg((3, 4), small_ints(-9, 9), "int32")],
            lambda a: dp.cast(a, "float64"),
            lambda a: a.astype(np.float64),
        ),
        case(
            "cast",
            "bool_to_float",
            [Arg((5,), bools, "bool")],
            lambda a: a.astype("f32"),
            lambda a: a.astype(np.float32),
        ),
        case(
            "cast",
            "int32_to_bool",
            [Arg((5,), small_ints(), "int32")],
            lambda a: dp.cast(a, bool),
            lambda a: a != 0,
        ),
    ]


# -- source ops: constant, iota -----------------------------------------------------------
def _source_case(op: str, label: str, make: Callable[[dp.GraphBuilder, str], dp.Tensor], expect: Any) -> OpCase:
    """A case whose graph has no input: ``out = make(builder, dtype)``."""

    def build(dtype: str) -> dp.Graph:
        g = dp.GraphBuilder(f"case_{op}")
        g.output(OUTPUT, make(g, dtype))
        return g.build()

    return OpCase(op=op, name=f"{op}/{label}", build=build, inputs=lambda rng, dtype: {}, expect=expect)


def _iota_expect(shape: tuple[int, ...], axes: tuple[int, ...]) -> np.ndarray:
    index = np.indices(shape)
    return np.ravel_multi_index(tuple(index[a] for a in axes), tuple(shape[a] for a in axes))


def _iota(shape: tuple[int, ...], axes: tuple[int, ...]) -> Callable[[dp.GraphBuilder, str], dp.Tensor]:
    return lambda g, dtype: g.emit("iota", [], {"shape": list(shape), "axes": list(axes)})


def source_cases() -> list[OpCase]:
    x = [Arg((3, 4), uniform())]
    return [
        _source_case("constant", "shaped", lambda g, d: g.constant(2.5, d, (2, 3)), lambda: np.full((2, 3), 2.5)),
        _source_case("constant", "int32", lambda g, d: g.constant(-3, "int32", (4,)), lambda: np.full(4, -3)),
        _source_case("constant", "bool", lambda g, d: g.constant(True, "bool"), lambda: np.array(True)),
        case("constant", "scalar_operand", x, lambda a: a * 1.5 + 0.25, lambda a: a * 1.5 + 0.25, grad=True),
        case(
            "constant",
            "shaped_operand",
            x,
            lambda a: a + a.builder.constant(0.5, a.dtype, (3, 4)),
            lambda a: a + 0.5,
            grad=True,
        ),
        _source_case("iota", "axes_0_2", _iota((2, 3, 4), (0, 2)), lambda: _iota_expect((2, 3, 4), (0, 2))),
        _source_case("iota", "last_axis", _iota((3, 4), (1,)), lambda: _iota_expect((3, 4), (1,))),
        _source_case("iota", "all_axes", _iota((2, 3, 2), (0, 1, 2)), lambda: np.arange(12).reshape(2, 3, 2)),
        _source_case("iota", "no_axes", _iota((2, 3), ()), lambda: np.zeros((2, 3), int)),
        case(
            "iota",
            "scaled",
            x,
            lambda a: a * dp.cast(_iota((3, 4), (0, 1))(a.builder, a.dtype), a.dtype),
            lambda a: a * np.arange(12).reshape(3, 4),
            grad=True,
        ),
    ]


# -- shape ops ------------------------------------------------------------------------------
def _index_case(shape: tuple[int, ...], index: Any, label: str) -> OpCase:
    return case("slice", label, [Arg(shape, uniform())], lambda a: a[index], lambda a: a[index])


def shape_cases() -> list[OpCase]:
    def arg(*shape: int) -> list[Arg]:
        return [Arg(shape, uniform())]

    out = [
        case(
            "broadcast_to",
            "3x1_to_2x3x4",
            arg(3, 1),
            lambda a: dp.broadcast_to(a, (2, 3, 4)),
            lambda a: np.broadcast_to(a, (2, 3, 4)),
        ),
        case(
            "broadcast_to",
            "4_to_3x4",
            arg(4),
            lambda a: dp.broadcast_to(a, (3, 4)),
            lambda a: np.broadcast_to(a, (3, 4)),
        ),
        case(
            "broadcast_to",
            "scalar_to_2x3",
            arg(),
            lambda a: dp.broadcast_to(a, (2, 3)),
            lambda a: np.broadcast_to(a, (2, 3)),
        ),
        case("reshape", "3x4_to_2x6", arg(3, 4), lambda a: dp.reshape(a, (2, 6)), lambda a: a.reshape(2, 6)),
        case("reshape", "flatten", arg(2, 3, 2), lambda a: dp.reshape(a, -1), lambda a: a.reshape(-1)),
        case("reshape", "6_to_2x1x3", arg(6), lambda a: a.reshape(2, 1, 3), lambda a: a.reshape(2, 1, 3)),
        case("reshape", "scalar_to_1x1", arg(), lambda a: a.reshape((1, 1)), lambda a: a.reshape(1, 1)),
        case("expand_dims", "axis0", arg(3, 4), lambda a: dp.expand_dims(a, 0), lambda a: np.expand_dims(a, 0)),
        case(
            "expand_dims",
            "axis_neg",
            arg(3, 4),
            lambda a: dp.expand_dims(a, -1),
            lambda a: np.expand_dims(a, -1),
        ),
        case(
            "expand_dims",
            "axes_0_2",
            arg(3, 4),
            lambda a: dp.expand_dims(a, (0, 2)),
            lambda a: np.expand_dims(a, (0, 2)),
        ),
        case("expand_dims", "scalar", arg(), lambda a: dp.expand_dims(a, 0), lambda a: np.expand_dims(a, 0)),
        case("expand_dims", "none_index", arg(3, 4), lambda a: a[None], lambda a: a[None]),
        case("expand_dims", "ellipsis_none", arg(2, 3), lambda a: a[..., None], lambda a: a[..., None]),
        case("squeeze", "axis1", arg(3, 1, 4), lambda a: dp.squeeze(a, 1), lambda a: np.squeeze(a, 1)),
        case("squeeze", "all", arg(1, 3, 1), dp.squeeze, np.squeeze),
        case("squeeze", "axis_neg", arg(3, 1), lambda a: dp.squeeze(a, -1), lambda a: np.squeeze(a, -1)),
        case("squeeze", "to_scalar", arg(1), dp.squeeze, np.squeeze),
        case("transpose", "T", arg(3, 4), lambda a: a.T, lambda a: a.T),
        case(
            "transpose",
            "perm",
            arg(2, 3, 4),
            lambda a: dp.transpose(a, (1, 2, 0)),
            lambda a: np.transpose(a, (1, 2, 0)),
        ),
        case(
            "transpose",
            "negative_axes",
            arg(2, 3, 4),
            lambda a: a.transpose(-1, 0, 1),
            lambda a: a.transpose(-1, 0, 1),
        ),
        case("transpose", "reverse", arg(2, 3, 4), dp.transpose, np.transpose),
        _index_case((5,), slice(1, 3), "range"),
        _index_case((5,), slice(None, None, -1), "reverse"),
        _index_case((3, 5), (slice(None), slice(None, None, -2)), "negative_step_2"),
        _index_case((6,), slice(4, 0, -2), "negative_step_bounded"),
        _index_case((3, 4), 1, "int"),
        _index_case((3, 4), (-1, slice(1, None)), "negative_int"),
        _index_case((2, 3, 4), (Ellipsis, 1), "ellipsis_int"),
        _index_case((3, 4), (None, slice(None), slice(1, None)), "none"),
        _index_case((3, 4), (slice(1, None), None, slice(None, None, 2)), "inner_none"),
        _index_case((2, 3, 4), (Ellipsis, slice(None, None, -1), None), "ellipsis_reverse_none"),
        case(
            "embed_slice",
            "strided",
            arg(2, 3),
            _emit("embed_slice", starts=[1, 0], stops=[5, 3], steps=[2, 1], shape=[5, 4]),
            lambda a: _embed(a, (5, 4), (slice(1, 5, 2), slice(0, 3))),
        ),
        case(
            "embed_slice",
            "reverse",
            arg(3),
            _emit("embed_slice", starts=[5], stops=[-1], steps=[-2], shape=[6]),
            lambda a: _embed(a, (6,), (slice(None, None, -2),)),
        ),
    ]
    three = [Arg((2, 3), uniform()), Arg((1, 3), uniform()), Arg((3, 3), uniform())]
    out += [
        case("concat", "axis0", three, lambda *xs: dp.concatenate(xs, axis=0), lambda *xs: np.concatenate(xs)),
        case(
            "concat",
            "axis_neg",
            [Arg((2, 1), uniform()), Arg((2, 3), uniform()), Arg((2, 2), uniform())],
            lambda *xs: dp.concat(list(xs), axis=-1),
            lambda *xs: np.concatenate(xs, axis=-1),
        ),
        case(
            "concat",
            "1d",
            [Arg((2,), uniform()), Arg((3,), uniform()), Arg((1,), uniform())],
            lambda *xs: dp.concatenate(xs),
            lambda *xs: np.concatenate(xs),
        ),
        case(
            "concat",
            "rank3_axis1",
            [Arg((2, 1, 2), uniform()), Arg((2, 2, 2), uniform())],
            lambda *xs: dp.concatenate(xs, axis=1),
            lambda *xs: np.concatenate(xs, axis=1),
        ),
    ]
    return out


def _embed(a: np.ndarray, shape: tuple[int, ...], index: tuple[slice, ...]) -> np.ndarray:
    out = np.zeros(shape, a.dtype)
    out[index] = a
    return out


# -- reductions -----------------------------------------------------------------------------
REDUCTIONS: tuple[tuple[str, Callable[..., dp.Tensor], Callable[..., np.ndarray], Domain], ...] = (
    ("sum", dp.sum, np.sum, uniform()),
    ("mean", dp.mean, np.mean, uniform()),
    ("max", dp.max, np.max, distinct()),
    ("min", dp.min, np.min, distinct()),
    ("logsumexp", dp.logsumexp, special.logsumexp, uniform()),
)
# (input shape, axis, keepdims)
REDUCE_AXES: tuple[tuple[tuple[int, ...], Any, bool], ...] = (
    ((5,), None, False),
    ((3, 4), 0, True),
    ((3, 4), -1, False),
    ((2, 3, 4), (0, 2), False),
    ((2, 3, 4), (-1, -3), True),
    ((2, 3, 4), None, True),
    ((), None, False),
)


def _axis_label(shape: tuple[int, ...], axis: Any, keepdims: bool) -> str:
    ax = "all" if axis is None else "_".join(str(a) for a in np.atleast_1d(axis))
    return f"{_dims(shape)}_axis{ax}{'_keep' if keepdims else ''}"


def reduction_cases() -> list[OpCase]:
    out = [
        case(
            op,
            _axis_label(shape, axis, keep),
            [Arg(shape, dom)],
            lambda a, f=fn, ax=axis, k=keep: f(a, axis=ax, keepdims=k),
            lambda a, r=ref, ax=axis, k=keep: r(a, axis=ax, keepdims=k),
        )
        for op, fn, ref, dom in REDUCTIONS
        for shape, axis, keep in REDUCE_AXES
    ]
    for op in ("sum", "mean", "max", "min"):
        dom = distinct() if op in ("max", "min") else uniform()
        out.append(
            case(
                op,
                "method",
                [Arg((3, 4), dom)],
                lambda a, o=op: getattr(a, o)(axis=1),
                lambda a, o=op: getattr(a, o)(axis=1),
            )
        )
    ints = [Arg((3, 4), small_ints(-9, 9), "int32")]
    out += [
        case("sum", "int32", ints, lambda a: dp.sum(a, axis=1), lambda a: np.sum(a, axis=1)),
        case("sum", "bool_count", [Arg((3, 4), bools, "bool")], dp.sum, np.sum),
        case("max", "int32_ties", ints, lambda a: dp.max(a, axis=0), lambda a: np.max(a, axis=0)),
        case(
            "min",
            "int32_ties",
            ints,
            lambda a: dp.min(a, axis=-1, keepdims=True),
            lambda a: np.min(a, axis=-1, keepdims=True),
        ),
        case(
            "logsumexp",
            "large",
            [Arg((2, 5), uniform(500.0, 700.0))],
            lambda a: dp.logsumexp(a, axis=1),
            lambda a: special.logsumexp(a, axis=1),
        ),
    ]
    return out + arg_reduction_cases()


def arg_reduction_cases() -> list[OpCase]:
    out = []
    for op, fn, ref in (("argmax", dp.argmax, np.argmax), ("argmin", dp.argmin, np.argmin)):
        out += [
            case(op, "flat", [Arg((5,), distinct())], fn, ref),
            case(
                op,
                "axis1",
                [Arg((3, 4), distinct())],
                lambda a, f=fn: f(a, axis=1),
                lambda a, r=ref: r(a, axis=1),
            ),
            case(
                op,
                "axis_neg_keep",
                [Arg((3, 4), distinct())],
                lambda a, f=fn: f(a, axis=-2, keepdims=True),
                lambda a, r=ref: r(a, axis=-2, keepdims=True),
            ),
            case(
                op,
                "all_keep",
                [Arg((2, 3, 4), distinct())],
                lambda a, f=fn: f(a, keepdims=True),
                lambda a, r=ref: r(a, axis=None, keepdims=True),
            ),
            case(
                op,
                "ties_first",
                [Arg((4, 5), small_ints(0, 2), "int32")],
                lambda a, f=fn: f(a, axis=1),
                lambda a, r=ref: r(a, axis=1),
            ),
            case(
                op,
                "axes_0_2",
                [Arg((2, 3, 4), small_ints(0, 3))],
                _emit(op, axes=[0, 2], keepdims=True),
                lambda a, r=ref: r(a.transpose(1, 0, 2).reshape(3, 8), axis=1).reshape(1, 3, 1),
            ),
        ]
    return out


# -- stencils and objectives -------------------------------------------------------------
NP_MODES = {"reflect": "symmetric", "mirror": "reflect", "nearest": "edge", "wrap": "wrap"}
PAD_MODES = ("reflect", "constant", "nearest", "mirror", "wrap")


def _np_pad(a: np.ndarray, before: Sequence[int], after: Sequence[int], mode: str, cval: float) -> np.ndarray:
    widths = list(zip(before, after, strict=True))
    if mode == "constant":
        return np.pad(a, widths, constant_values=cval)
    return np.pad(a, widths, mode=NP_MODES[mode])


def _pad_matrix(shape: tuple[int, ...], before: Sequence[int], after: Sequence[int], mode: str) -> np.ndarray:
    """The linear part of pad as a matrix, from np.pad of basis arrays (cval 0)."""
    n = math.prod(shape)
    cols = [_np_pad(np.eye(n)[k].reshape(shape), before, after, mode, 0.0).ravel() for k in range(n)]
    return np.stack(cols, axis=1)


def stencil_cases() -> list[OpCase]:
    out = []
    shape = (4, 5)
    for mode in PAD_MODES:
        for before, after in (((2, 1), (1, 3)), ((6, 0), (0, 11))):
            attrs = {"before": list(before), "after": list(after), "mode": mode, "cval": 0.75}
            label = f"{mode}_{'x'.join(map(str, before))}_{'x'.join(map(str, after))}"
            out.append(
                case(
                    "pad",
                    label,
                    [Arg(shape, uniform())],
                    _emit("pad", **attrs),
                    lambda a, b=before, e=after, m=mode: _np_pad(a, b, e, m, 0.75),
                )
            )
            padded = tuple(n + b + e for n, b, e in zip(shape, before, after, strict=True))
            matrix = _pad_matrix(shape, before, after, mode)
            out.append(
                case(
                    "pad_adjoint",
                    label,
                    [Arg(padded, uniform())],
                    _emit("pad_adjoint", **attrs),
                    lambda g, m=matrix: (m.T @ g.ravel()).reshape(shape),
                )
            )
    for wshape in ((3, 2), (1, 4), (4, 5)):
        weights = np.arange(1.0, 1.0 + math.prod(wshape)).reshape(wshape) / 7.0
        weights[0, 0] = 0.0 if weights.size > 1 else weights[0, 0]
        out.append(
            case(
                "correlate_valid",
                "x".join(map(str, wshape)),
                [Arg((5, 6), uniform())],
                _emit("correlate_valid", weights=weights.tolist()),
                lambda a, w=weights: signal.correlate(a, w, mode="valid"),
            )
        )
    out.append(
        case(
            "correlate_valid",
            "batched_1x3",
            [Arg((2, 4, 5), uniform())],
            _emit("correlate_valid", weights=[[[0.5, -1.0, 0.25]]]),
            lambda a: signal.correlate(a, np.array([[[0.5, -1.0, 0.25]]]), mode="valid"),
        )
    )
    # The condition holds everywhere: compiled programs report a false one as a NumericalError.
    out.append(
        case(
            "guard",
            "3x4",
            [Arg((3, 4), uniform()), Arg((3, 4), lambda rng, shape: np.ones(shape, bool), "bool")],
            _emit("guard", message="test"),
            lambda a, ok: a,
        )
    )
    return out


# -- gather and scatter -------------------------------------------------------------------
def _add_at_expect(a: np.ndarray, index: Any, values: np.ndarray) -> np.ndarray:
    out = a.copy()
    np.add.at(out, index, values)
    return out


def gather_cases() -> list[OpCase]:
    """take (np.take, take_along_axis, integer-array indexing), add_at (np.add.at) and
    index_array, with positions as int32 inputs (``c``/``b``) or NumPy constants."""
    ints = [Arg((4, 5), uniform()), Arg((3, 2), small_ints(-5, 5), "int32")]
    wide = [Arg((5, 3), uniform()), Arg((2, 4), small_ints(-12, 12), "int32")]
    flat = np.array([[0, 11], [5, 5]])
    along = np.array([[0, 3], [2, 2], [1, 0]])
    pos = np.array([0, 2, 2, 4, 0, 0])
    return [
        case("take", "axis1_input", ints, lambda a, i: dp.take(a, i, axis=1), lambda a, i: np.take(a, i, axis=1)),
        case("take", "wrap", wide, lambda a, i: dp.take(a, i, 0, "wrap"), lambda a, i: np.take(a, i, 0, mode="wrap")),
        case("take", "clip", wide, lambda a, i: dp.take(a, i, 0, "clip"), lambda a, i: np.take(a, i, 0, mode="clip")),
        case("take", "flat_constant", [Arg((3, 4), uniform())], lambda a: dp.take(a, flat), lambda a: np.take(a, flat)),
        case(
            "take",
            "along_axis",
            [Arg((3, 4), uniform())],
            lambda a: dp.take_along_axis(a, along, axis=1),
            lambda a: np.take_along_axis(a, along, axis=1),
        ),
        case(
            "take",
            "along_axis_broadcast",
            [Arg((3, 4), uniform()), Arg((2, 1), small_ints(-3, 3), "int32")],
            lambda a, i: dp.take_along_axis(a, i, axis=0),
            lambda a, i: np.take_along_axis(a, i, axis=0),
        ),
        case("take", "fancy_slices", [Arg((3, 4), uniform())], lambda a: a[1:, [3, 0, 3]], lambda a: a[1:, [3, 0, 3]]),
        case(
            "take",
            "fancy_split",
            [Arg((2, 3, 4), uniform()), Arg((2, 2), small_ints(-4, 4), "int32")],
            lambda a, i: a[0, :, i],
            lambda a, i: a[0, :, i],
        ),
        case(
            "take",
            "fancy_two_arrays",
            [Arg((3, 4, 5), uniform()), Arg((2, 1), small_ints(-3, 3), "int32")],
            lambda a, i: a[i, :, [4, 0, -1]],
            lambda a, i: a[i, :, [4, 0, -1]],
        ),
        case(
            "add_at",
            "axis0_constant",
            [Arg((5, 3), uniform()), Arg((6, 3), uniform())],
            lambda a, v: dp.add_at(a, pos, v),
            lambda a, v: _add_at_expect(a, pos, v),
        ),
        case(
            "add_at",
            "axis1_input_clip",
            [Arg((2, 3), uniform()), Arg((4,), small_ints(-4, 6), "int32"), Arg((2, 4), uniform())],
            lambda a, i, v: dp.add_at(a, (slice(None), i), v, mode="clip"),
            lambda a, i, v: _add_at_expect(a, (slice(None), np.clip(i, 0, 2)), v),
        ),
        case(
            "add_at",
            "along_axis",
            [Arg((3, 4), uniform()), Arg((3, 2), small_ints(0, 4), "int32"), Arg((3, 2), uniform())],
            lambda a, i, v: a.builder.emit("add_at", [a, i, v], {"axis": 1, "along": True}),
            lambda a, i, v: _add_at_expect(a, (np.arange(3)[:, None], i), v),
        ),
        _source_case(
            "index_array",
            "2x3",
            lambda g, d: g.emit("index_array", [], table_attrs(np.array([[3, -1, 0], [7, 7, 2]]))),
            lambda: np.array([[3, -1, 0], [7, 7, 2]]),
        ),
    ]


# -- matrix product -----------------------------------------------------------------------
def _matmul_t(ta: bool, tb: bool) -> Callable[[np.ndarray, np.ndarray], np.ndarray]:
    """np.matmul of the operands, either one's last two axes swapped (in float64, rounded)."""

    def expect(a: np.ndarray, b: np.ndarray) -> np.ndarray:
        x = np.swapaxes(a, -1, -2) if ta else a
        y = np.swapaxes(b, -1, -2) if tb else b
        return np.matmul(x.astype(np.float64), y.astype(np.float64)).astype(a.dtype)

    return expect


def matmul_cases() -> list[OpCase]:
    """matmul: 2-D, batched with broadcasting, vectors on either side, and the transpose
    flags its gradients use."""
    u = uniform()
    return [
        case("matmul", "2d", [Arg((3, 4), u), Arg((4, 5), u)], dp.matmul, np.matmul),
        case("matmul", "batch_broadcast", [Arg((2, 1, 3, 2), u), Arg((3, 2, 2), u)], dp.matmul, np.matmul),
        case("matmul", "vector_matrix", [Arg((3,), u), Arg((2, 3, 2), u)], dp.matmul, np.matmul),
        case("matmul", "matrix_vector", [Arg((2, 3), u), Arg((3,), u)], dp.matmul, np.matmul),
        case("matmul", "vector_vector", [Arg((4,), u), Arg((4,), u)], dp.matmul, np.matmul),
        case(
            "matmul",
            "transposed",
            [Arg((2, 4, 3), u), Arg((5, 4), u)],
            _emit("matmul", transpose_a=True, transpose_b=True),
            _matmul_t(True, True),
        ),
    ]


# -- resampling ---------------------------------------------------------------------------
RESAMPLE_COORDS = np.array([[-0.7, 0.4, 2.6, 3.9], [1.2, 4.5, -1.3, 2.2]])


def _scipy_matrix(apply: Callable[[np.ndarray], np.ndarray], shape: tuple[int, ...]) -> np.ndarray:
    """The matrix of a linear scipy operator, column by column from unit inputs."""
    cols = [apply(np.eye(math.prod(shape))[k].reshape(shape)).ravel() for k in range(math.prod(shape))]
    return np.stack(cols, axis=1)


def _prefilter(a: np.ndarray, mode: str, npad: int) -> np.ndarray:
    """scipy's prepadding along axis 1, then its spline filter along axis 1."""
    widths = [(0, 0), (npad, npad)]
    padded = np.pad(a, widths, mode="edge") if mode == "nearest" else np.pad(a, widths)
    return ndimage.spline_filter1d(padded, 3, axis=1, mode=mode)


def _along_axis1(m: np.ndarray, g: np.ndarray) -> np.ndarray:
    return np.einsum("ij,rj->ri", m, g)


def resample_cases() -> list[OpCase]:
    """spline_filter1d and its adjoint (with prepadding), resample (map_coordinates at
    constant coordinates) and resample_adjoint, against scipy.ndimage (the adjoints
    against the transposed matrix of scipy's operator)."""
    filt = {"axis": 1, "mode": "nearest", "npad": 2}
    grid = {"axis": 1, "mode": "grid-constant", "npad": 1}
    f_grid = _scipy_matrix(lambda r: _prefilter(r, "grid-constant", 1), (1, 11))
    mc = {"order": 1, "mode": "reflect"}
    a_mc = _scipy_matrix(lambda x: ndimage.map_coordinates(x, RESAMPLE_COORDS, **mc), (4, 5))
    mc_attrs: dict[str, Any] = {}

    def adjoint(g: dp.Tensor) -> dp.Tensor:
        if not mc_attrs:  # the attributes dp.map_coordinates gives its resample node
            probe = dp.GraphBuilder("probe")
            probe.output("y", dp.map_coordinates(probe.input("x", (4, 5), "float64"), RESAMPLE_COORDS, **mc))
            mc_attrs.update(next(n.attrs for n in probe.build().nodes if n.op == "resample"))
        return g.builder.emit("resample_adjoint", [g], mc_attrs)

    return [
        case(
            "spline_filter1d",
            "nearest_npad2",
            [Arg((3, 7), uniform())],
            lambda a: a.builder.emit("spline_filter1d", [a], filt),
            lambda a: _prefilter(a, "nearest", 2),
        ),
        case(
            "spline_filter1d_adjoint",
            "grid_constant_npad1",
            [Arg((2, 13), uniform())],
            lambda g: g.builder.emit("spline_filter1d_adjoint", [g], grid),
            lambda g: _along_axis1(f_grid.T, g),
        ),
        case(
            "resample",
            "map_coordinates_order1_reflect",
            [Arg((4, 5), uniform())],
            lambda a: dp.map_coordinates(a, RESAMPLE_COORDS, **mc),
            lambda a: ndimage.map_coordinates(a, RESAMPLE_COORDS, **mc),
        ),
        case(
            "resample_adjoint",
            "map_coordinates_order1_reflect",
            [Arg((4,), uniform())],
            adjoint,
            lambda g: (a_mc.T @ g).reshape(4, 5),
        ),
        *radon_cases(),
        *fanbeam_cases(),
    ]


RADON_THETA = [0.0, 33.3, 90.0, 151.7]


def radon_cases() -> list[OpCase]:
    """radon and radon_adjoint on a stack of two slices, against the constant sparse map of
    skimage's taps (`radon_ref.radon_map`) and its transpose."""
    from dpt_ir.reference import radon_ref

    m = radon_ref.radon_map((5, 6), RADON_THETA, False)
    side = radon_ref.radon_shape((5, 6), RADON_THETA, False)[0]
    attrs = {"theta": RADON_THETA, "circle": False, "in_shape": [2, 5, 6], "out_shape": [2, side, len(RADON_THETA)]}
    return [
        case(
            "radon",
            "stack2_5x6_padded",
            [Arg((2, 5, 6), uniform())],
            lambda a: dp.radon(a, RADON_THETA, circle=False),
            lambda a: np.stack([m.apply(s.ravel()).reshape(side, -1) for s in a]),
        ),
        case(
            "radon_adjoint",
            "stack2_5x6_padded",
            [Arg((2, side, len(RADON_THETA)), uniform())],
            lambda g: g.builder.emit("radon_adjoint", [g], attrs),
            lambda g: np.stack([m.transpose().apply(s.ravel()).reshape(5, 6) for s in g]),
        ),
    ]


FAN = {"source_origin": 9.0, "origin_det": 4.0, "det_count": 7, "det_width": 1.1}
FAN_ANGLES = [0.3, 1.9, 3.7]


def fanbeam_matrix(h: int, w: int, angles: Sequence[float], so: float, od: float, n: int, dw: float) -> np.ndarray:
    """The dense (lines, pixels) matrix of fan-beam line integrals (`dpt_ir.ir.fanbeam`'s
    geometry), computed independently: each line S + t r (t real) clipped against each pixel
    square [x0, x0 + 1] x [y0, y0 + 1] (Liang-Barsky); the length inside is the weight. Angles
    must be generic: a line along a pixel edge would count for both pixels."""
    out = np.zeros((len(angles) * n, h * w))
    for a, t in enumerate(angles):
        src = np.array([np.sin(t) * so, -np.cos(t) * so])
        for d in range(n):
            u = (d - n / 2 + 0.5) * dw
            r = np.array([-np.sin(t) * od + u * np.cos(t), np.cos(t) * od + u * np.sin(t)]) - src
            for i in range(h):
                for j in range(w):
                    lo = np.array([j - w / 2, h / 2 - i - 1])
                    t0, t1 = -np.inf, np.inf
                    for ax in range(2):
                        e = sorted([(lo[ax] - src[ax]) / r[ax], (lo[ax] + 1 - src[ax]) / r[ax]])
                        t0, t1 = max(t0, e[0]), min(t1, e[1])
                    out[a * n + d, i * w + j] = max(0.0, t1 - t0) * np.hypot(*r)
    return out


def fanbeam_cases() -> list[OpCase]:
    """fanbeam and fanbeam_adjoint on a stack of two slices, against the dense matrix of exact
    pixel lengths (`fanbeam_matrix`) and its transpose."""
    m = fanbeam_matrix(5, 6, FAN_ANGLES, FAN["source_origin"], FAN["origin_det"], FAN["det_count"], FAN["det_width"])
    lines = (len(FAN_ANGLES), FAN["det_count"])
    attrs = {"angles": FAN_ANGLES, **FAN, "in_shape": [2, 5, 6]}
    return [
        case(
            "fanbeam",
            "stack2_5x6",
            [Arg((2, 5, 6), uniform())],
            lambda a: dp.fanbeam(a, FAN_ANGLES, **FAN),
            lambda a: np.stack([(m @ s.ravel()).reshape(lines) for s in a]),
        ),
        case(
            "fanbeam_adjoint",
            "stack2_5x6",
            [Arg((2, *lines), uniform())],
            lambda g: g.builder.emit("fanbeam_adjoint", [g], attrs),
            lambda g: np.stack([(m.T @ s.ravel()).reshape(5, 6) for s in g]),
        ),
    ]


# -- loops ------------------------------------------------------------------------------
# One step ``c' = sin(c) * w + x, y = c * x`` scanned over 4 rows: carry a (3,), xs b
# (4, 3), closed-over w = c (3,). The scan's packed value is [final carry, ys]; scan_vjp's
# is [d a, d xs, d w] of a packed cotangent (input d), each against a NumPy loop.
LOOP_ROWS = 4


def _loop_step(carry: dp.Tensor, x: dp.Tensor, w: dp.Tensor) -> tuple[dp.Tensor, dp.Tensor]:
    return dp.sin(carry) * w + x, carry * x


def _scan(a: dp.Tensor, xs: dp.Tensor, w: dp.Tensor) -> dp.Tensor:
    final, ys = dp.scan(lambda c, x: _loop_step(c, x, w), a, xs, checkpoint=2)
    return final + dp.sum(ys, axis=0)


def _scan_expect(a: np.ndarray, xs: np.ndarray, w: np.ndarray) -> np.ndarray:
    c, total = a, np.zeros_like(a)
    for x in xs:
        total = total + c * x
        c = np.sin(c) * w + x
    return c + total


def _scan_vjp(a: dp.Tensor, xs: dp.Tensor, w: dp.Tensor, ct: dp.Tensor) -> dp.Tensor:
    _scan(a, xs, w)
    node = next(n for n in reversed(a.builder.nodes) if n.op == "scan")
    return a.builder.emit("scan_vjp", [a, xs, w, ct], node.attrs)


def _scan_vjp_expect(a: np.ndarray, xs: np.ndarray, w: np.ndarray, ct: np.ndarray) -> np.ndarray:
    carries = [a]
    for x in xs[:-1]:
        carries.append(np.sin(carries[-1]) * w + x)
    g_c, g_ys = ct[:3], ct[3:].reshape(xs.shape)
    g_xs, g_w = np.zeros_like(xs), np.zeros_like(w)
    for i in range(len(xs) - 1, -1, -1):
        c = carries[i]
        g_xs[i] = g_c + g_ys[i] * c
        g_w = g_w + g_c * np.sin(c)
        g_c = g_c * np.cos(c) * w + g_ys[i] * xs[i]
    return np.concatenate([g_c, g_xs.ravel(), g_w])


def loop_cases() -> list[OpCase]:
    loop_args = [Arg((3,), uniform()), Arg((LOOP_ROWS, 3), uniform()), Arg((3,), uniform())]
    cotangent = Arg((3 + 3 * LOOP_ROWS,), uniform())  # scan_vjp is differentiable in it too (linear)
    return [
        case("scan", "4_rows", loop_args, _scan, _scan_expect),
        case("scan_vjp", "4_rows", [*loop_args, cotangent], _scan_vjp, _scan_vjp_expect),
    ]


def all_cases() -> tuple[OpCase, ...]:
    return tuple(
        unary_cases()
        + binary_cases()
        + compare_cases()
        + select_cases()
        + source_cases()
        + shape_cases()
        + reduction_cases()
        + stencil_cases()
        + gather_cases()
        + matmul_cases()
        + resample_cases()
        + loop_cases()
    )


CASES: tuple[OpCase, ...] = all_cases()


def compiled(c: OpCase) -> bool:
    """Whether ``c`` joins the batched op-table programs of the compiled tests: not loop ops
    (kind ``loop``), which compile to loop programs without tape passes (the batches run
    tape passes); compiled loops have their own tests in ``tests/loops``."""
    return dp.get_op(c.op).kind != "loop"


COMPILED_CASES: tuple[OpCase, ...] = tuple(c for c in CASES if compiled(c))


# -- special values -----------------------------------------------------------------------
# Every op at ±0, ±inf, NaN, the extremes of the dtype and its overflow thresholds. Inputs
# are fixed (the rng is ignored); ``expect`` is NumPy's value (`expected_special`), the
# gradient oracle is named by ``grad_oracle``. Ops without a float input or output
# (logical ops, iota, index_array) have no special values.
# Loop ops evaluate their body's ops, whose special values those ops' own cases cover.
NO_SPECIAL_VALUES = ("logical_and", "logical_or", "logical_not", "iota", "index_array", "scan", "scan_vjp")


def special_values(dtype: str) -> list[float]:
    """±0, ±inf, NaN, small and large magnitudes, and the extremes of ``dtype``."""
    f = np.finfo(dtype)
    extremes = [float(f.tiny), -float(f.tiny), float(f.smallest_subnormal), float(f.max), -float(f.max)]
    return [0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, -2.5, *extremes]


def _log_max(dtype: str) -> float:
    return math.log(float(np.finfo(dtype).max))


def exp_thresholds(dtype: str) -> list[float]:
    """Arguments around exp's overflow threshold log(max): finite results just below it
    (and up to 4 below: expm1 once overflowed there), inf just above, and underflow."""
    t = _log_max(dtype)
    return [t - 4.0, t - 2.0, t * (1 - 1e-4), t * (1 + 1e-4), -t * (1 - 1e-4), -t * (1 + 1e-4), -t - 30.0]


def square_thresholds(dtype: str) -> list[float]:
    """Around sqrt(max), where x * x overflows."""
    r = math.sqrt(float(np.finfo(dtype).max))
    return [r * (1 - 1e-4), r * (1 + 1e-4), -r * (1 + 1e-4)]


def domain_edges(dtype: str) -> list[float]:
    """Around -1 (log1p's pole) and 1 / max (where 1 / x overflows)."""
    eps = float(np.finfo(dtype).eps)
    return [-1.0 + eps, -1.0 - 2 * eps, 1.0 / float(np.finfo(dtype).max) / 4]


THRESHOLDS: dict[str, Callable[[str], list[float]]] = {
    **{op: exp_thresholds for op in ("exp", "expm1", "sigmoid", "softplus", "tanh", "erf", "sin", "cos")},
    **{op: square_thresholds for op in ("square",)},
    **{op: domain_edges for op in ("log", "log1p", "sqrt", "rsqrt", "reciprocal")},
}


def _fixed(
    arrays: Callable[[str], dict[str, np.ndarray]],
) -> Callable[[np.random.Generator, str], dict[str, np.ndarray]]:
    return lambda rng, dtype: arrays(dtype)


def expected_special(ref: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``ref`` evaluated with NumPy's floating-point warnings silenced (they are the point)."""

    def expect(*xs: np.ndarray, **kw: np.ndarray) -> np.ndarray:
        with np.errstate(all="ignore"):
            return np.asarray(ref(*xs, **kw))

    return expect


def special_case(
    op: str,
    label: str,
    arrays: Callable[[str], dict[str, np.ndarray]],
    fn: Callable[..., dp.Tensor],
    ref: Callable[..., np.ndarray],
    oracle: str,
    dtypes: tuple[str, ...] = FLOATS,
) -> OpCase:
    """``out = fn(a, b, ...)`` over the fixed inputs ``arrays(dtype)`` (float inputs, in
    name order, differentiated unless ``oracle`` is empty)."""

    def build(dtype: str) -> dp.Graph:
        g = dp.GraphBuilder(f"special_{op}")
        xs = [
            g.input(n, v.shape, str(v.dtype), requires_grad=v.dtype.kind == "f" and bool(oracle))
            for n, v in arrays(dtype).items()
        ]
        g.output(OUTPUT, fn(*xs))
        return g.build()

    float_names = tuple(n for n, v in arrays("float64").items() if v.dtype.kind == "f")
    expect = expected_special(ref)
    return OpCase(
        op=op,
        name=f"{op}/special_{label}",
        build=build,
        inputs=_fixed(arrays),
        expect=lambda **kw: expect(*kw.values()),
        wrt=float_names if oracle else (),
        dtypes=dtypes,
        grad_oracle=oracle,
    )


BINARY_SPECIALS = (0.0, -0.0, math.inf, -math.inf, math.nan, 1.0, -1.0, 0.5, -2.5, 2.0)
# Every elementwise special input has this length (values repeated cyclically): compiled
# as one batch, cases of one iteration space fuse horizontally into a few kernels.
SPECIAL_LENGTH = len(BINARY_SPECIALS) ** 2


def _cycled(values: Sequence[float], dtype: str) -> np.ndarray:
    return np.resize(np.array(values, dtype), SPECIAL_LENGTH)


def _vector(values: Callable[[str], list[float]]) -> Callable[[str], dict[str, np.ndarray]]:
    return lambda dtype: {"a": _cycled(values(dtype), dtype)}


def _grid(dtype: str) -> dict[str, np.ndarray]:
    """Every pair of `BINARY_SPECIALS`, one element each (no broadcasting: a broadcast
    input's gradient would sum the pairs' gradients, and one NaN would hide the others)."""
    v = np.array(BINARY_SPECIALS, dtype)
    return {"a": np.repeat(v, v.size), "b": np.tile(v, v.size)}


def _pairs(pairs: Callable[[str], list[tuple[float, float]]]) -> Callable[[str], dict[str, np.ndarray]]:
    def arrays(dtype: str) -> dict[str, np.ndarray]:
        a, b = zip(*pairs(dtype), strict=True)
        return {"a": _cycled(a, dtype), "b": _cycled(b, dtype)}

    return arrays


def _binary_thresholds(op: str) -> Callable[[str], list[tuple[float, float]]]:
    """Pairs at the op's overflow and underflow thresholds and C99's special cases."""

    def pairs(dtype: str) -> list[tuple[float, float]]:
        f = np.finfo(dtype)
        big, tiny, sub = float(f.max), float(f.tiny), float(f.smallest_subnormal)
        r = math.sqrt(big)
        p10 = math.log10(big)
        table = {
            "add": [(big, big), (big, -big), (-big, -big * 0.5), (tiny, -tiny)],
            "sub": [(big, -big), (-big, big), (big, big), (tiny, tiny)],
            "mul": [(r * 1.001, r * 1.001), (r * 0.999, r * 0.999), (big, 2.0), (tiny, tiny), (-big, 0.5)],
            "div": [(big, 0.5), (1.0, sub), (tiny, big), (-big, tiny), (sub, 2.0)],
            "pow": [
                (10.0, p10 * (1 - 1e-4)),
                (10.0, p10 * (1 + 1e-4)),
                (-2.0, 3.0),
                (-2.0, 0.5),
                (-math.inf, 3.0),
                (-math.inf, 2.0),
                (-0.0, -1.0),
                (-0.0, -2.0),
                (1.0, math.nan),
                (math.nan, 0.0),
                (0.5, math.inf),
                (2.0, -math.inf),
                (-1.0, math.inf),
                (tiny, 2.0),
            ],
            "atan2": [(big, big), (tiny, tiny), (sub, sub), (big, tiny), (-tiny, -big)],
            "maximum": [(big, math.inf), (-big, -math.inf), (tiny, sub)],
            "minimum": [(big, math.inf), (-big, -math.inf), (tiny, sub)],
        }
        return table[op]

    return pairs


TORCH_BINARY = {
    "add": "add",
    "sub": "sub",
    "mul": "mul",
    "div": "div",
    "pow": "pow",
    "atan2": "atan2",
    "maximum": "",
    "minimum": "",
}


def elementwise_special_cases() -> list[OpCase]:
    out = []
    for op, fn, ref, _ in UNARY:
        if op == "relu":  # UNARY's reference returns 0 for NaN; NumPy's maximum keeps NaN
            ref = lambda a: np.maximum(a, 0)  # noqa: E731
        extra = THRESHOLDS.get(op, lambda dtype: [])
        oracle = "" if not dp.get_op(op).differentiable else (f"rule:{op}" if op in ("abs", "relu") else f"torch:{op}")

        def values(dtype: str, extra: Callable[[str], list[float]] = extra) -> list[float]:
            return special_values(dtype) + extra(dtype)

        out.append(special_case(op, "values", _vector(values), fn, ref, oracle))
    for op, fn, ref, _, _ in BINARY:
        oracle = f"torch:{TORCH_BINARY[op]}" if TORCH_BINARY[op] else f"rule:{op}"
        out.append(special_case(op, "grid", _grid, fn, ref, oracle))
        out.append(special_case(op, "thresholds", _pairs(_binary_thresholds(op)), fn, ref, oracle))
    for op, fn, _, ref in COMPARE:
        out.append(special_case(op, "grid", _grid, fn, ref, ""))
    out += [
        special_case(
            "where",
            "grid",
            lambda dtype: {"c": np.arange(SPECIAL_LENGTH) % 3 == 0, **_grid(dtype)},
            dp.where,
            np.where,
            "torch:where",
        ),
        special_case(
            "clamp",
            "values",
            _vector(special_values),
            lambda a: dp.clamp(a, -0.5, 0.7),
            lambda a: np.clip(a, -0.5, 0.7),
            "torch:clamp",
        ),
        special_case(
            "cast",
            "to_other_float",
            lambda dtype: {"a": _cycled(special_values(_other(dtype)), _other(dtype))},
            lambda a: dp.cast(a, _other(a.dtype)),
            lambda a: a.astype(_other(str(a.dtype))),
            "linear",
        ),
        special_case(
            "guard",
            "values",
            lambda dtype: {"a": _cycled(special_values(dtype), dtype), "ok": np.ones(SPECIAL_LENGTH, bool)},
            _emit("guard", message="test"),
            lambda a, ok: a,
            "linear",
        ),
        _constant_special_case(),
    ]
    return out


def _constant_special_case() -> OpCase:
    values = (math.nan, math.inf, -math.inf, -0.0)

    def build(dtype: str) -> dp.Graph:
        g = dp.GraphBuilder("special_constant")
        g.output(OUTPUT, dp.concatenate([g.constant(v, dtype, (1,)) for v in values]))
        return g.build()

    return OpCase(
        op="constant",
        name="constant/special_literals",
        build=build,
        inputs=lambda rng, dtype: {},
        expect=lambda: np.array(values),
    )


# Rows of a (6, 3) input reduced over axis 1: a NaN, ±inf, inf - inf, an overflowing sum
# (finite mean in float64, see docs/design-decisions.md), signed zero and -max.
def _rows(dtype: str) -> dict[str, np.ndarray]:
    big = float(np.finfo(dtype).max)
    rows = [
        [1.0, math.nan, 2.0],
        [math.inf, 1.0, 2.0],
        [-math.inf, 1.0, -2.0],
        [math.inf, -math.inf, 1.0],
        [big, big, 1.0],
        [-0.0, 0.5, -big],
    ]
    return {"a": np.array(rows, dtype)}


def _in_float64(fn: Callable[..., np.ndarray]) -> Callable[[np.ndarray], np.ndarray]:
    """NumPy's reduction computed in float64 and rounded once (dpt_ir's accumulation)."""
    return lambda a: np.asarray(fn(a.astype(np.float64), axis=1)).astype(a.dtype)


REDUCTION_SPECIALS: tuple[tuple[str, Callable[..., np.ndarray], str], ...] = (
    ("sum", _in_float64(np.sum), "linear"),
    ("mean", _in_float64(np.mean), "linear"),
    ("max", lambda a: np.max(a, axis=1), "rule:max"),
    ("min", lambda a: np.min(a, axis=1), "rule:min"),
    ("logsumexp", _in_float64(special.logsumexp), "rule:logsumexp"),
    ("argmax", lambda a: np.argmax(a, axis=1).astype(np.int32), ""),
    ("argmin", lambda a: np.argmin(a, axis=1).astype(np.int32), ""),
)


def reduction_special_cases() -> list[OpCase]:
    return [
        special_case(op, "rows", _rows, lambda a, o=op: getattr(dp, o)(a, axis=1), ref, oracle)
        for op, ref, oracle in REDUCTION_SPECIALS
    ]


def _fill(shape: tuple[int, ...], dtype: str, shift: int) -> np.ndarray:
    """``shape`` filled with `special_values` of ``dtype`` but ±max, rotated by ``shift``.
    (Folds and correlations add several inputs: max + max + -inf is NaN or -inf depending on
    the order of the terms, which the reference and the kernels need not share.)"""
    big = float(np.finfo(dtype).max)
    v = [x for x in special_values(dtype) if abs(x) != big]
    return np.resize(np.array(v[shift:] + v[:shift], dtype), shape)


def _correlate_direct(a: np.ndarray, w: np.ndarray) -> np.ndarray:
    """Valid correlation as scipy.ndimage computes it: float64, zero weights skipped."""
    out_shape = tuple(n - k + 1 for n, k in zip(a.shape, w.shape, strict=True))
    out = np.zeros(out_shape)
    for t in np.ndindex(*w.shape):
        if w[t] != 0:
            out += w[t] * a[tuple(slice(o, o + n) for o, n in zip(t, out_shape, strict=True))]
    return out.astype(a.dtype)


def _pad_adjoint_direct(g: np.ndarray, attrs: dict[str, Any]) -> np.ndarray:
    """The fold of ``pad``: every padded position's cotangent added onto the input element
    it copies (np.pad of the flat indices says which)."""
    before, after, mode = attrs["before"], attrs["after"], attrs["mode"]
    shape = tuple(n - b - e for n, b, e in zip(g.shape, before, after, strict=True))
    index = _np_pad(np.arange(math.prod(shape)).reshape(shape), before, after, mode, -1).ravel()
    out = np.zeros(math.prod(shape), g.dtype)
    keep = index >= 0
    np.add.at(out, index[keep], g.ravel()[keep])
    return out.reshape(shape)


def view_special_cases() -> list[OpCase]:
    """The first case of every shape, stencil, gather and scatter op (and `slice`'s strided
    ones), with its float inputs filled with special values: views and gathers route them,
    stencils and scatters add them."""
    firsts: dict[str, OpCase] = {}
    for c in shape_cases() + stencil_cases() + gather_cases() + resample_cases():
        firsts.setdefault(c.op, c)
    out = []
    for op, c in firsts.items():
        if op == "guard":
            continue  # `elementwise_special_cases` has it
        attrs = next(n.attrs for n in c.build("float64").nodes if n.op == op)
        expect = None  # the case's own NumPy reference routes special values as they are
        if op == "correlate_valid":  # the case's reference (scipy.signal) may go through an FFT
            expect = lambda a, at=attrs: _correlate_direct(a, np.array(at["weights"]))  # noqa: E731
        if op == "pad_adjoint":  # the case's reference is a matrix product: 0 * inf would be NaN
            expect = lambda g, at=attrs: _pad_adjoint_direct(g, at)  # noqa: E731
        if op == "index_array":
            continue  # no float values
        if op in RESAMPLE_OPS:  # a constant sparse map: the sum of each row's taps (docs/resampling.md)
            expect = lambda *xs, c=c: _own_reference(c, xs)  # noqa: E731
        if op == "add_at":  # dpt_ir's documented sum: float32 in float64, rounded once
            expect = lambda *xs, c=c: c.expect(**_wide(c, xs)).astype(xs[0].dtype)  # noqa: E731
        out.append(_respecial(c, expect))
    return [*out, zero_tap_case()]


RESAMPLE_OPS = (
    *("spline_filter1d", "spline_filter1d_adjoint", "resample", "resample_adjoint"),
    *("radon", "radon_adjoint", "fanbeam", "fanbeam_adjoint"),
)


def _own_reference(c: OpCase, arrays: Sequence[np.ndarray]) -> np.ndarray:
    """The op's NumPy reference on the case's node: at special values a sparse map's
    semantics are its rows' sums (zero weights are not taps), which a dense matrix product
    would turn into NaN (0 * inf)."""
    graph = c.build(str(arrays[0].dtype))
    node = next(n for n in graph.nodes if n.op == c.op)
    op = dp.get_op(c.op)
    return op.reference(op.parse_attrs(node.attrs, node.name), arrays[0])


def _wide(c: OpCase, arrays: Sequence[np.ndarray]) -> dict[str, np.ndarray]:
    """The inputs of case ``c``, floats in float64, by name."""
    names = list(c.inputs(np.random.default_rng(0), "float64"))
    return {n: a.astype(np.float64) if a.dtype.kind == "f" else a for n, a in zip(names, arrays, strict=True)}


ZERO_TAP = np.array([[0.0, 0.5], [-1.0, 0.25], [2.0, 0.75]])


def _zero_tap_image(dtype: str) -> dict[str, np.ndarray]:
    """Finite pixels but an infinity that only the zero tap of `ZERO_TAP` reads (at the
    first output) and another that a non-zero tap reads."""
    a = np.ones((5, 6), dtype)
    a[0, 0], a[4, 5] = math.inf, -math.inf
    return {"a": a}


def zero_tap_case() -> OpCase:
    """A zero weight next to an infinite pixel: skipped, as scipy.ndimage.correlate does."""
    return special_case(
        "correlate_valid",
        "zero_tap",
        _zero_tap_image,
        _emit("correlate_valid", weights=ZERO_TAP.tolist()),
        lambda a: _correlate_direct(a, ZERO_TAP),
        "linear",
    )


def _respecial(c: OpCase, ref: Callable[..., np.ndarray] | None) -> OpCase:
    """``c`` on special values; ``ref`` (positional inputs) replaces its reference."""

    def arrays(dtype: str) -> dict[str, np.ndarray]:
        base = c.inputs(np.random.default_rng(0), dtype)
        return {
            k: _fill(v.shape, str(v.dtype), 3 * i) if v.dtype.kind == "f" else v
            for i, (k, v) in enumerate(base.items())
        }

    expect = expected_special(ref) if ref is not None else None
    return OpCase(
        op=c.op,
        name=f"{c.op}/special_{c.name.split('/', 1)[1]}",
        build=c.build,
        inputs=_fixed(arrays),
        expect=(lambda **kw: expect(*kw.values())) if expect else expected_special(lambda **kw: c.expect(**kw)),
        wrt=c.wrt,
        dtypes=c.dtypes,
        grad_oracle="linear" if c.wrt else "",
    )


def matmul_special_cases() -> list[OpCase]:
    """The matmul cases without transpose flags (torch.matmul takes none), their float
    inputs filled with special values; the gradient's oracle is PyTorch's autograd of
    torch.matmul (the op is bilinear, not linear)."""
    out = []
    for c in matmul_cases():
        attrs = next(n.attrs for n in c.build("float64").nodes if n.op == "matmul")
        if not any(attrs.values()):
            out.append(replace(_respecial(c, _matmul_t(False, False)), grad_oracle="torch:matmul"))
    return out


SPECIAL_CASES: tuple[OpCase, ...] = tuple(
    elementwise_special_cases() + reduction_special_cases() + view_special_cases() + matmul_special_cases()
)


SPECIAL_RTOL: dict[str, float] = {"float64": 1e-12, "float32": 1e-5}


def special_seed(case: OpCase, dtype: str) -> dict[str, np.ndarray]:
    """A cotangent of ±1 per output element (fixed by the case's name): the seed's product
    with a gradient is exact, so an overflow of ``gy * a * b`` cannot depend on the order of
    the factors (which differs between dpt_ir and its oracles)."""
    graph = case.build(dtype)
    t = graph.types[graph.output_value(OUTPUT)]
    rng = np.random.default_rng(zlib.crc32(case.name.encode()))
    return {OUTPUT: rng.choice(np.array([-1.0, 1.0], t.dtype), t.shape)}


def special_mismatch(actual: Any, expected: Any, what: str) -> str:
    """An empty string if ``actual`` equals ``expected`` at special values: the same dtype
    and shape, NaN exactly where expected, infinities of the same sign, finite values within
    `SPECIAL_RTOL` (and the dtype's smallest normal, so a flushed subnormal passes); integers
    and bools exactly. Else a description."""
    a, e = np.asarray(actual), np.asarray(expected)
    if a.shape != e.shape or a.dtype != e.dtype:
        return f"{what}: got {a.dtype}{list(a.shape)}, expected {e.dtype}{list(e.shape)}"
    if a.dtype.kind != "f":
        ok = a == e
    else:
        close = np.isclose(a, e, rtol=SPECIAL_RTOL[str(a.dtype)], atol=float(np.finfo(a.dtype).tiny))
        ok = (np.isnan(a) & np.isnan(e)) | (a == e) | (np.isfinite(a) & np.isfinite(e) & close)
    if ok.all():
        return ""
    bad = np.flatnonzero(~ok.reshape(-1))
    shown = ", ".join(f"[{k}] {a.flat[k]!r} != {e.flat[k]!r}" for k in bad[:4])
    return f"{what}: {bad.size}/{ok.size} element(s) differ: {shown}"

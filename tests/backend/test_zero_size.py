"""Zero-length axes through every op of the op table (issue 27), compiled, against the
interpreter and NumPy.

Each `op_cases.OpCase` here applies one op to inputs with a zero-length axis (or gives a
zero-size result), through the public API. Where NumPy returns a value (an empty array,
or a reduction's identity: sum 0, mean NaN, logsumexp -inf, a matmul over an empty k 0),
the compiled ``run``, ``value_and_grad`` and tape pass give it, with its dtype, and the
gradients are the interpreter's (zero-size for zero-size inputs, zeros through an empty
reduction). Where NumPy raises (max, min and the arg-reductions of an empty axis, a take
from an empty axis, a non-constant pad of one), building the graph is a ContractError
naming the ``dp.*`` function. A group with nothing to write has no kernel (no clang work
for it) and an empty reduction is a constant, so the whole table (both float dtypes) is
one small program.

The program is compiled with ``checks=False``: mean and logsumexp of an empty slice are
NaN and -inf, which the status checks report as NumericalError (`test_checks_report_...`).
"""

from __future__ import annotations

import operator
import warnings
from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
from op_cases import (
    BINARY,
    COMPARE,
    OUTPUT,
    UNARY,
    Arg,
    OpCase,
    bools,
    case,
    small_ints,
    uniform,
)
from scipy import ndimage, signal

import dpt_ir as dp
from dpt_ir.ir.registry import all_ops
from dpt_ir.ops.gather import table_attrs

from .harness import Batch, compare_batch, mismatch

Z = (0, 3)  # the zero-size shape most cases use
EMPTY_INDEX = np.zeros((0,), np.int32)
# Ops this table leaves to their own tests: loops compile to loop programs without tape
# passes (tests/loops holds their zero-size cases); resampling's edges (empty inputs and
# coordinates) are issue 27's resampling part, tested in tests/resample.
ELSEWHERE = ("scan", "scan_vjp", "resample", "resample_adjoint", "spline_filter1d", "spline_filter1d_adjoint")


def _emit(op: str, **attrs: Any) -> Callable[..., dp.Tensor]:
    return lambda *xs: xs[0].builder.emit(op, list(xs), attrs)


def _source(op: str, label: str, make: Callable[[dp.GraphBuilder, str], dp.Tensor], expect: Any) -> OpCase:
    def build(dtype: str) -> dp.Graph:
        g = dp.GraphBuilder(f"zero_{op}")
        g.output(OUTPUT, make(g, dtype))
        return g.build()

    return OpCase(op=op, name=f"{op}/{label}", build=build, inputs=lambda rng, dtype: {}, expect=expect)


def elementwise_cases() -> list[OpCase]:
    out = [case(op, "0x3", [Arg(Z, dom)], fn, ref) for op, fn, ref, dom in UNARY]
    out += [case(op, "0x1_1x3", [Arg((0, 1), da), Arg((1, 3), db)], fn, ref) for op, fn, ref, da, db in BINARY]
    out += [case(op, "3_0x3", [Arg((3,), small_ints()), Arg(Z, small_ints())], sym, ref) for op, _, sym, ref in COMPARE]
    b = [Arg(Z, bools, "bool"), Arg((1, 3), bools, "bool")]
    out += [
        case("logical_and", "0x3", b, dp.logical_and, np.logical_and),
        case("logical_or", "0x3", b, operator.or_, np.logical_or),
        case("logical_not", "0x3", b[:1], dp.logical_not, np.logical_not),
        case("where", "0x3", [b[0], Arg((1, 3), uniform()), Arg(Z, uniform())], dp.where, np.where),
        case("clamp", "0x3", [Arg(Z, uniform())], lambda a: dp.clamp(a, -0.5, 0.7), lambda a: np.clip(a, -0.5, 0.7)),
        case(
            "cast",
            "0x3_to_int32",
            [Arg(Z, uniform())],
            lambda a: dp.cast(a, "int32"),
            lambda a: a.astype("int32"),
            grad=False,
        ),
        case("cast", "0x3_int32", [Arg(Z, small_ints(), "int32")], lambda a: a.astype("f8"), lambda a: a.astype("f8")),
        case("guard", "0x3", [Arg(Z, uniform()), b[0]], _emit("guard", message="zero"), lambda a, ok: a),
        _source("constant", "0x3", lambda g, d: g.constant(2.5, d, Z), lambda: np.full(Z, 2.5)),
        _source(
            "iota",
            "3x0",
            lambda g, d: g.emit("iota", [], {"shape": [3, 0], "axes": [0, 1]}),
            lambda: np.zeros((3, 0), int),
        ),
        _source(
            "index_array",
            "0x2",
            lambda g, d: g.emit("index_array", [], table_attrs(np.zeros((0, 2)))),
            lambda: np.zeros((0, 2), int),
        ),  # fmt: skip
    ]
    return out


# (dp function, NumPy reference, whether it has an identity); NumPy raises without one.
REDUCTIONS: tuple[tuple[str, Callable[..., dp.Tensor], Callable[..., np.ndarray], bool], ...] = (
    ("sum", dp.sum, np.sum, True),
    ("mean", dp.mean, np.mean, True),
    (
        "logsumexp",
        dp.logsumexp,
        lambda a, axis=None, keepdims=False: np.log(np.sum(np.exp(a), axis, keepdims=keepdims)),
        True,
    ),
    ("max", dp.max, np.max, False),
    ("min", dp.min, np.min, False),
    ("argmax", dp.argmax, np.argmax, False),
    ("argmin", dp.argmin, np.argmin, False),
)


def _quiet(ref: Callable[..., np.ndarray]) -> Callable[..., np.ndarray]:
    """``ref`` without NumPy's "mean of empty slice" warning (the NaN is the point)."""

    def call(*args: Any, **kwargs: Any) -> np.ndarray:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", RuntimeWarning)
            return ref(*args, **kwargs)

    return call


def reduction_cases() -> list[OpCase]:
    out = []
    for op, fn, ref, _ in REDUCTIONS:  # a kept empty axis: an empty result, for every reduction
        r = _quiet(ref)
        out.append(case(op, "0x3_axis1", [Arg(Z, uniform())], lambda a, f=fn: f(a, axis=1), lambda a, r=r: r(a, 1)))
    for op, fn, ref, identity in REDUCTIONS:
        if not identity:
            continue
        r = _quiet(ref)
        out += [
            case(op, "3x0_axis1", [Arg((3, 0), uniform())], lambda a, f=fn: f(a, axis=1), lambda a, r=r: r(a, axis=1)),
            case(
                op,
                "0x3_axis0_keep",
                [Arg(Z, uniform())],
                lambda a, f=fn: f(a, axis=0, keepdims=True),
                lambda a, r=r: r(a, axis=0, keepdims=True),
            ),  # fmt: skip
            case(op, "2x0x3_all", [Arg((2, 0, 3), uniform())], fn, lambda a, r=r: np.asarray(r(a), a.dtype)),
        ]
    ints = [Arg((3, 0), small_ints(), "int32")]
    out += [
        case("sum", "int32_3x0", ints, lambda a: dp.sum(a, axis=1), lambda a: np.sum(a, axis=1, dtype="int32")),
        case("sum", "bool_0", [Arg((0,), bools, "bool")], dp.sum, lambda a: np.asarray(np.sum(a), "int32")),
    ]
    return out


def shape_cases() -> list[OpCase]:
    z = [Arg(Z, uniform())]
    embed = _emit("embed_slice", starts=[1, 0], stops=[1, 3], steps=[1, 1], shape=[2, 3])
    return [
        case(
            "broadcast_to",
            "1x0_to_2x4x0",
            [Arg((1, 0), uniform())],
            lambda a: dp.broadcast_to(a, (2, 4, 0)),
            lambda a: np.broadcast_to(a, (2, 4, 0)),
        ),  # fmt: skip
        case(
            "reshape",
            "0x3_to_3x0x2",
            [Arg((0, 6), uniform())],
            lambda a: a.reshape(3, 0, 2),
            lambda a: a.reshape(3, 0, 2),
        ),  # fmt: skip
        case("expand_dims", "0x3", z, lambda a: dp.expand_dims(a, 1), lambda a: np.expand_dims(a, 1)),
        case("squeeze", "0x1x3", [Arg((0, 1, 3), uniform())], lambda a: dp.squeeze(a, 1), lambda a: np.squeeze(a, 1)),
        case("transpose", "0x3", z, lambda a: a.T, lambda a: a.T),
        case("slice", "empty_range", [Arg((3, 4), uniform())], lambda a: a[:, 2:2], lambda a: a[:, 2:2]),
        case("slice", "of_empty", [Arg((0, 4), uniform())], lambda a: a[:, 1:3], lambda a: a[:, 1:3]),
        case("embed_slice", "empty_into_2x3", [Arg(Z, uniform())], embed, lambda a: np.zeros((2, 3), a.dtype)),
        case(
            "concat",
            "0x3_2x3",
            [Arg(Z, uniform()), Arg((2, 3), uniform())],
            lambda a, b: dp.concatenate([a, b]),
            lambda a, b: np.concatenate([a, b]),
        ),  # fmt: skip
        case(
            "concat",
            "2x0_2x3_axis1",
            [Arg((2, 0), uniform()), Arg((2, 3), uniform())],
            lambda a, b: dp.concatenate([a, b], axis=1),
            lambda a, b: np.concatenate([a, b], axis=1),
        ),  # fmt: skip
        case(
            "pad",
            "constant_0x3",
            z,
            _emit("pad", before=[1, 0], after=[1, 2], mode="constant", cval=0.5),
            lambda a: np.pad(a, [(1, 1), (0, 2)], constant_values=0.5),
        ),  # fmt: skip
        case(
            "pad_adjoint",
            "0x5",
            [Arg((0, 5), uniform())],
            _emit("pad_adjoint", before=[0, 1], after=[0, 1], mode="reflect", cval=0.0),
            lambda g: np.zeros((0, 3), g.dtype),
        ),  # fmt: skip
    ]


def gather_cases() -> list[OpCase]:
    return [
        case(
            "take",
            "no_positions",
            [Arg((3, 4), uniform())],
            lambda a: dp.take(a, EMPTY_INDEX, axis=1),
            lambda a: np.take(a, EMPTY_INDEX, axis=1),
        ),  # fmt: skip
        case(
            "take",
            "from_0x3",
            [Arg(Z, uniform()), Arg((2,), small_ints(0, 3), "int32")],
            lambda a, i: dp.take(a, i, axis=1),
            lambda a, i: np.take(a, i, axis=1),
        ),  # fmt: skip
        case(
            "add_at",
            "no_values",
            [Arg((3, 4), uniform()), Arg((0, 4), uniform())],
            lambda a, v: dp.add_at(a, EMPTY_INDEX, v),
            lambda a, v: a,
        ),  # fmt: skip
        case(
            "add_at",
            "into_0x3",
            [Arg(Z, uniform()), Arg((0, 2), uniform())],
            lambda a, v: dp.add_at(a, (slice(None), np.array([2, 0])), v),
            lambda a, v: a,
        ),  # fmt: skip
    ]


def other_cases() -> list[OpCase]:
    u = uniform()
    return [
        case("matmul", "k0", [Arg((3, 0), u), Arg((0, 4), u)], dp.matmul, np.matmul),
        case("matmul", "m0", [Arg((0, 3), u), Arg((3, 4), u)], dp.matmul, np.matmul),
        case("matmul", "batch0", [Arg((0, 2, 3), u), Arg((3, 4), u)], dp.matmul, np.matmul),
        case("matmul", "vectors_k0", [Arg((0,), u), Arg((0,), u)], dp.matmul, np.matmul),
        *radon_cases(),
        *fanbeam_cases(),
        # An empty image: dp.correlate returns it, as scipy.ndimage does, with no stencil node
        # (correlate_valid itself refuses, as scipy.signal does: `REFUSALS`).
        case(
            "correlate_valid",
            "dp.correlate_0x5",
            [Arg((0, 5), u)],
            lambda a: dp.correlate(a, np.ones((3, 3))),
            lambda a: ndimage.correlate(a, np.ones((3, 3))),
        ),  # fmt: skip
        case(
            "correlate_valid",
            "dp.gaussian_filter_4x0",
            [Arg((4, 0), u)],
            lambda a: dp.gaussian_filter(a, 1.0),
            lambda a: ndimage.gaussian_filter(a, 1.0),
        ),  # fmt: skip
    ]


ZERO_THETA = [0.0, 30.0, 95.0]


def radon_cases() -> list[OpCase]:
    """An empty stack of images, an image without columns (its padded frame: 6 x 6, every
    projection 0) and their transposes."""
    u = uniform()
    adjoint = {"theta": ZERO_THETA, "circle": False, "in_shape": [4, 0], "out_shape": [6, 3]}
    return [
        case("radon", "stack0_5x6", [Arg((0, 5, 6), u)], lambda a: dp.radon(a, ZERO_THETA),
             lambda a: np.zeros((0, 5, 3), a.dtype)),
        case("radon", "4x0_padded", [Arg((4, 0), u)], lambda a: dp.radon(a, ZERO_THETA, circle=False),
             lambda a: np.zeros((6, 3), a.dtype)),
        case("radon_adjoint", "6x3_to_4x0", [Arg((6, 3), u)], _emit("radon_adjoint", **adjoint),
             lambda g: np.zeros((4, 0), g.dtype)),
    ]  # fmt: skip


FAN = {"angles": [0.2, 2.0], "source_origin": 9.0, "origin_det": 3.0, "det_count": 4}


def fanbeam_cases() -> list[OpCase]:
    """An empty stack of images, an image without columns (every line misses it: 0) and a
    transpose to it."""
    u = uniform()
    adjoint = {**FAN, "det_width": 1.0, "in_shape": [4, 0]}
    return [
        case("fanbeam", "stack0_5x6", [Arg((0, 5, 6), u)], lambda a: dp.fanbeam(a, **FAN),
             lambda a: np.zeros((0, 2, 4), a.dtype)),
        case("fanbeam", "4x0", [Arg((4, 0), u)], lambda a: dp.fanbeam(a, **FAN), lambda a: np.zeros((2, 4), a.dtype)),
        case("fanbeam_adjoint", "2x4_to_4x0", [Arg((2, 4), u)], _emit("fanbeam_adjoint", **adjoint),
             lambda g: np.zeros((4, 0), g.dtype)),
    ]  # fmt: skip


ZERO_CASES: tuple[OpCase, ...] = tuple(
    elementwise_cases() + reduction_cases() + shape_cases() + gather_cases() + other_cases()
)


# -- where NumPy raises: a ContractError when the graph is built ----------------------------
def _refusal(shape: tuple[int, ...], fn: Callable[[dp.Tensor], dp.Tensor]) -> Callable[[], None]:
    def build() -> None:
        g = dp.GraphBuilder("zero_refused")
        g.output(OUTPUT, fn(g.input("a", shape, "float32")))

    return build


# (op, what the message names, the graph, NumPy's call that raises)
REFUSALS: tuple[tuple[str, str, Callable[[], None], Callable[[], Any]], ...] = (
    *(
        (op, f"dp.{op}", _refusal((3, 0), lambda a, f=fn: f(a, axis=1)), lambda r=ref: r(np.zeros((3, 0)), axis=1))
        for op, fn, ref, identity in REDUCTIONS
        if not identity
    ),
    ("max", "dp.max", _refusal((0,), dp.max), lambda: np.max(np.zeros(0))),
    (
        "take",
        "axis of size 0",
        _refusal(Z, lambda a: dp.take(a, np.array([0], np.int32), axis=0, mode="clip")),
        lambda: np.take(np.zeros(Z), [0], axis=0, mode="clip"),
    ),
    (
        "correlate_valid",
        "do not fit",
        _refusal((0, 4, 5), lambda a: a.builder.emit("correlate_valid", [a], {"weights": [[[0.5, -1.0]]]})),
        lambda: signal.correlate(np.zeros((0, 4, 5)), np.ones((1, 1, 2)), mode="valid"),
    ),
    (
        "pad",
        "empty axis",
        _refusal(Z, lambda a: a.builder.emit("pad", [a], {"before": [1, 0], "after": [1, 0], "mode": "reflect"})),
        lambda: np.pad(np.zeros(Z), [(1, 1), (0, 0)], mode="symmetric"),
    ),
)


@pytest.mark.parametrize(("op", "named", "build", "numpy_call"), REFUSALS, ids=[f"{r[0]}-{k}" for k, r in
                                                                                 enumerate(REFUSALS)])  # fmt: skip
def test_numpy_errors_are_contract_errors(op: str, named: str, build: Any, numpy_call: Any) -> None:
    with pytest.raises((ValueError, IndexError)):
        numpy_call()
    with pytest.raises(dp.ContractError, match=named):
        build()


def test_every_op_has_a_zero_size_case() -> None:
    """The table covers the whole op table, but for the ops tested `ELSEWHERE`."""
    covered = {c.op for c in ZERO_CASES} | {r[0] for r in REFUSALS}
    assert {op.name for op in all_ops()} - set(ELSEWHERE) <= covered


# -- the compiled table -----------------------------------------------------------------------
def zero_batch() -> Batch:
    """Every zero-size case in both float dtypes (those whose inputs follow the case's
    dtype), as one program compiled with ``checks=False``."""
    graphs, inputs, wrt, seeds = {}, {}, {}, {}
    for k, c in enumerate(ZERO_CASES):
        for dtype in c.dtypes:
            pid = f"z{k:03d}{dtype[-2:]}"
            rng = np.random.default_rng(k)
            graphs[pid] = c.build(dtype)
            inputs[pid] = c.inputs(rng, dtype)
            wrt[pid] = c.wrt
            if c.wrt:
                t = graphs[pid].types[graphs[pid].output_value(OUTPUT)]
                seeds[pid] = {OUTPUT: rng.uniform(-1.0, 1.0, t.shape).astype(t.dtype)}
    batch = Batch("zero_size", graphs, inputs, wrt, seeds)
    batch.compile(checks=False)
    return batch


@pytest.fixture(scope="module")
def zero() -> Batch:
    return zero_batch()


@pytest.fixture(scope="module")
def zero_results(zero: Batch) -> dict[str, list[str]]:
    with warnings.catch_warnings():  # NumPy's "mean of empty slice" in the interpreter
        warnings.simplefilter("ignore", RuntimeWarning)
        return compare_batch(zero)


def _ids() -> list[Any]:
    return [
        pytest.param(f"z{k:03d}{d[-2:]}", c, id=f"{c.name}-{d}") for k, c in enumerate(ZERO_CASES) for d in c.dtypes
    ]


@pytest.mark.parametrize(("pid", "zcase"), _ids())
def test_zero_size_case(zero: Batch, zero_results: dict[str, list[str]], pid: str, zcase: OpCase) -> None:
    """Compiled run, value_and_grad and tape pass equal the interpreter (values, dtypes,
    gradients), and the interpreter equals NumPy."""
    with warnings.catch_warnings():  # NumPy's "mean of empty slice" in the interpreter
        warnings.simplefilter("ignore", RuntimeWarning)
        expected = zero.expected_values(pid)[OUTPUT]
    numpy = np.asarray(zcase.expect(**zero.inputs[pid]))
    assert not mismatch(expected, numpy.astype(expected.dtype), "interpreter vs NumPy")
    if zero.inputs[pid] and numpy.dtype.kind == "f":  # NumPy's float dtype from inputs of the case's dtype
        assert expected.dtype == numpy.dtype, (expected.dtype, numpy.dtype)
    assert not zero_results[pid], "\n".join(zero_results[pid])


def test_empty_groups_launch_nothing(zero: Batch) -> None:
    """Only the groups that write values with elements launch (identities are constants,
    concatenations and pads with a non-empty result, scatters into a non-empty base)."""
    assert zero.program is not None
    plan = zero.program.plans["run"]
    for launch in plan.launches:
        assert launch.dim > 0, launch.name
    graph = plan.graph
    written = {p for launch in plan.launches for p in launch.params}
    assert not any(graph.types[v].size == 0 for v in written if v in graph.types and v not in graph.input_map)


def test_checks_report_an_empty_mean(zero: Batch) -> None:
    """With the status checks compiled in, the NaN of a mean over an empty axis is a
    non-finite value like any other: NumericalError naming the node."""
    g = dp.GraphBuilder("zero_mean_checked")
    x = g.input("x", (3, 0), "float32")
    g.output("m", dp.mean(x, axis=1))
    program = dp.compile(g.build(), device="cpu")
    with pytest.raises(dp.NumericalError, match="mean"):
        program.run(x=np.zeros((3, 0), np.float32))
    unchecked = dp.compile(g.build(), device="cpu", checks=False).run(x=np.zeros((3, 0), np.float32))
    np.testing.assert_array_equal(unchecked["m"], np.full(3, np.nan, np.float32))

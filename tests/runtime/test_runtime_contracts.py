"""Runtime contracts (DESIGN §7): every bad input, seed, option or call raises
`dp.ContractError` naming the input (or output, option), what was expected and what was
found, before any kernel runs; nothing is half-returned and the next good call works."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp

from .conftest import SHAPE, WRT, assert_program_works, make_inputs, to_warp


@dataclass
class Ctx:
    program: dp.Program
    program_nowrt: dp.Program
    graph: dp.Graph
    inputs: dict[str, np.ndarray]


@pytest.fixture
def ctx(program: dp.Program, program_nowrt: dp.Program, graph: dp.Graph) -> Ctx:
    return Ctx(program, program_nowrt, graph, make_inputs(50))


def _with(ctx: Ctx, **changes: Any) -> dict[str, Any]:
    return {**ctx.inputs, **changes}


def _tape_forward(ctx: Ctx, inputs: dict[str, Any]) -> None:
    """A tape pass whose forward gets ``inputs``; it must raise before returning."""
    tp = ctx.program.tape_pass()
    with tp:
        tp.forward(**inputs)
    tp.close()  # pragma: no cover  (not reached: the forward raises)


def _tape_backward(ctx: Ctx, seed: Any) -> None:
    """A recorded tape pass seeded with ``seed``: the seed is refused, the pass stays usable."""
    with ctx.program.tape_pass() as tp:
        tp.forward(**to_warp(ctx.inputs, ctx.program.device))
    try:
        tp.backward(seed=seed)
    finally:
        assert tp.state == "recorded", "a refused seed leaves the pass as it was"
        tp.backward(seed={"loss": 1.0})
        tp.close()


def _aliased_output(ctx: Ctx) -> None:
    """The output buffer of one tape pass given as input to the next."""
    with ctx.program.tape_pass() as first:
        out = first.forward(**to_warp(ctx.inputs, ctx.program.device))
    first.close()
    _tape_forward(ctx, {**to_warp(ctx.inputs, ctx.program.device), "obs": out["pred"]})


def _non_contiguous(ctx: Ctx) -> None:
    base = wp.array(np.ascontiguousarray(ctx.inputs["x"].T), dtype=wp.float32, device=ctx.program.device)
    view = base.transpose()  # shape (3, 4), strides of a transposed (4, 3) array
    assert tuple(view.shape) == SHAPE and not view.is_contiguous
    ctx.program.run(**_with(ctx, x=view))


def _other_device(ctx: Ctx) -> None:
    if ctx.program.device != "cpu":
        other = "cpu"
    elif wp.get_cuda_device_count() > 0:
        other = "cuda:0"
    else:
        pytest.skip(
            "only the CPU device exists here: a wp.array on another device than the program's cannot be made; "
            "the check runs where a GPU is present (the program on cuda:0 and a cpu array, or the reverse)"
        )
    arr = wp.array(ctx.inputs["w"], dtype=wp.float32, device=other)
    ctx.program.run(**_with(ctx, w=arr))


RAGGED = [[1.0, 2.0, 3.0, 4.0], [1.0, 2.0], [1.0, 2.0, 3.0, 4.0]]

# id -> (the bad call, words its message must contain)
CASES: dict[str, tuple[Callable[[Ctx], object], tuple[str, ...]]] = {
    "missing input": (lambda c: c.program.run(x=c.inputs["x"], obs=c.inputs["obs"]), ("'w'", "missing")),
    "extra input": (lambda c: c.program.run(**_with(c, z=c.inputs["x"])), ("'z'", "unexpected")),
    "wrong shape (numpy)": (
        lambda c: c.program.run(**_with(c, x=np.ones((4, 3), np.float32))),
        ("'x'", "[3, 4]", "[4, 3]"),
    ),
    "wrong shape (wp.array)": (
        lambda c: c.program.run(**_with(c, x=wp.array(c.inputs["x"].reshape(-1), device=c.program.device))),
        ("'x'", "[3, 4]", "[12]"),
    ),
    "wrong dtype (numpy)": (
        lambda c: c.program.value_and_grad(**_with(c, x=c.inputs["x"].astype(np.float64))),
        ("'x'", "float32", "float64"),
    ),
    "wrong dtype (wp.array)": (
        lambda c: _tape_forward(
            c, {**to_warp(c.inputs, c.program.device), "obs": wp.array(c.inputs["obs"], dtype=wp.float64)}
        ),
        ("'obs'", "float32", "float64"),
    ),
    "wrong device": (_other_device, ("'w'", "device")),
    "non-contiguous wp.array": (_non_contiguous, ("'x'", "contiguous")),
    "input is the program's own output buffer": (_aliased_output, ("'obs'", "output")),
    "ragged python list": (lambda c: c.program.run(**_with(c, x=RAGGED)), ("'x'", "ragged", "[3, 4]")),
    "string input": (lambda c: c.program.run(**_with(c, w=[["a"] * 4] * 3)), ("'w'", "float32", "<U1")),
    "None input": (lambda c: c.program.run(**_with(c, w=None)), ("'w'", "NoneType")),
    "seed of the wrong shape": (
        lambda c: _tape_backward(c, {"pred": np.ones((4, 3), np.float32)}),
        ("'pred'", "[3, 4]", "[4, 3]"),
    ),
    "seed naming an unknown output": (lambda c: _tape_backward(c, {"nope": 1.0}), ("'nope'", "'loss'")),
    "seed for a non-float output": (lambda c: _tape_backward(c, {"above": 1.0}), ("'above'", "bool")),
    "seed that is not a dict": (lambda c: _tape_backward(c, 1.0), ("seed", "dict", "float")),
    "seed that is not a number": (lambda c: _tape_backward(c, {"loss": "one"}), ("'loss'", "str")),
    "no seed": (lambda c: _tape_backward(c, None), ("seed",)),
    "wrt naming a requires_grad=False input": (
        lambda c: dp.compile(c.graph, wrt=["obs"]),
        ("'obs'", "requires_grad=False"),
    ),
    "wrt naming an unknown input": (lambda c: dp.compile(c.graph, wrt=["y"]), ("'y'", "'x'")),
    "wrt with a duplicate": (lambda c: dp.compile(c.graph, wrt=["x", "x"]), ("wrt", "'x'", "duplicate")),
    "loss= naming an unknown output": (lambda c: dp.compile(c.graph, wrt=WRT, loss="nope"), ("'nope'", "'loss'")),
    "loss= naming a bool output": (lambda c: dp.compile(c.graph, wrt=WRT, loss="above"), ("'above'", "bool")),
    "value_and_grad without wrt": (lambda c: c.program_nowrt.value_and_grad(**c.inputs), ("'rt'", "wrt")),
    "tape_pass without wrt": (lambda c: c.program_nowrt.tape_pass(), ("'rt'", "wrt")),
    "compile of something not a Graph": (
        lambda c: dp.compile(c.graph.model_dump(), wrt=WRT),
        ("dp.Graph", "dict"),
    ),
    "bad device string": (lambda c: dp.compile(c.graph, wrt=WRT, device="tpu"), ("'tpu'", "'cpu'", "cuda")),
    "bad device type": (lambda c: dp.compile(c.graph, wrt=WRT, device=0), ("device", "0")),
    "malformed cuda device": (lambda c: dp.compile(c.graph, wrt=WRT, device="cuda:x"), ("'cuda:x'",)),
}


def test_enough_cases() -> None:
    assert len(CASES) >= 15


@pytest.mark.parametrize("case", CASES)
def test_bad_call_raises_contract_error(ctx: Ctx, case: str) -> None:
    action, words = CASES[case]
    result = None
    with pytest.raises(dp.ContractError) as info:
        result = action(ctx)
    assert result is None
    assert not isinstance(info.value, dp.LifecycleError), "a bad input is not a lifecycle error"
    message = str(info.value)
    for word in words:
        assert word in message, f"{case}: {word!r} not in {message!r}"
    assert_program_works(ctx.program)
    assert_program_works(ctx.program_nowrt)


def test_unavailable_cuda_device(graph: dp.Graph) -> None:
    if wp.get_cuda_device_count() > 0:
        pytest.skip("a CUDA device exists: 'cuda:0' is available")
    with pytest.raises(dp.ContractError, match="'cuda:0'.*not available"):
        dp.compile(graph, wrt=WRT, device="cuda:0")


def test_python_lists_of_the_right_shape_are_accepted(ctx: Ctx) -> None:
    """Not an error: a rectangular list of numbers takes the declared dtype."""
    want = dp.interpret(ctx.graph, **ctx.inputs)
    out = ctx.program.run(**_with(ctx, w=ctx.inputs["w"].tolist()))
    np.testing.assert_allclose(out["loss"], want["loss"], rtol=2e-5)

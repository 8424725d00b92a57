"""One front door (`dpt_ir.ir.contracts`): the interpreter and a compiled program accept the
same input kinds and refuse the same ones with the same `ContractError` text.

Each case replaces one input of a small graph (``x: f32[2, 3]``, a 0-d ``s: f32``,
``k: i32[3]``, ``m: bool[3]``) by a value of one kind; `dp.interpret` and
`Program.run` / `Program.value_and_grad` of one compiled program must then both
return the same values, or both raise a `ContractError` with the same message.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp
from dpt_ir.ir.contracts import host_array

X = np.arange(6, dtype=np.float32).reshape(2, 3) / 4
GOOD: dict[str, Any] = {
    "x": X,
    "s": np.float32(0.5),
    "k": np.array([1, 2, 3], np.int32),
    "m": np.array([True, False, True]),
}


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("door")
    x = g.input("x", (2, 3))
    s = g.input("s", ())
    k = g.input("k", (3,), "int32", requires_grad=False)
    m = g.input("m", (3,), "bool", requires_grad=False)
    g.output("loss", dp.sum(dp.where(m, x * s + dp.cast(k, "float32"), 0.0)))
    return g.build()


def _strided() -> np.ndarray:
    wide = np.zeros((2, 6), np.float32)
    wide[:, ::2] = X
    return wide[:, ::2]


def _warp(value: np.ndarray, **kw: Any) -> Callable[[], wp.array]:
    return lambda: wp.array(value, device="cpu", **kw)


# name -> (input, a value or a thunk making it, accepted?)
CASES: dict[str, tuple[str, Any, bool]] = {
    "numpy array of the exact dtype": ("x", X, True),
    "numpy array of another dtype": ("x", X.astype(np.float64), False),
    "numpy array of another shape": ("x", X.T.copy(), False),
    "strided numpy array (copied)": ("x", _strided, True),
    "Fortran-ordered numpy array (copied)": ("x", np.asfortranarray(X), True),
    "complex numpy array": ("x", X.astype(np.complex64), False),
    "numpy scalar of the exact dtype": ("s", np.float32(1.5), True),
    "numpy scalar of another dtype": ("s", np.float64(1.5), False),
    "python float for a 0-d input (rounded)": ("s", 0.1, True),
    "python int for a 0-d input": ("s", 3, True),
    "python float that overflows float32": ("s", 1e39, False),
    "python float for a 2-d input": ("x", 0.5, False),
    "list of the right shape": ("x", X.tolist(), True),
    "tuple of the right shape": ("k", (1, 2, 3), True),
    "list of integral floats for int32": ("k", [1.0, 2.0, 3.0], True),
    "lossy list for int32": ("k", [1.5, 2, 3], False),
    "list out of int32's range": ("k", [2**40, 2, 3], False),
    "list of bools for bool": ("m", [True, False, False], True),
    "list of 0/1 ints for bool": ("m", [0, 1, 1], True),
    "list with a 2 for bool": ("m", [0, 2, 1], False),
    "ragged list": ("x", [[1.0, 2.0, 3.0], [4.0]], False),
    "string": ("x", "abc", False),
    "None": ("k", None, False),
    "dict": ("m", {"a": 1}, False),
    "wp.array of the exact dtype": ("x", _warp(X), True),
    "wp.array of another dtype": ("x", _warp(X, dtype=wp.float64), False),
    "wp.array of another shape": ("x", _warp(X.reshape(-1)), False),
    "strided wp.array": ("x", lambda: wp.array(X.T.copy(), device="cpu").transpose(), False),
    "wp.array of shape (1,) for a 0-d input": ("s", _warp(np.array([2.0], np.float32)), True),
    "bool wp.array": ("m", _warp(np.array([False, True, True]), dtype=wp.bool), True),
}


@pytest.fixture(scope="module")
def program() -> dp.Program:
    return dp.compile(_graph(), wrt=["x"], device="cpu")


def _outcome(call: Callable[[], Any]) -> tuple[str, Any]:
    try:
        return "ok", call()
    except dp.ContractError as exc:
        return "refused", str(exc)


def test_at_least_fifteen_kinds() -> None:
    assert len(CASES) >= 15
    assert {accepted for *_, accepted in CASES.values()} == {True, False}


@pytest.mark.parametrize("kind", list(CASES))
def test_interpreter_and_program_agree(kind: str, program: dp.Program) -> None:
    name, value, accepted = CASES[kind]
    inputs = {**GOOD, name: value() if callable(value) else value}
    graph = program.graph
    interp = _outcome(lambda: dp.interpret(graph, **inputs))
    ran = _outcome(lambda: program.run(**inputs))
    grads = _outcome(lambda: dp.interpret_grad(graph, ["x"], **inputs))
    vg = _outcome(lambda: program.value_and_grad(**inputs)[1])
    assert interp[0] == ran[0] == grads[0] == vg[0] == ("ok" if accepted else "refused"), (interp, ran)
    if not accepted:
        assert interp[1] == ran[1] == grads[1] == vg[1]
        assert f"input {name!r}" in interp[1]
        return
    np.testing.assert_allclose(ran[1]["loss"], interp[1]["loss"], rtol=1e-6)
    np.testing.assert_allclose(vg[1]["x"], grads[1]["x"], rtol=1e-6)


def test_missing_and_extra_inputs_read_the_same(program: dp.Program) -> None:
    graph = program.graph
    for inputs in ({k: v for k, v in GOOD.items() if k != "m"}, {**GOOD, "z": X}):
        interp = _outcome(lambda ins=inputs: dp.interpret(graph, **ins))
        ran = _outcome(lambda ins=inputs: program.run(**ins))
        assert interp[0] == ran[0] == "refused" and interp[1] == ran[1]


def test_messages_name_what_was_expected_and_found() -> None:
    t = dp.TensorType(shape=(3,), dtype="int32")
    with pytest.raises(dp.ContractError, match=r"input 'k': expected values representable as int32 exactly, found 1.5"):
        host_array("k", [1.5, 2, 3], t)
    with pytest.raises(dp.ContractError, match=r"expected real numbers or bools of dtype int32 .* found str"):
        host_array("k", "abc", t)
    converted = host_array("k", [1, 2, 3], t)
    assert converted.dtype == np.int32 and converted.flags.c_contiguous
    strided = host_array("x", _strided(), dp.TensorType(shape=(2, 3), dtype="float32"))
    assert strided.flags.c_contiguous and np.array_equal(strided, X)


def test_zero_d_inputs_stay_zero_d() -> None:
    t = dp.TensorType(shape=(), dtype="float64")
    for value in (np.float64(2.0), np.array(2.0), 2.0, 2):
        arr = host_array("s", value, t)
        assert arr.shape == () and arr.dtype == np.float64
    g = dp.GraphBuilder("zero_d")
    s = g.input("s", (), "float64")
    g.output("loss", dp.sum(dp.sum(s, axis=())))
    assert dp.interpret(g.build(), s=np.array(3.0))["loss"].shape == ()

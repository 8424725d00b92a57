"""`dpt_ir.runtime.host_run`: a CPU `Program.run` or `Program.value_and_grad` whose inputs are NumPy
arrays of exactly their types takes the workspace's fast path, with the general path's results bit
for bit; every other call takes the general path, which checks it and reports what is wrong; a flag
a kernel raises is still a NumericalError, and the next call is clean."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.runtime.plan import ExecutionPlan

from .conftest import make_inputs, to_warp


@pytest.fixture
def binds(monkeypatch: pytest.MonkeyPatch) -> Iterator[list[str]]:
    """The graph names of the calls that went through `ExecutionPlan.bind` (the general path)."""
    seen: list[str] = []
    general = ExecutionPlan.bind

    def spy(self: ExecutionPlan, *args: Any, **kwargs: Any) -> Any:
        seen.append(self.graph.name)
        return general(self, *args, **kwargs)

    monkeypatch.setattr(ExecutionPlan, "bind", spy)
    yield seen


def _same(got: dict[str, np.ndarray], want: dict[str, np.ndarray]) -> None:
    assert got.keys() == want.keys()
    for name, value in want.items():
        assert got[name].shape == value.shape and got[name].dtype == value.dtype, name
        np.testing.assert_array_equal(got[name], value, err_msg=name)


@pytest.mark.parametrize("checks", [True, False])
def test_numpy_inputs_take_the_fast_path_with_the_general_paths_bits(
    program: dp.Program, program_nochecks: dp.Program, checks: bool, binds: list[str]
) -> None:
    prog = program if checks else program_nochecks
    inputs = make_inputs(3)
    prog.run(**inputs)  # a workspace's first run takes the general path, which records it
    want = prog.run(**to_warp(inputs, prog.device))  # wp.arrays: the general path
    general = len(binds)
    got = prog.run(**inputs)
    assert len(binds) == general, "a call of NumPy arrays of the inputs' types went through bind"
    _same(got, want)
    assert prog.launch_count == len(prog.plans["run"].launches_of("forward"))
    again = prog.run(**inputs)
    assert not any(np.shares_memory(again[k], got[k]) for k in got)  # fresh outputs per call
    assert "word[0] = 0" in prog.plans["run"]._free[0].host_run.source or not checks


REFUSED = {
    "list": lambda x: x.tolist(),
    "fortran order": np.asfortranarray,
    "a strided view": lambda x: np.concatenate([x, x], axis=1)[:, : x.shape[1]],
    "a subclass": lambda x: x.view(np.matrix),
}


@pytest.mark.parametrize("kind", list(REFUSED))
def test_other_inputs_take_the_general_path(program: dp.Program, binds: list[str], kind: str) -> None:
    inputs = make_inputs(4)
    want = program.run(**inputs)
    general = len(binds)
    got = program.run(**{**inputs, "x": REFUSED[kind](inputs["x"])})
    assert len(binds) == general + 1
    _same(got, want)


@pytest.mark.parametrize(
    "change, words",
    [
        (lambda i: {**i, "x": i["x"].astype(np.float64)}, ["input 'x'", "float32", "float64"]),
        (lambda i: {k: v for k, v in i.items() if k != "w"}, ["missing", "'w'"]),
        (lambda i: {**i, "extra": i["x"]}, ["unexpected", "'extra'"]),
        (lambda i: {**i, "x": i["x"][:2]}, ["input 'x'", "[3, 4]", "[2, 4]"]),
    ],
    ids=["dtype", "missing", "extra", "shape"],
)
def test_bad_inputs_are_the_general_paths_contract_errors(program: dp.Program, change: Any, words: list[str]) -> None:
    inputs = make_inputs(5)
    want = program.run(**inputs)
    with pytest.raises(dp.ContractError) as err:
        program.run(**change(inputs))
    for word in words:
        assert word in str(err.value), (word, str(err.value))
    _same(program.run(**inputs), want)  # the program stays usable, on the fast path


def test_a_raised_flag_is_a_numerical_error_and_the_next_call_is_clean(program: dp.Program, binds: list[str]) -> None:
    inputs = make_inputs(6)
    want = program.run(**inputs)
    general = len(binds)
    bad = {**inputs, "x": inputs["x"].copy()}
    bad["x"][1, 2] = -1.0  # log of a negative number
    with pytest.raises(dp.NumericalError, match="log"):
        program.run(**bad)
    _same(program.run(**inputs), want)
    assert len(binds) == general  # both on the fast path


def test_outputs_without_fresh_arrays() -> None:
    """An output that is an input (the workspace copies it) has no fast path; two outputs of one
    value (no fresh array: `ExecutionPlan.direct_values`) are copied out of the workspace."""
    g = dp.GraphBuilder("host_run_outputs")
    x = g.input("x", shape=(5,), dtype="float32")
    y = dp.exp(x)
    g.output("a", y)
    g.output("b", y)
    g.output("c", x * 2.0)
    shared = dp.compile(g.build(), device="cpu")
    h = dp.GraphBuilder("host_run_copy")
    u = h.input("u", shape=(5,), dtype="float32")
    h.output("same", u)
    h.output("twice", u * 2.0)
    copying = dp.compile(h.build(), device="cpu")
    x_np = np.linspace(-1.0, 1.0, 5, dtype=np.float32)
    for _ in range(2):
        out = shared.run(x=x_np)
        np.testing.assert_array_equal(out["a"], out["b"])
        assert not np.shares_memory(out["a"], out["b"])
        np.testing.assert_array_equal(out["c"], x_np * 2.0)
        np.testing.assert_allclose(out["a"], np.exp(x_np), rtol=1e-6)
        both = copying.run(u=x_np)
        np.testing.assert_array_equal(both["same"], x_np)
        np.testing.assert_array_equal(both["twice"], x_np * 2.0)
    assert "plan.output_copy('a', ws)" in shared.plans["run"]._free[0].host_run.source
    assert copying.plans["run"]._free[0].host_run is False


def _vg_same(got: tuple[dict[str, np.ndarray], ...], want: tuple[dict[str, np.ndarray], ...]) -> None:
    for g, w in zip(got, want, strict=True):
        _same(g, w)


def test_value_and_grad_takes_the_fast_path_with_the_general_paths_bits(
    program: dp.Program, binds: list[str]
) -> None:
    inputs = make_inputs(7)
    program.value_and_grad(**inputs)  # a workspace's first call: the general path records it
    want = program.value_and_grad(**to_warp(inputs, program.device))
    general = len(binds)
    got = program.value_and_grad(**inputs)
    assert len(binds) == general, "a value_and_grad of NumPy arrays of the inputs' types went through bind"
    _vg_same(got, want)
    again = program.value_and_grad(**inputs)
    for first, second in zip(got, again, strict=True):  # every result array is the call's own
        assert not any(np.shares_memory(first[k], second[k]) for k in first)
    source = program.plans["value_and_grad"]._free[0].host_run.source
    assert "program.checkpoint('value_and_grad', ws)" in source
    bad = {**inputs, "x": inputs["x"].copy()}
    bad["x"][0, 0] = -2.0
    with pytest.raises(dp.NumericalError, match="log"):
        program.value_and_grad(**bad)
    _vg_same(program.value_and_grad(**inputs), want)
    got = program.value_and_grad(**{**inputs, "obs": inputs["obs"].tolist()})  # refused: the general path
    assert len(binds) == general + 1
    _vg_same(got, want)


def test_split_launches_on_two_threads_take_the_fast_path(binds: list[str]) -> None:
    """A two-thread plan's launches split into task ranges (`tasks.SplitLaunch`), each range
    with its own argument structure: the fast path points every range at the call's arrays."""
    g = dp.GraphBuilder("host_run_split")
    x = g.input("x", shape=(512, 512), dtype="float32")
    y = dp.exp(-x) * 0.5
    g.output("y", y)
    g.output("loss", dp.sum(dp.square(y)))
    program = dp.compile(g.build(), wrt=["x"], device="cpu", threads=2)
    rng = np.random.default_rng(9)
    first, second = (rng.standard_normal((512, 512)).astype(np.float32) for _ in range(2))
    program.run(x=first)
    program.value_and_grad(x=first)
    steps = program.plans["run"]._free[0].phases["forward"].steps
    assert any(type(s).__name__ == "SplitLaunch" for s in steps), steps
    general = len(binds)
    got, got_vg = program.run(x=second), program.value_and_grad(x=second)
    assert len(binds) == general
    want = program.run(x=to_warp({"x": second}, "cpu")["x"])
    want_vg = program.value_and_grad(x=to_warp({"x": second}, "cpu")["x"])
    _same(got, want)
    _vg_same(got_vg, want_vg)

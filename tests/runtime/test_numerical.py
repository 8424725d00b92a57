"""Status checkpoints (DESIGN §6, §7): kernels raise flags, read at checkpoints into a
`dp.NumericalError` naming the node; no output is returned and the program stays usable.
With ``checks=False`` the status code is compiled out."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.launches import STATUS, param_name

from .conftest import WRT, assert_close, assert_program_works, make_inputs, to_warp

STATUS_PARAM = param_name(STATUS)


def _log_of_negative() -> dict[str, np.ndarray]:
    inputs = make_inputs(40)
    inputs["x"][1, 2] = -0.5
    return inputs


def _nan_in_x() -> dict[str, np.ndarray]:
    inputs = make_inputs(41)
    inputs["x"][0, 3] = np.nan
    return inputs


def _nan_in_obs() -> dict[str, np.ndarray]:
    inputs = make_inputs(42)
    inputs["obs"][2, 0] = np.nan
    return inputs


BAD = {"log of a negative x": _log_of_negative, "NaN in x": _nan_in_x, "NaN in obs": _nan_in_obs}


def _tape_forward(program: dp.Program, inputs: dict[str, np.ndarray]) -> dp.TapePass:
    tp = program.tape_pass()
    with tp:
        tp.forward(**to_warp(inputs, program.device))
    return tp


ENTRY_POINTS = {
    "run": lambda p, inputs: p.run(**inputs),
    "value_and_grad": lambda p, inputs: p.value_and_grad(**inputs),
    "tape forward": _tape_forward,
}


@pytest.mark.parametrize("bad", BAD)
@pytest.mark.parametrize("entry", ENTRY_POINTS)
def test_numerical_error_at_checkpoint(program: dp.Program, entry: str, bad: str) -> None:
    inputs = BAD[bad]()
    result = None
    with pytest.raises(dp.NumericalError) as info:
        result = ENTRY_POINTS[entry](program, inputs)
    assert result is None  # nothing half-returned
    assert not isinstance(info.value, dp.ContractError)
    message = str(info.value)
    assert "'rt'" in message and "node" in message, message
    if bad.startswith("log"):
        assert "out-of-domain" in message and "log" in message, message
    assert_program_works(program)


def test_numerical_error_closes_tape_pass(program: dp.Program) -> None:
    """Raised inside ``with``: the pass is closed, the user sees the NumericalError itself."""
    tp = program.tape_pass()
    with pytest.raises(dp.NumericalError):
        with tp:
            tp.forward(**to_warp(_log_of_negative(), program.device))
    assert tp.state == "closed"
    with pytest.raises(dp.LifecycleError):
        tp.backward(seed={"loss": 1.0})
    assert_program_works(program)


def test_numerical_error_in_backward(program: dp.Program) -> None:
    """A non-finite seed is found at the backward checkpoint; the pass can still be closed
    and the next pass works."""
    inputs = make_inputs(43)
    with program.tape_pass() as tp:
        tp.forward(**to_warp(inputs, program.device))
    with pytest.raises(dp.NumericalError, match="backward"):
        tp.backward(seed={"loss": np.nan})
    tp.close()
    assert_program_works(program)


def test_flag_is_cleared_for_the_next_call(program: dp.Program) -> None:
    """The status word is zeroed after a raised flag: good, bad, good, bad, good."""
    good = make_inputs(44)
    want = dp.interpret(program.graph, **good)["loss"]
    for _ in range(2):
        assert_close(program.run(**good)["loss"], want)
        with pytest.raises(dp.NumericalError):
            program.run(**_log_of_negative())
    assert_close(program.run(**good)["loss"], want)


def test_status_in_checked_source(program: dp.Program) -> None:
    """Contrast for the next test: with checks the generated kernels take the status array."""
    source = "\n".join(m.path.read_text() for m in program.modules.values())
    assert STATUS_PARAM in source
    assert program.checks


def test_checks_false_compiles_status_out(program_nochecks: dp.Program, dump_root: Path) -> None:
    kernels = sorted((dump_root / "kernels").glob("*.py"))
    assert kernels, f"no generated source under {dump_root / 'kernels'}"
    source = "\n".join(k.read_text() for k in kernels)
    assert "@wp.kernel" in source
    assert STATUS_PARAM not in source
    signatures = re.findall(r"^def \w+\((.*)\):$", source, flags=re.MULTILINE)
    assert signatures and not any("status" in s for s in signatures), signatures
    assert not program_nochecks.checks


@pytest.mark.parametrize("bad", BAD)
def test_checks_false_raises_nothing(program_nochecks: dp.Program, bad: str) -> None:
    """Without checks the non-finite values come back as they are (as the interpreter gives them)."""
    inputs = BAD[bad]()
    out = program_nochecks.run(**inputs)
    assert not np.isfinite(out["loss"])
    out, grads = program_nochecks.value_and_grad(**inputs)
    assert not np.isfinite(out["loss"])
    want = dp.interpret_grad(program_nochecks.graph, WRT, **inputs)["x"]
    np.testing.assert_array_equal(np.isfinite(grads["x"]), np.isfinite(want))
    tp = _tape_forward(program_nochecks, inputs)
    tp.backward(seed={"loss": 1.0})
    tp.close()
    assert_program_works(program_nochecks)

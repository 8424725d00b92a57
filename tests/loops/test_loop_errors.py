"""Bad inputs to a time-stepped program (issue 28): each is an error naming the culprit,
what was expected and what was found, or, where the input is well defined, the SciPy
answer.

- a source or receiver position outside the grid: a constant position is a ContractError
  when the step is traced (naming the op, the index and the axis size, and what each body
  input of the step stands for); a position read at run time (an int32 input the step
  closes over) is a NumericalError at the checkpoint, in the interpreter and compiled;
- a batch axis that disagrees between carries the step combines: a ContractError naming
  the carries, their leading sizes and the enclosing tensors;
- a halo larger than the field: ``dp.correlate`` pads by its boundary mode, so a footprint
  larger than the field is defined (scipy.ndimage's answer, tested); the valid correlation
  under it refuses weights larger than its input with a ContractError naming both shapes.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest
from scipy import ndimage

import dpt_ir as dp
from dpt_ir.api import core as F
from dpt_ir.ir.errors import ContractError, NumericalError


def _inject(idx: Any, n: int = 8, steps: int = 5) -> dp.Graph:
    """``steps`` steps adding ``f[t]`` at the flat position(s) ``idx`` of an ``n x n`` field."""
    g = dp.GraphBuilder("inject")
    u0 = g.input("u0", (n, n), "float64")
    f = g.input("f", (steps,), "float64", requires_grad=False)
    if idx is None:
        idx = g.input("idx", (1,), "int32", requires_grad=False)

    def step(u: dp.Tensor, ft: dp.Tensor) -> tuple[dp.Tensor, dp.Tensor]:
        flat = dp.add_at(dp.reshape(u, (-1,)), idx, dp.reshape(ft, (1,)))
        return 0.5 * dp.reshape(flat, (n, n)), dp.take(flat, idx)

    u, rec = dp.scan(step, u0, f)
    g.output("loss", dp.sum(u * u) + dp.sum(rec))
    return g.build()


def test_a_constant_source_outside_the_grid_is_a_contract_error_naming_it() -> None:
    with pytest.raises(ContractError) as caught:
        _inject(np.array([64]))
    message = str(caught.value)
    assert "op 'add_at'" in message and "index 64 is out of bounds for an axis of size 64" in message
    assert "expected -64 <= index < 64" in message
    assert "dp.scan" in message and "%carry.0 is %u0 [8, 8] float64" in message


def test_a_constant_receiver_outside_the_grid_is_a_contract_error_naming_it() -> None:
    g = dp.GraphBuilder("receivers")
    u0 = g.input("u0", (3, 8, 8))
    with pytest.raises(ContractError, match=r"op 'take' on %carry\.0: index 8 is out of bounds .* size 8"):
        dp.scan(lambda u, _: (u, dp.take(u, np.array([0, 8]), axis=2)), u0, length=4)


def _inputs(position: int) -> dict[str, np.ndarray]:
    return {"u0": np.zeros((8, 8)), "f": np.arange(1.0, 6.0), "idx": np.array([position], np.int32)}


def test_a_runtime_source_position_closed_over_by_the_step_runs_like_numpy() -> None:
    graph = _inject(None)
    u, rec = np.zeros(64), 0.0
    for ft in np.arange(1.0, 6.0):
        np.add.at(u, [37], ft)
        rec += u[37]
        u = 0.5 * u
    expected = float(np.sum(u * u) + rec)
    assert dp.interpret(graph, **_inputs(37))["loss"] == pytest.approx(expected, rel=1e-14)
    program = dp.compile(graph, wrt=["u0"], device="cpu")
    assert float(program.run(**_inputs(37))["loss"]) == pytest.approx(expected, rel=1e-14)


def test_a_runtime_source_position_outside_the_grid_is_a_numerical_error_naming_the_op() -> None:
    graph = _inject(None)
    with pytest.raises(NumericalError, match=r"op 'add_at': index 64 is out of range for an axis of size 64"):
        dp.interpret(graph, **_inputs(64))
    program = dp.compile(graph, wrt=["u0"], device="cpu")
    for call in (program.run, lambda **x: program.value_and_grad(**x)):
        with pytest.raises(NumericalError, match=r"loop 'scan_\d+'.*op add_at.*outside \[-64, 64\)"):
            call(**_inputs(-65))


def test_carries_with_disagreeing_batch_axes_are_a_contract_error_naming_them() -> None:
    g = dp.GraphBuilder("shots")
    previous = g.input("previous", (4, 8, 8))
    current = g.input("current", (3, 8, 8))
    with pytest.raises(ContractError) as caught:
        dp.scan(lambda c, _: ((c[1], 2.0 * c[1] - c[0]), None), (previous, current), length=3)
    message = str(caught.value)
    assert message.startswith("dp.scan: the carries' leading (batch) axes disagree")
    assert "carry 0 (%previous) has 4, carry 1 (%current) has 3" in message
    assert "%carry.0 is %previous [4, 8, 8] float32; %carry.1 is %current [3, 8, 8] float32" in message
    assert "do not broadcast" in message  # the op that found it, as it said it


def test_a_closure_with_another_batch_is_named_with_its_enclosing_tensor() -> None:
    g = dp.GraphBuilder("mask")
    u0 = g.input("u0", (4, 8, 8))
    mask = g.input("mask", (3, 8, 8), requires_grad=False)
    with pytest.raises(ContractError) as caught:
        dp.scan(lambda u, _: (u + mask, None), u0, length=3)
    message = str(caught.value)
    assert "batch" not in message  # one carry: nothing disagrees between carries
    assert "%carry.0 is %u0 [4, 8, 8] float32; %closure.0 is %mask [3, 8, 8] float32" in message


def test_carries_of_different_batches_the_step_keeps_apart_are_fine() -> None:
    g = dp.GraphBuilder("apart")
    a, b = g.input("a", (4, 3)), g.input("b", (2, 3))
    (fa, fb), _ = dp.scan(lambda c, _: ((c[0] * 0.5, c[1] + 1.0), None), (a, b), length=3)
    g.output("o", dp.sum(fa) + dp.sum(fb))
    out = dp.interpret(g.build(), a=np.ones((4, 3), np.float32), b=np.zeros((2, 3), np.float32))["o"]
    assert float(out) == pytest.approx(12 * 0.125 + 6 * 3.0)


@pytest.mark.parametrize("mode", ["constant", "nearest", "reflect", "mirror", "wrap"])
def test_a_stencil_footprint_larger_than_the_field_is_scipys_answer(mode: str) -> None:
    rng = np.random.default_rng(0)
    weights, u0 = rng.normal(size=(7, 5)), rng.normal(size=(2, 3))
    g = dp.GraphBuilder("halo")
    u = g.input("u0", u0.shape, "float64")
    final, _ = dp.scan(lambda c, _: (0.1 * dp.correlate(c, weights, mode=mode), None), u, length=3)
    g.output("u", final)
    expected = u0
    for _ in range(3):
        expected = 0.1 * ndimage.correlate(expected, weights, mode=mode)
    np.testing.assert_allclose(dp.interpret(g.build(), u0=u0)["u"], expected, rtol=1e-12, atol=1e-15)


def test_a_valid_correlation_larger_than_its_input_is_a_contract_error_naming_both_shapes() -> None:
    g = dp.GraphBuilder("valid")
    u = g.input("u0", (2, 2))
    with pytest.raises(ContractError, match=r"weights of shape \[3, 3\] do not fit an input of shape \[2, 2\]"):
        dp.scan(lambda c, _: (F.apply("correlate_valid", c, weights=np.ones((3, 3)).tolist()), None), u, length=2)

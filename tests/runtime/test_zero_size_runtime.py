"""Zero-size inputs through the runtime's entry points (issue 27): ``run``, ``value_and_grad``
and tape passes, with NumPy and ``wp.array`` inputs, and a tape pass on the user's own
``wp.Tape`` (Warp's `Tape.record_func` refuses a zero-size array: an empty gradient array is
falsy to it). Outputs keep their shapes and dtypes; gradients of zero-size inputs are
zero-size arrays."""

from __future__ import annotations

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp


@pytest.fixture(scope="module")
def program() -> dp.Program:
    g = dp.GraphBuilder("zero_runtime")
    x = g.input("x", (0, 3), "float32")
    y = g.input("y", (2, 3), "float32")
    g.output("e", dp.exp(x))
    g.output("c", dp.concatenate([x, y]))
    g.output("xx", x * 1.0)  # canonicalize makes it the input: an output copy of an empty input
    g.output("loss", dp.sum(dp.exp(x)) + dp.sum(y * y) + dp.sum(dp.sum(x, axis=0)))
    return dp.compile(g.build(), wrt=["x", "y"], device="cpu")


INPUTS = {"x": np.zeros((0, 3), np.float32), "y": np.arange(6, dtype=np.float32).reshape(2, 3)}


def _check_outputs(out: dict[str, np.ndarray]) -> None:
    assert out["e"].shape == (0, 3) and out["xx"].shape == (0, 3) and out["e"].dtype == np.float32
    np.testing.assert_array_equal(out["c"], INPUTS["y"])
    np.testing.assert_allclose(out["loss"], 55.0)


def test_run_and_value_and_grad(program: dp.Program) -> None:
    _check_outputs(program.run(**INPUTS))
    out, grads = program.value_and_grad(**INPUTS)
    _check_outputs(out)
    assert grads["x"].shape == (0, 3) and grads["x"].dtype == np.float32
    np.testing.assert_allclose(grads["y"], 2.0 * INPUTS["y"])


def test_tape_pass_with_warp_arrays(program: dp.Program) -> None:
    inputs = {k: wp.array(v, dtype=wp.float32, device="cpu") for k, v in INPUTS.items()}
    with program.tape_pass() as tp:
        out = tp.forward(**inputs)
    _check_outputs({k: v.numpy().reshape(program.graph.types[program.graph.output_value(k)].shape)
                    for k, v in out.items()})  # fmt: skip
    grads = tp.backward(seed={"loss": 1.0, "e": np.zeros((0, 3), np.float32)})
    assert grads["x"].numpy().size == 0
    np.testing.assert_allclose(grads["y"].numpy().reshape(2, 3), 2.0 * INPUTS["y"])
    tp.close()


def test_tape_pass_on_the_users_tape(program: dp.Program) -> None:
    inputs = {k: wp.array(v, dtype=wp.float32, device="cpu", requires_grad=True) for k, v in INPUTS.items()}
    tape = wp.Tape()
    with tape:
        with program.tape_pass(tape=tape) as tp:
            out = tp.forward(**inputs)
    tape.backward(grads={out["loss"]: wp.array([1.0], dtype=wp.float32, device="cpu")})
    np.testing.assert_allclose(inputs["y"].grad.numpy(), 2.0 * INPUTS["y"])
    assert inputs["x"].grad.numpy().shape == (0, 3)
    tp.close()

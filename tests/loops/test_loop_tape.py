"""Tape passes of loop programs (`dpt_ir.runtime.loop_tape`): forward, then
``backward(seed=...)`` with a scalar or an array seed per output, against the
interpreter's gradients for the same seed, and DESIGN §6's lifecycle. The program is
the small heat loop of `test_compiled_scan` (its body is cached in process)."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from typing import Any

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp
from tests.loops.test_compiled_scan import SHAPE, WRT, heat, inputs


@pytest.fixture(scope="module")
def program() -> Any:
    return dp.compile(heat(checkpoint=2), wrt=WRT, loss="loss")


def test_tape_pass_with_array_and_scalar_seeds_equals_the_interpreter(program: Any) -> None:
    x = inputs()
    seed = {"loss": 0.5, "field": np.random.default_rng(2).uniform(-1, 1, SHAPE).astype(np.float32)}
    with program.tape_pass() as tp:
        outs = tp.forward(**x)
    grads = tp.backward(seed=seed)
    expected = dp.interpret(program.graph, **x)
    np.testing.assert_allclose(outs["field"].numpy(), expected["field"], rtol=1e-5, atol=1e-6)
    oracle = dp.interpret_grad(program.graph, WRT, seed=seed, **x)
    for name in WRT:
        assert isinstance(grads[name], wp.array) and grads[name].shape == x[name].shape
        np.testing.assert_allclose(grads[name].numpy(), oracle[name], rtol=1e-4, atol=1e-5)
    tp.close()
    with program.tape_pass() as again:  # the loss alone: value_and_grad's gradients, bit for bit
        again.forward(**x)
    alone = again.backward(seed={"loss": 1.0})
    vg = program.value_and_grad(**x)[1]
    assert all(np.array_equal(alone[n].numpy(), vg[n]) for n in WRT)
    again.close()


def test_tape_pass_lifecycle_misuse_is_a_lifecycle_error(program: Any) -> None:
    x = inputs()
    tp = program.tape_pass()
    with pytest.raises(dp.LifecycleError, match="run backward"):
        tp.backward(seed={"loss": 1.0})
    with tp:
        tp.forward(**x)
        with pytest.raises(dp.LifecycleError, match="while recording"):
            tp.backward(seed={"loss": 1.0})
        with pytest.raises(dp.LifecycleError, match="another tape pass"):
            with program.tape_pass() as other:
                other.forward(**x)
    tp.backward(seed={"loss": 1.0})
    with pytest.raises(dp.LifecycleError, match="run backward"):
        tp.backward(seed={"loss": 1.0})
    tp.close()
    with pytest.raises(dp.LifecycleError, match="already closed"):
        tp.close()
    with pytest.raises(dp.ContractError, match="cannot join a caller's wp.Tape"):
        program.tape_pass(tape=wp.Tape())
    with pytest.raises(dp.ContractError, match="input"):  # a bad input closes the pass; the program stays usable
        with program.tape_pass() as bad:
            bad.forward(**{**x, "k": x["k"][:2]})
    assert bad.state == "closed"
    with program.tape_pass() as ok:
        ok.forward(**x)
    assert ok.backward(seed={"loss": 1.0})["k"].shape == SHAPE
    ok.close()


def test_tape_passes_in_two_threads_wait_for_each_other(program: Any) -> None:
    x = inputs()

    def one_pass() -> np.ndarray:
        with program.tape_pass() as tp:
            tp.forward(**x)
        k = tp.backward(seed={"loss": 1.0, "field": 1.0})["k"].numpy().copy()
        tp.close()
        return k

    with ThreadPoolExecutor(2) as pool:
        results = list(pool.map(lambda _: one_pass(), range(4)))
    assert all(np.array_equal(r, results[0]) for r in results)

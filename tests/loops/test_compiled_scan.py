"""Compiled loops (`dpt_ir.runtime.loop_program`, `loop`): values and gradients against the
interpreter and the unrolled graph, bit-identical repeated runs and checkpoint policies,
and a compile that does not depend on the loop's length. Programs are small (float32,
8 x 6 fields) and share their compiled body through the in-process compile cache."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.ops.revolve import optimal_advances

LAPLACIAN = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
SHAPE = (8, 6)
STEPS = 6
WRT = ["u0", "k", "xs"]


def heat(steps: int = STEPS, checkpoint: Any = None, loop: bool = True) -> dp.Graph:
    """Heat steps with a closed-over conductivity, a per-step source and a per-step y."""
    g = dp.GraphBuilder("heat_c")
    u0 = g.input("u0", SHAPE)
    k = g.input("k", SHAPE)
    xs = g.input("xs", (steps, *SHAPE))

    def step(u: dp.Tensor, src: dp.Tensor) -> tuple[dp.Tensor, dp.Tensor]:
        u = u + 0.2 * k * dp.correlate(u, LAPLACIAN, mode="nearest") + 0.1 * src
        return u, dp.mean(dp.square(u))

    if loop:
        u, energy = dp.scan(step, u0, xs, checkpoint=checkpoint)
        total = dp.sum(energy)
    else:
        u, total = u0, None
        for i in range(steps):
            u, e = step(u, xs[i])
            total = e if total is None else total + e
    g.output("loss", dp.sum(u * u0) + total)
    g.output("field", u)
    return g.build()


def inputs(steps: int = STEPS) -> dict[str, np.ndarray]:
    rng = np.random.default_rng(5)
    return {
        "u0": rng.uniform(-1, 1, SHAPE).astype(np.float32),
        "k": rng.uniform(0.5, 1.0, SHAPE).astype(np.float32),
        "xs": rng.uniform(-1, 1, (steps, *SHAPE)).astype(np.float32),
    }


@pytest.fixture(scope="module")
def compiled() -> dict[str, Any]:
    graph = heat()
    program = dp.compile(graph, wrt=WRT, loss="loss")
    values, grads = program.value_and_grad(**inputs())
    return {"graph": graph, "program": program, "values": values, "grads": grads}


def test_values_and_gradients_equal_the_interpreter(compiled: dict[str, Any]) -> None:
    graph, x = compiled["graph"], inputs()
    expected = dp.interpret(graph, **x)
    grads = dp.interpret_grad(graph, WRT, seed={"loss": 1.0}, **x)
    for name in ("loss", "field"):
        np.testing.assert_allclose(compiled["values"][name], expected[name], rtol=1e-5, atol=1e-6)
    for name in WRT:
        np.testing.assert_allclose(compiled["grads"][name], grads[name], rtol=1e-4, atol=1e-5)
    run = compiled["program"].run(**x)
    assert np.array_equal(run["field"], compiled["values"]["field"])


def test_gradients_equal_the_unrolled_graph(compiled: dict[str, Any]) -> None:
    unrolled = dp.interpret_grad(heat(loop=False), WRT, seed={"loss": 1.0}, **inputs())
    for name in WRT:
        np.testing.assert_allclose(compiled["grads"][name], unrolled[name], rtol=1e-4, atol=1e-5)


def test_repeated_runs_and_checkpoint_policies_are_bit_identical(compiled: dict[str, Any]) -> None:
    again = compiled["program"].value_and_grad(**inputs())[1]
    assert all(np.array_equal(again[n], compiled["grads"][n]) for n in WRT)
    for policy in (2, "auto"):
        grads = dp.compile(heat(checkpoint=policy), wrt=WRT, loss="loss").value_and_grad(**inputs())[1]
        assert all(np.array_equal(grads[n], compiled["grads"][n]) for n in WRT), policy


def test_replayed_launches_take_each_call_s_own_inputs(compiled: dict[str, Any]) -> None:
    """The recorded step launches are re-pointed at every call's arrays, never a stale one."""
    program, other = compiled["program"], {k: v * np.float32(0.5) for k, v in inputs().items()}
    values, grads = program.value_and_grad(**other)
    expected = dp.interpret_grad(compiled["graph"], WRT, seed={"loss": 1.0}, **other)
    np.testing.assert_allclose(values["field"], dp.interpret(compiled["graph"], **other)["field"], rtol=1e-5, atol=1e-6)
    for name in WRT:
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-4, atol=1e-5)
    again = program.value_and_grad(**inputs())[1]
    assert all(np.array_equal(again[n], compiled["grads"][n]) for n in WRT)


def test_checkpoint_plan_is_reported() -> None:
    """The reverse reruns the schedule's advances less its first sweep, which the forward ran
    and whose stored carries it kept: ``kept_bytes``, one carry per slot past c_0."""
    program = dp.compile(heat(checkpoint=2), wrt=WRT, loss="loss")
    (vjp,) = [r for r in program.report.loops if r.op == "scan_vjp"]
    carry = 8 * 6 * 4
    assert vjp.slots == 2 and vjp.bytes_held == 2 * carry
    assert "its first sweep kept by the forward" in vjp.policy
    assert vjp.advances == optimal_advances(STEPS, 2) - (STEPS - 1) and vjp.kept_bytes == carry
    assert vjp.recompute_factor == pytest.approx(vjp.advances / STEPS)


@pytest.mark.parametrize("slots", [1, 2])
def test_a_checkpointed_reverse_reads_each_call_s_own_forward(compiled: dict[str, Any], slots: int) -> None:
    """The carries the forward keeps for the reverse's first sweep are the call's own: other
    inputs, then the first ones again, give the store-every-carry program's bits each time."""
    program = dp.compile(heat(checkpoint=slots), wrt=WRT, loss="loss")
    other = {k: v * np.float32(0.5) for k, v in inputs().items()}
    want = compiled["program"].value_and_grad(**other)[1]
    for values, expected in ((other, want), (inputs(), compiled["grads"]), (other, want)):
        grads = program.value_and_grad(**values)[1]
        assert all(np.array_equal(grads[n], expected[n]) for n in WRT), slots


@pytest.mark.parametrize("slots", [1, 2, 3])
def test_checkpointed_reverse_holds_at_most_k_plus_2_carries(compiled: dict[str, Any], slots: int) -> None:
    program = dp.compile(heat(checkpoint=slots), wrt=WRT, loss="loss")
    grads = program.value_and_grad(**inputs())[1]
    assert all(np.array_equal(grads[n], compiled["grads"][n]) for n in WRT), slots
    (vjp,) = [r for r in program.report.loops if r.op == "scan_vjp"]
    carry = 8 * 6 * 4
    # The carry and cotangent arrays the reverse holds (slot 0 is the caller's initial carry):
    # its step buffers, and as its other slots the carries its forward kept in the first sweep.
    assert vjp.carry_bytes == carry and vjp.carry_bytes_held == 3 * carry, vjp
    assert vjp.carry_bytes_held + vjp.kept_bytes == (slots + 2) * carry, vjp
    assert vjp.workspace_bytes > 0


def test_compile_does_not_depend_on_length(compiled: dict[str, Any]) -> None:
    start = time.perf_counter()
    long = dp.compile(heat(steps=1000), wrt=WRT, loss="loss")
    seconds = time.perf_counter() - start
    short = compiled["program"]
    rows = [[(r.body_kernels, r.vjp_kernels) for r in p.report.loops] for p in (long, short)]
    assert rows[0] == rows[1]
    assert long.kernel_count == short.kernel_count
    assert seconds < 60, seconds  # the new module is the segments around the loop; the body is cached


def test_fori_loop_compiles_with_its_step_index() -> None:
    g = dp.GraphBuilder("fori_c")
    x = g.input("x", (5,))
    y = dp.fori_loop(4, lambda i, c: dp.sin(c) + dp.cast(i, "float32") * x, x)
    g.output("out", dp.sum(dp.square(y)))
    graph = g.build()
    xv = np.linspace(-1, 1, 5).astype(np.float32)
    values, grads = dp.compile(graph, wrt=["x"]).value_and_grad(x=xv)
    np.testing.assert_allclose(values["out"], dp.interpret(graph, x=xv)["out"], rtol=1e-5)
    np.testing.assert_allclose(grads["x"], dp.interpret_grad(graph, "x", x=xv)["x"], rtol=1e-4, atol=1e-6)


def test_dumps_state_the_policy_bytes_and_recompute_factor(tmp_path: Any) -> None:
    dp.compile(heat(checkpoint=2), wrt=WRT, loss="loss", dump_dir=tmp_path)
    saved = (tmp_path / "saved.txt").read_text()
    assert "binomial (revolve) with K=2 stored carries" in saved
    assert f"holds 2 stored carries = {2 * 8 * 6 * 4} bytes" in saved and "recompute factor" in saved
    pieces = {p.parent.name for p in tmp_path.glob("*/fusion.txt")}
    assert any(p.startswith("vg.seg") for p in pieces) and any(p.startswith("body_vjp_") for p in pieces), pieces
    assert len(list((tmp_path / "kernels").glob("*.py"))) == 1  # one module for every piece


def test_a_step_out_of_domain_raises_numerical_error_naming_the_loop() -> None:
    g = dp.GraphBuilder("domain_c")
    x = g.input("x", (3,))
    y = dp.fori_loop(3, lambda i, c: dp.log(c), x)
    g.output("out", dp.sum(y))
    program = dp.compile(g.build())
    with pytest.raises(dp.NumericalError, match="loop") as info:
        program.run(x=np.full(3, 0.5, np.float32))  # log(0.5) < 0, then log of a negative number
    assert "log" in str(info.value)
    assert program.run(x=np.full(3, 1e30, np.float32))["out"] > 0  # usable afterwards


def test_nested_loops_are_refused_with_a_reason() -> None:
    g = dp.GraphBuilder("nested_c")
    x = g.input("x", (3,))
    y, _ = dp.scan(lambda c, _: (dp.scan(lambda d, _: (dp.sin(d), None), c, length=2)[0], None), x, length=2)
    g.output("out", dp.sum(y))
    with pytest.raises(dp.ContractError, match="body holds loop node"):
        dp.compile(g.build())


def _pair_step(kind: str) -> Any:
    """Steps whose outputs a kernel cannot write in place: a y that is the carry input or
    an x (passthrough), a y that is also the new carry."""
    if kind == "passthrough":
        return lambda c, x, w: ((dp.sin(c[0]) * w + x, c[1] + dp.sum(x)), (c[0], x))
    return lambda c, x, w: (((v := dp.tanh(c[0] + x)), c[1] + dp.sum(v)), (v, v * w))


@pytest.mark.parametrize("kind", ["passthrough", "shared"])
def test_carry_pairs_and_ys_that_alias_inputs_or_each_other(kind: str) -> None:
    g = dp.GraphBuilder(f"pairs_{kind}")
    a, b = g.input("a", (4,)), g.input("b", ())
    xs, w = g.input("xs", (5, 4)), g.input("w", (4,))
    step = _pair_step(kind)
    (ca, cb), (y0, y1) = dp.scan(lambda c, x: step(c, x, w), (a, b), xs, checkpoint=2 if kind == "shared" else None)
    g.output("loss", dp.sum(ca) + cb + dp.sum(y0 * y0) + dp.sum(y1 * y1))
    graph = g.build()
    rng = np.random.default_rng(1)
    x = {
        "a": rng.uniform(-1, 1, 4).astype(np.float32),
        "b": np.float32(0.3),
        "xs": rng.uniform(-1, 1, (5, 4)).astype(np.float32),
        "w": rng.uniform(-1, 1, 4).astype(np.float32),
    }
    wrt = ["a", "b", "xs", "w"]
    values, grads = dp.compile(graph, wrt=wrt).value_and_grad(**x)
    np.testing.assert_allclose(values["loss"], dp.interpret(graph, **x)["loss"], rtol=1e-6)
    expected = dp.interpret_grad(graph, wrt, **x)
    for name in wrt:
        np.testing.assert_allclose(grads[name], expected[name], rtol=1e-5, atol=1e-6)


def test_measured_costs_are_reported_and_dumped(tmp_path: Path) -> None:
    """`loop_costs` gives each sweep's last wall time (None before it runs) and a reverse's
    rebuilding of carries at its forward's measured time a step; the second value_and_grad
    writes them into saved.txt."""
    program = dp.compile(heat(checkpoint=2), wrt=WRT, loss="loss", dump_dir=tmp_path)
    assert all(c.seconds is None for c in program.loop_costs())
    program.value_and_grad(**inputs())
    assert "measured" not in (tmp_path / "saved.txt").read_text()  # the first call records the step tables
    program.value_and_grad(**inputs())
    costs = program.loop_costs()
    (vjp,) = [c for c in costs if c.op == "scan_vjp"]
    (vjp_row,) = [r for r in program.report.loops if r.op == "scan_vjp"]
    fwd = [c for c in costs if c.op == "scan" and c.seconds is not None]
    assert len(fwd) == 1 and fwd[0].seconds is not None and fwd[0].seconds > 0
    assert vjp.seconds is not None and vjp.seconds_per_step == pytest.approx(vjp.seconds / STEPS)
    assert vjp.steps_rerun == vjp_row.advances > 0
    assert vjp.rerun_seconds == pytest.approx(vjp.steps_rerun * fwd[0].seconds / STEPS)
    text = (tmp_path / "saved.txt").read_text()
    assert f"measured at the second value_and_grad: this sweep {vjp.seconds * 1e3:.3f} ms" in text
    assert f"({vjp.steps_rerun} steps at its forward's measured time a step)" in text

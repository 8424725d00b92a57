"""Forward mode and second order through `dp.scan` (docs/second_order.md): on a 50-step heat
scan with respect to its closed-over conductivity ``k`` (and its initial field), ``jvp``
equals central finite differences (float64) and ``torch.func.jvp`` of the same torch loop,
``hvp`` equals finite differences of the gradient and ``torch.func`` forward over reverse,
and the compiled products equal the interpreter's. One small program (8 x 6)."""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dpt_ir as dp

LAPLACIAN = np.array([[0.0, 1.0, 0.0], [1.0, -4.0, 1.0], [0.0, 1.0, 0.0]])
SHAPE, STEPS, WRT = (8, 6), 50, ["u0", "k"]


def _graph() -> dp.Graph:
    g = dp.GraphBuilder("heat_so")
    u0, k = g.input("u0", SHAPE, "float64"), g.input("k", SHAPE, "float64")
    obs = g.input("obs", SHAPE, "float64", requires_grad=False)

    def step(u: dp.Tensor, _: Any) -> tuple[dp.Tensor, dp.Tensor]:
        u = u + 0.05 * dp.tanh(k) * dp.correlate(u, LAPLACIAN, mode="nearest") + 0.01 * dp.sin(u)
        return u, dp.sum(u * u)

    u, energy = dp.scan(step, u0, length=STEPS, checkpoint=7)
    g.output("loss", dp.sum(dp.square(u - obs)) + 1e-3 * dp.sum(energy))
    g.output("u", u)
    return g.build()


@pytest.fixture(scope="module")
def case() -> dict[str, Any]:
    rng = np.random.default_rng(0)
    x = {"u0": rng.standard_normal(SHAPE), "k": rng.uniform(0.5, 1.0, SHAPE), "obs": rng.standard_normal(SHAPE)}
    v = {"u0": rng.standard_normal(SHAPE), "k": rng.standard_normal(SHAPE)}
    graph = _graph()
    return {"graph": graph, "x": x, "v": v, "program": dp.compile(graph, wrt=WRT, loss="loss")}


def _moved(c: dict[str, Any], h: float) -> list[dict[str, np.ndarray]]:
    return [{**c["x"], **{n: c["x"][n] + s * h * c["v"][n] for n in WRT}} for s in (1, -1)]


def test_interpreter_matches_finite_differences(case: dict[str, Any]) -> None:
    graph, h = case["graph"], 1e-6
    _, tangents = dp.interpret_jvp(graph, case["v"], **case["x"])
    plus, minus = (dp.interpret(graph, **m) for m in _moved(case, h))
    for name, t in tangents.items():
        np.testing.assert_allclose(t, (plus[name] - minus[name]) / (2 * h), rtol=1e-6, atol=1e-8)
    _, grads, hvps = dp.interpret_hvp(graph, WRT, case["v"], **case["x"])
    gp, gm = (dp.interpret_grad(graph, WRT, **m) for m in _moved(case, h))
    for w in WRT:
        np.testing.assert_allclose(hvps[w], (gp[w] - gm[w]) / (2 * h), rtol=1e-6, atol=1e-8)


def test_compiled_equals_the_interpreter(case: dict[str, Any]) -> None:
    graph, program, x, v = case["graph"], case["program"], case["x"], case["v"]
    outs, tangents = program.jvp(v, **x)
    want_outs, want = dp.interpret_jvp(graph, v, **x)
    for name in want:
        np.testing.assert_allclose(outs[name], want_outs[name], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(tangents[name], want[name], rtol=1e-12, atol=1e-12)
    _, grads, hvps = program.hvp(v, **x)
    _, want_g, want_h = dp.interpret_hvp(graph, WRT, v, **x)
    for w in WRT:
        np.testing.assert_allclose(grads[w], want_g[w], rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(hvps[w], want_h[w], rtol=1e-12, atol=1e-12)
    # gnvp of the field: J_uᵀ J_u v, the vjp of the jvp (the interpreter's vjp of the tangent)
    _, products = program.gnvp(v, output="u", **x)
    want_gn = dp.interpret_grad(graph, WRT, seed={"u": want["u"]}, **x)
    for w in WRT:
        np.testing.assert_allclose(products[w], want_gn[w], rtol=1e-12, atol=1e-12)
    with pytest.raises(dp.ContractError, match="not differentiated inputs"):
        program.jvp({"obs": v["k"]}, **x)
    with pytest.raises(dp.ContractError, match="expected shape"):
        program.hvp({"k": v["k"][:2]}, **x)


def test_equals_torch_func(case: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    from torch.func import grad, jvp

    x, v = case["x"], case["v"]
    lap = torch.from_numpy(LAPLACIAN)[None, None]
    obs = torch.from_numpy(x["obs"])

    def loss(u0: Any, k: Any) -> Any:
        u, energy = u0, 0.0
        for _ in range(STEPS):
            pad = torch.nn.functional.pad(u[None, None], (1, 1, 1, 1), mode="replicate")
            u = u + 0.05 * torch.tanh(k) * torch.nn.functional.conv2d(pad, lap)[0, 0] + 0.01 * torch.sin(u)
            energy = energy + torch.sum(u * u)
        return torch.sum((u - obs) ** 2) + 1e-3 * energy

    primals = tuple(torch.from_numpy(x[w]) for w in WRT)
    tangents = tuple(torch.from_numpy(v[w]) for w in WRT)
    _, jv = jvp(loss, primals, tangents)
    _, hv = jvp(grad(loss, argnums=(0, 1)), primals, tangents)
    _, tangent = case["program"].jvp(v, **x)
    _, _, hvps = case["program"].hvp(v, **x)
    np.testing.assert_allclose(tangent["loss"], jv.numpy(), rtol=1e-10)
    for w, want in zip(WRT, hv, strict=True):
        np.testing.assert_allclose(hvps[w], want.numpy(), rtol=1e-9, atol=1e-12)


def test_torch_double_backward_of_the_loss_goes_through_hvp(case: dict[str, Any]) -> None:
    torch = pytest.importorskip("torch")
    import dpt_ir.torch as dt

    x, v = case["x"], case["v"]
    t = {n: torch.tensor(a, requires_grad=n in WRT) for n, a in x.items()}
    loss, _ = dt.function(case["program"])(**t)
    grads = torch.autograd.grad(loss, [t[w] for w in WRT], create_graph=True)
    dot = sum((g * torch.from_numpy(v[w])).sum() for g, w in zip(grads, WRT, strict=True))
    hv = torch.autograd.grad(dot, [t[w] for w in WRT])
    _, _, want = case["program"].hvp(v, **x)
    for w, h in zip(WRT, hv, strict=True):
        np.testing.assert_allclose(h.numpy(), want[w], rtol=1e-12, atol=1e-12)

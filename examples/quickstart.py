"""dpt_ir quickstart: declare a differentiable graph, inspect it, evaluate it and its
gradient with the NumPy reference, check the gradient numerically, compile it into fused
Warp kernels, optimise with the compiled program, and save/reload the graph.

The model is Beer–Lambert transmission with a weighted squared-error objective:

    loss = sum(w * square(1.3 * exp(-0.7 * x) - obs))

Run: ``python examples/quickstart.py [--save GRAPH.json]`` (the first Warp compile of a
machine takes ~10 s; later runs reuse the on-disk cache). ``--save`` keeps the graph's JSON
document, for ``dpt-ir show GRAPH.json`` and the other ``dpt-ir`` commands.
"""

from __future__ import annotations

import argparse
import tempfile
from pathlib import Path

import numpy as np

import dpt_ir as dp

SHAPE = (256, 256)


def transmission_loss(shape: tuple[int, ...], dtype: str = "float32") -> dp.Graph:
    """The DESIGN §2 graph: x is differentiable, obs and w are data."""
    g = dp.GraphBuilder("transmission_loss")
    x = g.input("x", shape=shape, dtype=dtype)
    obs = g.input("obs", shape=shape, dtype=dtype, requires_grad=False)
    w = g.input("w", shape=shape, dtype=dtype, requires_grad=False)
    pred = 1.3 * dp.exp(-0.7 * x)
    loss = dp.sum(w * dp.square(pred - obs))
    g.output("loss", loss)
    return g.build()


def synthetic_data(shape: tuple[int, ...], seed: int = 0) -> dict[str, np.ndarray]:
    """Observations of a known thickness map with a little noise, and positive weights."""
    rng = np.random.default_rng(seed)
    x_true = rng.uniform(0.5, 2.0, shape)
    obs = 1.3 * np.exp(-0.7 * x_true) + rng.normal(0.0, 0.01, shape)
    w = rng.uniform(0.5, 1.5, shape)
    return {"obs": obs.astype(np.float32), "w": w.astype(np.float32)}


def check_one_gradient(data: dict[str, np.ndarray], x: np.ndarray, grad: np.ndarray) -> None:
    """Compare grad[i, j] with a central finite difference, taken in float64 so that
    rounding does not swamp the difference quotient."""
    graph64 = transmission_loss(SHAPE, "float64")
    data64 = {k: v.astype(np.float64) for k, v in data.items()}
    i, j, h = 17, 42, 1e-6
    x_hi, x_lo = x.astype(np.float64), x.astype(np.float64)
    x_hi[i, j] += h
    x_lo[i, j] -= h
    f_hi = dp.interpret(graph64, x=x_hi, **data64)["loss"]
    f_lo = dp.interpret(graph64, x=x_lo, **data64)["loss"]
    fd = float(f_hi - f_lo) / (2 * h)
    print(f"d loss / d x[{i},{j}]: autodiff {grad[i, j]:.6f}, finite difference {fd:.6f}")
    assert np.isclose(grad[i, j], fd, rtol=1e-4, atol=1e-6), "gradient check failed"


def save_and_reload(graph: dp.Graph, path: Path | None) -> str:
    """Write the graph's JSON document to ``path`` (None: a temporary folder, removed
    after), check that it reads back equal, and say where it is."""
    if path is None:
        with tempfile.TemporaryDirectory() as tmp:
            size = _round_trip(graph, Path(tmp) / "transmission_loss.json")
        return (
            f"wrote and reloaded transmission_loss.json ({size} bytes, in a temporary folder); to keep it, run "
            "`python examples/quickstart.py --save transmission_loss.json`, then `dpt-ir show transmission_loss.json`"
        )
    size = _round_trip(graph, path)
    return f"wrote and reloaded {path} ({size} bytes); try `dpt-ir show {path}`"


def _round_trip(graph: dp.Graph, path: Path) -> int:
    path.write_text(graph.model_dump_json())
    reloaded = dp.Graph.model_validate_json(path.read_text())
    assert reloaded == graph, "JSON round trip changed the graph"
    return path.stat().st_size


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--save", type=Path, metavar="GRAPH.json", help="keep the graph's JSON document here")
    args = parser.parse_args()
    graph = transmission_loss(SHAPE)
    print(graph.to_text())

    data = synthetic_data(SHAPE)
    x = np.ones(SHAPE, np.float32)
    loss = dp.interpret(graph, x=x, **data)["loss"]
    grad = dp.interpret_grad(graph, ["x"], x=x, **data)["x"]
    print(f"loss = {float(loss):.4f}, |grad| = {float(np.linalg.norm(grad)):.4f}")
    check_one_gradient(data, x, grad)

    program = dp.compile(graph, wrt=["x"])
    report = program.report
    print(
        f"compiled: {report.plans['value_and_grad'].kernels} kernel(s) for value_and_grad, "
        f"cache {report.cache}, {report.compile_seconds:.2f} s"
    )
    out, grads = program.value_and_grad(x=x, **data)
    assert np.allclose(out["loss"], loss, rtol=1e-5) and np.allclose(grads["x"], grad, rtol=1e-4, atol=1e-6)
    print(f"compiled value and gradient match the interpreter ({program.launch_count} kernel launch)")

    lr = np.float32(1.5)
    for step in range(5):
        out, grads = program.value_and_grad(x=x, **data)
        x = x - lr * grads["x"]
        print(f"step {step + 1}: loss = {float(out['loss']):.4f}")

    print(save_and_reload(graph, args.save))


if __name__ == "__main__":
    main()

"""`dp.squared_error` and `dp.poisson_deviance` against their closed forms (NumPy), in the
interpreter for every variant (weighted or not, bool/uint8/no mask, sum/mean, float32 and
float64) and compiled for one program holding them all (float64, checks on).

Masked lanes hold garbage (NaN observations and predictions, NaN and zero means, negative
counts and weights): they contribute exactly zero loss and gradient and never raise.
Unmasked zero means with positive counts, negative counts and negative weights raise
`dp.NumericalError` at the checkpoint, and the program works for the next good call.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import pytest

import dpt_ir as dp

SHAPE = (4, 5)
RTOL = {"float64": 1e-12, "float32": 1e-5}
MASKS = ("none", "bool", "uint8")
# Masked-out lanes (flat indices) and what each holds in `masked_garbage`.
MASKED = (1, 6, 8, 13, 17, 19)


# -- closed forms -------------------------------------------------------------------------------
def closed_squared_error(
    pred: np.ndarray, obs: np.ndarray, w: np.ndarray | None, valid: np.ndarray, reduction: str
) -> tuple[float, np.ndarray]:
    """(loss, d loss / d pred) in float64."""
    pred, obs = np.where(valid, pred, 0.0).astype(np.float64), np.where(valid, obs, 0.0).astype(np.float64)
    w = np.ones(pred.shape) if w is None else np.where(valid, w, 0.0).astype(np.float64)
    per = np.where(valid, w * (pred - obs) ** 2, 0.0)
    grad = np.where(valid, 2.0 * w * (pred - obs), 0.0)
    scale = 1.0 / pred.size if reduction == "mean" else 1.0
    return float(per.sum()) * scale, grad * scale


def closed_poisson(
    mean: np.ndarray, counts: np.ndarray, w: np.ndarray | None, valid: np.ndarray, reduction: str
) -> tuple[float, np.ndarray]:
    """(loss, d loss / d mean) of the half deviance in float64, ``c log(c/m) = 0`` at ``c = 0``."""
    m = np.where(valid, mean, 1.0).astype(np.float64)
    c = np.where(valid, counts, 0.0).astype(np.float64)
    w = np.ones(m.shape) if w is None else np.where(valid, w, 0.0).astype(np.float64)
    with np.errstate(divide="ignore", invalid="ignore"):
        ratio = np.where(c > 0, c / m, 0.0)  # a zero count has no log term, whatever the mean
        xlogx = np.where(c > 0, c * np.log(np.where(c > 0, c, 1.0) / m), 0.0)
    per = np.where(valid, w * (m - c + xlogx), 0.0)
    grad = np.where(valid, w * (1.0 - ratio), 0.0)
    scale = 1.0 / m.size if reduction == "mean" else 1.0
    return float(per.sum()) * scale, grad * scale


# -- data -----------------------------------------------------------------------------------------
def good_data(dtype: str, seed: int = 0) -> dict[str, np.ndarray]:
    """Inputs inside every domain: positive means, non-negative integer counts (some 0),
    non-negative weights (one 0), a mask with the lanes `MASKED` off."""
    rng = np.random.default_rng(seed)
    counts = rng.poisson(2.0, SHAPE).astype(dtype)
    counts.flat[[0, 5, 11]] = 0.0
    w = rng.uniform(0.2, 2.0, SHAPE).astype(dtype)
    w.flat[3] = 0.0
    mask = np.ones(SHAPE, bool)
    mask.flat[list(MASKED)] = False
    return {
        "pred": rng.uniform(0.5, 2.0, SHAPE).astype(dtype),
        "obs": rng.uniform(0.0, 2.0, SHAPE).astype(dtype),
        "mean": rng.uniform(0.3, 3.0, SHAPE).astype(dtype),
        "counts": counts,
        "w": w,
        "mask": mask,
    }


def masked_garbage(data: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """``data`` with the masked lanes holding values that are invalid when unmasked."""
    out = {k: v.copy() for k, v in data.items()}
    a, b, c, d, e, f = MASKED
    out["obs"].flat[[a, b]] = np.nan
    out["pred"].flat[c] = np.nan
    out["pred"].flat[d] = np.inf
    out["mean"].flat[a] = np.nan
    out["mean"].flat[[b, c]] = 0.0  # with a positive count at b
    out["counts"].flat[b] = 3.0
    out["mean"].flat[d] = -1.0
    out["counts"].flat[[c, e]] = -2.0
    out["counts"].flat[f] = np.nan
    out["w"].flat[[e, f]] = -1.5
    out["w"].flat[d] = np.nan
    return out


def as_mask(mask: np.ndarray, kind: str) -> np.ndarray | None:
    """The mask as bool or uint8 (non-zero values other than 1 are valid too), or None."""
    if kind == "none":
        return None
    if kind == "bool":
        return mask
    return np.where(mask, np.arange(mask.size).reshape(mask.shape) % 3 + 1, 0).astype(np.uint8)


def objective_graph(which: str, dtype: str, weighted: bool, mask: str, reduction: str) -> dp.Graph:
    """``loss = objective(a, b, w, mask, reduction)`` with differentiable ``a``."""
    g = dp.GraphBuilder(f"{which}_{dtype}")
    a = g.input("a", SHAPE, dtype)
    b = g.input("b", SHAPE, dtype, requires_grad=False)
    w = g.input("w", SHAPE, dtype, requires_grad=False) if weighted else None
    m = g.input("mask", SHAPE, "bool" if mask == "bool" else "uint8", requires_grad=False) if mask != "none" else None
    fn = dp.squared_error if which == "squared_error" else dp.poisson_deviance
    g.output("loss", fn(a, b, w, m, reduction))
    return g.build()


def objective_inputs(which: str, data: dict[str, np.ndarray], weighted: bool, mask: str) -> dict[str, np.ndarray]:
    a, b = ("pred", "obs") if which == "squared_error" else ("mean", "counts")
    inputs = {"a": data[a], "b": data[b]}
    if weighted:
        inputs["w"] = data["w"]
    if mask != "none":
        inputs["mask"] = as_mask(data["mask"], mask)
    return inputs


def closed(which: str, data: dict[str, np.ndarray], weighted: bool, valid: np.ndarray, reduction: str) -> Any:
    w = data["w"] if weighted else None
    if which == "squared_error":
        return closed_squared_error(data["pred"], data["obs"], w, valid, reduction)
    return closed_poisson(data["mean"], data["counts"], w, valid, reduction)


# -- interpreter -----------------------------------------------------------------------------------
@pytest.mark.parametrize("which", ["squared_error", "poisson_deviance"])
@pytest.mark.parametrize("dtype", ["float64", "float32"])
@pytest.mark.parametrize("weighted", [False, True])
@pytest.mark.parametrize("mask", MASKS)
@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_objective_closed_form(which: str, dtype: str, weighted: bool, mask: str, reduction: str) -> None:
    """Value and gradient; with a mask, garbage in the masked lanes changes nothing."""
    graph = objective_graph(which, dtype, weighted, mask, reduction)
    data = good_data(dtype)
    valid = data["mask"] if mask != "none" else np.ones(SHAPE, bool)
    loss, grad = closed(which, data, weighted, valid, reduction)
    inputs = objective_inputs(which, data, weighted, mask)
    out = dp.interpret(graph, **inputs)["loss"]
    g = dp.interpret_grad(graph, ["a"], **inputs)["a"]
    assert out.dtype == np.dtype(dtype) and g.dtype == np.dtype(dtype)
    np.testing.assert_allclose(out, loss, rtol=RTOL[dtype])
    np.testing.assert_allclose(g, grad, rtol=RTOL[dtype], atol=RTOL[dtype] * np.abs(grad).max())
    if mask == "none":
        return
    bad = objective_inputs(which, masked_garbage(data), weighted, mask)
    np.testing.assert_array_equal(dp.interpret(graph, **bad)["loss"], out)
    g_bad = dp.interpret_grad(graph, ["a"], **bad)["a"]
    np.testing.assert_array_equal(g_bad, g)
    assert np.all(g_bad[~valid] == 0.0)


@pytest.mark.parametrize("reduction", ["sum", "mean"])
def test_mean_divides_by_pixel_count(reduction: str) -> None:
    """``mean`` divides by the number of pixels, not by the sum of weights or valid lanes."""
    graph = objective_graph("squared_error", "float64", True, "bool", reduction)
    data = good_data("float64")
    total = dp.interpret(objective_graph("squared_error", "float64", True, "bool", "sum"),
                         **objective_inputs("squared_error", data, True, "bool"))["loss"]  # fmt: skip
    out = dp.interpret(graph, **objective_inputs("squared_error", data, True, "bool"))["loss"]
    np.testing.assert_allclose(out, total / (np.prod(SHAPE) if reduction == "mean" else 1), rtol=1e-15)


def test_poisson_zero_counts() -> None:
    """``c log(c/m) = 0`` at ``c = 0``, even for a tiny mean or a zero mean: loss ``w m``,
    gradient ``w``."""
    graph = objective_graph("poisson_deviance", "float64", True, "none", "sum")
    mean = np.full(SHAPE, 1e-300)
    mean.flat[0] = 0.0
    mean.flat[1] = 7.5
    w = np.full(SHAPE, 2.0)
    inputs = {"a": mean, "b": np.zeros(SHAPE), "w": w}
    np.testing.assert_allclose(dp.interpret(graph, **inputs)["loss"], 2.0 * mean.sum(), rtol=1e-15)
    np.testing.assert_array_equal(dp.interpret_grad(graph, ["a"], **inputs)["a"], w)


def test_poisson_gradient_is_stable_for_large_ratios() -> None:
    """Large and small count/mean ratios give finite values that match the closed form."""
    graph = objective_graph("poisson_deviance", "float64", False, "none", "sum")
    mean = np.geomspace(1e-8, 1e8, np.prod(SHAPE)).reshape(SHAPE)
    counts = np.geomspace(1e6, 1e-2, np.prod(SHAPE)).reshape(SHAPE).round()
    loss, grad = closed_poisson(mean, counts, None, np.ones(SHAPE, bool), "sum")
    np.testing.assert_allclose(dp.interpret(graph, a=mean, b=counts)["loss"], loss, rtol=1e-12)
    np.testing.assert_allclose(dp.interpret_grad(graph, ["a"], a=mean, b=counts)["a"], grad, rtol=1e-12)


# -- compiled ----------------------------------------------------------------------------------------
OUTPUTS = ("se", "pd", "se_plain", "pd_plain")
WRT = ["pred", "mean", "pred2", "mean2"]


def objectives_graph() -> dp.Graph:
    """Both objectives, masked (uint8 for squared error, bool for the deviance) and
    weighted, plus unmasked unweighted copies on their own inputs; ``loss`` is their sum."""
    g = dp.GraphBuilder("objectives")
    f = "float64"
    pred, mean, pred2, mean2 = (g.input(n, SHAPE, f) for n in WRT)
    obs, counts, w, obs2, counts2 = (
        g.input(n, SHAPE, f, requires_grad=False) for n in ("obs", "counts", "w", "obs2", "counts2")
    )
    mask = g.input("mask", SHAPE, "bool", requires_grad=False)
    mask8 = g.input("mask8", SHAPE, "uint8", requires_grad=False)
    terms = {
        "se": dp.squared_error(pred, obs, w, mask8, reduction="mean"),
        "pd": dp.poisson_deviance(mean, counts, w, mask, reduction="sum"),
        "se_plain": dp.squared_error(pred2, obs2),
        "pd_plain": dp.poisson_deviance(mean2, counts2, reduction="mean"),
    }
    for name, t in terms.items():
        g.output(name, t)
    g.output("loss", terms["se"] + terms["pd"] + terms["se_plain"] + terms["pd_plain"])
    return g.build()


def program_inputs(data: dict[str, np.ndarray], plain: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The compiled program's inputs: masked terms from ``data``, plain ones from ``plain``."""
    return {
        "pred": data["pred"], "mean": data["mean"], "obs": data["obs"], "counts": data["counts"], "w": data["w"],
        "mask": data["mask"], "mask8": as_mask(data["mask"], "uint8"),
        "pred2": plain["pred"], "mean2": plain["mean"], "obs2": plain["obs"], "counts2": plain["counts"],
    }  # fmt: skip


@pytest.fixture(scope="session")
def objectives_program() -> dp.Program:
    """`objectives_graph` compiled wrt the predictions and means (float64, checks on)."""
    return dp.compile(objectives_graph(), wrt=WRT, loss="loss", device="cpu", checks=True)


@pytest.fixture
def good() -> dict[str, np.ndarray]:
    return program_inputs(good_data("float64", 0), good_data("float64", 1))


def expected(inputs: dict[str, np.ndarray]) -> tuple[dict[str, float], dict[str, np.ndarray]]:
    """Closed-form outputs and gradients of `objectives_graph`."""
    valid, everywhere = inputs["mask"], np.ones(SHAPE, bool)
    se, d_pred = closed_squared_error(inputs["pred"], inputs["obs"], inputs["w"], valid, "mean")
    pd, d_mean = closed_poisson(inputs["mean"], inputs["counts"], inputs["w"], valid, "sum")
    se2, d_pred2 = closed_squared_error(inputs["pred2"], inputs["obs2"], None, everywhere, "sum")
    pd2, d_mean2 = closed_poisson(inputs["mean2"], inputs["counts2"], None, everywhere, "mean")
    outs = {"se": se, "pd": pd, "se_plain": se2, "pd_plain": pd2, "loss": se + pd + se2 + pd2}
    return outs, {"pred": d_pred, "mean": d_mean, "pred2": d_pred2, "mean2": d_mean2}


def check_against_closed_form(
    outs: dict[str, np.ndarray], grads: dict[str, np.ndarray] | None, inputs: dict[str, np.ndarray]
) -> None:
    ref_outs, ref_grads = expected(inputs)
    for name, value in ref_outs.items():
        np.testing.assert_allclose(outs[name], value, rtol=1e-12, err_msg=name)
    for name, value in (grads or {}).items():
        np.testing.assert_allclose(value, ref_grads[name], rtol=1e-12, atol=1e-14, err_msg=name)


def test_compiled_matches_closed_form_and_interpreter(objectives_program: dp.Program, good: dict) -> None:
    outs, grads = objectives_program.value_and_grad(**good)
    check_against_closed_form(outs, grads, good)
    check_against_closed_form(objectives_program.run(**good), None, good)
    graph = objectives_program.graph
    ref = dp.interpret(graph, **good)
    ref_grads = dp.interpret_grad(graph, WRT, seed={"loss": 1.0}, **good)
    for name in (*OUTPUTS, "loss"):
        np.testing.assert_allclose(outs[name], ref[name], rtol=1e-12, err_msg=name)
    for name in WRT:
        np.testing.assert_allclose(grads[name], ref_grads[name], rtol=1e-12, atol=1e-14, err_msg=name)


def test_compiled_masked_garbage_is_exactly_ignored(objectives_program: dp.Program, good: dict) -> None:
    """NaN observations/predictions, NaN/zero/negative means, negative counts and weights in
    masked lanes: no error, bit-identical loss, exactly zero gradient there."""
    data = good_data("float64", 0)
    bad = program_inputs(masked_garbage(data), good_data("float64", 1))
    ref_outs, ref_grads = objectives_program.value_and_grad(**good)
    outs, grads = objectives_program.value_and_grad(**bad)
    for name in (*OUTPUTS, "loss"):
        np.testing.assert_array_equal(outs[name], ref_outs[name], err_msg=name)
    valid = data["mask"]
    for name in WRT:
        np.testing.assert_array_equal(grads[name], ref_grads[name], err_msg=name)
    for name in ("pred", "mean"):
        assert np.all(grads[name][~valid] == 0.0), name
    np.testing.assert_array_equal(objectives_program.run(**bad)["loss"], ref_outs["loss"])
    # The interpreter agrees.
    ref = dp.interpret(objectives_program.graph, **bad)
    np.testing.assert_array_equal(ref["loss"], dp.interpret(objectives_program.graph, **good)["loss"])


def _with(inputs: dict[str, np.ndarray], **lanes: tuple[int, float]) -> dict[str, np.ndarray]:
    """``inputs`` with ``name=(flat index, value)`` set."""
    out = {k: v.copy() for k, v in inputs.items()}
    for name, (k, value) in lanes.items():
        out[name].flat[k] = value
    return out


VALID_LANE = 2  # unmasked in `good_data`
BAD_CALLS: dict[str, dict[str, tuple[int, float]]] = {
    "zero_mean_positive_count": {"mean": (VALID_LANE, 0.0), "counts": (VALID_LANE, 4.0)},
    "zero_mean_positive_count_plain": {"mean2": (VALID_LANE, 0.0), "counts2": (VALID_LANE, 1.0)},
    "negative_count": {"counts": (VALID_LANE, -1.0)},
    "negative_count_plain": {"counts2": (VALID_LANE, -3.0)},
    "negative_weight": {"w": (VALID_LANE, -0.5)},
    "negative_mean": {"mean": (VALID_LANE, -0.5), "counts": (VALID_LANE, 2.0)},
    "nan_observation": {"obs": (VALID_LANE, float("nan"))},
}


@pytest.mark.parametrize("case", sorted(BAD_CALLS))
def test_compiled_unmasked_invalid_lane_raises(objectives_program: dp.Program, good: dict, case: str) -> None:
    """An invalid unmasked lane is a NumericalError at the checkpoint, for run and
    value_and_grad; the next good call works."""
    bad = _with(good, **BAD_CALLS[case])
    with pytest.raises(dp.NumericalError):
        objectives_program.value_and_grad(**bad)
    outs, grads = objectives_program.value_and_grad(**good)
    check_against_closed_form(outs, grads, good)
    with pytest.raises(dp.NumericalError):
        objectives_program.run(**bad)
    check_against_closed_form(objectives_program.run(**good), None, good)


def test_compiled_zero_mean_zero_count_is_fine(objectives_program: dp.Program, good: dict) -> None:
    """A zero mean with a zero count is a valid lane (loss 0, gradient w)."""
    inputs = _with(good, mean=(VALID_LANE, 0.0), counts=(VALID_LANE, 0.0), mean2=(4, 0.0), counts2=(4, 0.0))
    outs, grads = objectives_program.value_and_grad(**inputs)
    check_against_closed_form(outs, grads, inputs)
    assert grads["mean"].flat[VALID_LANE] == inputs["w"].flat[VALID_LANE]

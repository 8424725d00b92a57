"""``dp.fanbeam`` (issue 29): a matrix-free fan-beam projector in ASTRA's ``fanflat`` geometry.

- The reference's taps are the exact lengths of each line inside each pixel: against an
  independent dense oracle (`op_cases.fanbeam_matrix`: the line clipped against every pixel square),
  for row and column walks, detectors wider than the image and a detector crossing it.
- Compiled (float64, a stack of 3 slices): equals the interpreter to rounding, its gradient
  (the transpose) too, the dot test holds to 1e-12, and threads 1 and 2 give the same bits;
  float32 equals the interpreter.
- No per-problem table beyond the lines: the only launch constants are the line tables
  (4 float64 per line), whatever the image size.
- Bad geometry is a ContractError naming the argument.
"""

from __future__ import annotations

import numpy as np
import pytest
from op_cases import fanbeam_matrix

import dpt_ir as dp
from dpt_ir.ops.fanbeam import FanBeamAttrs, program
from dpt_ir.reference.fanbeam_ref import fanbeam_apply

from .projection_checks import assert_stack_program

GEOMETRIES = [  # (h, w, angles, source_origin, origin_det, det_count, det_width)
    (7, 9, 11, 20.0, 15.0, 13, 1.0),
    (12, 5, 8, 9.5, 0.0, 10, 0.7),  # a detector through the image, a tall image
    (6, 6, 5, 40.0, 3.0, 9, 2.5),  # detectors wider than the image: some lines miss it
]


def _angles(n: int, seed: int) -> np.ndarray:
    """Generic angles (no line along a pixel edge, where the oracle would count it twice)."""
    return np.sort(np.random.default_rng(seed).uniform(0.0, 2 * np.pi, n))


@pytest.mark.parametrize("geometry", GEOMETRIES)
def test_reference_taps_are_exact_pixel_lengths(geometry: tuple) -> None:
    h, w, na, so, od, n, dw = geometry
    angles = _angles(na, h * w)
    attrs = FanBeamAttrs(angles=angles.tolist(), source_origin=so, origin_det=od, det_count=n, det_width=dw,
                         in_shape=(h, w))  # fmt: skip
    dense = fanbeam_matrix(h, w, angles, so, od, n, dw)
    beam = program(attrs, False)
    basis = np.eye(h * w).reshape(h * w, h, w)
    got = fanbeam_apply(basis, beam).reshape(h * w, -1).T
    np.testing.assert_allclose(got, dense, rtol=0, atol=1e-12)
    assert (dense > 0).sum() > h * w  # the lines do cross the image


def _graph(shape: tuple[int, ...], angles: np.ndarray, dtype: str, n: int = 23, so: float = 30.0) -> dp.Graph:
    g = dp.GraphBuilder("fanbeam_stack")
    x = g.input("x", shape, dtype)
    y = dp.fanbeam(x, angles, source_origin=so, origin_det=12.0, det_count=n, det_width=1.3)
    wt = g.input("w", y.shape, dtype, requires_grad=False)
    g.output("y", y)
    g.output("loss", dp.sum(wt * y))
    return g.build()


def test_stack_equals_the_interpreter_and_passes_the_dot_test() -> None:
    angles = _angles(17, 3)
    graph = _graph((3, 16, 19), angles, "float64")
    rng = np.random.default_rng(29)
    x, w = rng.standard_normal((3, 16, 19)), rng.standard_normal((3, 17, 23))
    assert_stack_program(graph, x, w)


def test_float32_equals_the_interpreter() -> None:
    graph = _graph((20, 14), _angles(9, 4), "float32", n=31)
    rng = np.random.default_rng(5)
    x, w = rng.standard_normal((20, 14)).astype("float32"), rng.standard_normal((9, 31)).astype("float32")
    out, grads = dp.compile(graph, wrt=["x"], device="cpu").value_and_grad(x=x, w=w)
    np.testing.assert_allclose(out["y"], dp.interpret(graph, x=x, w=w)["y"], rtol=1e-6, atol=1e-5)
    np.testing.assert_allclose(grads["x"], dp.interpret_grad(graph, ["x"], x=x, w=w)["x"], rtol=1e-6, atol=1e-5)


def test_the_line_table_is_the_only_constant() -> None:
    program_ = dp.compile(_graph((128, 96), _angles(30, 6), "float32", so=200.0), wrt=["x"], device="cpu")
    kernels = [k for plan in program_.plans.values() for k in plan.kernels]
    sizes = [(p, values.size) for k in kernels for p, (_, values) in k.constants.items()]
    assert sizes and all(p.startswith("$fan:") and n == 4 * 30 * 23 for p, n in sizes), sizes


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"det_count": 0}, "det_count >= 1"),
        ({"det_width": -1.0}, "positive finite det_width"),
        ({"source_origin": 5.0}, "source_origin > 7.07107"),  # inside the 10 x 10 image's circle
        ({"origin_det": -2.0}, "origin_det >= 0"),
        ({"angles": []}, "at least one finite angle"),
        ({"angles": [0.0, np.nan]}, "finite angles"),
        ({"det_count": 2.5}, "det_count as an int"),
        ({"source_origin": "far"}, "source_origin as a number"),
    ],
)
def test_bad_geometry_names_the_argument(kwargs: dict, message: str) -> None:
    g = dp.GraphBuilder("fan_bad")
    x = g.input("x", (10, 10))
    args = {"angles": [0.0, 1.0], "source_origin": 20.0, "origin_det": 10.0, "det_count": 8, "det_width": 1.0}
    with pytest.raises(dp.ContractError, match=message) as err:
        dp.fanbeam(x, **{**args, **kwargs})
    assert "dp.fanbeam" in str(err.value)


def test_a_rank_1_input_and_a_tensor_angle_are_refused() -> None:
    g = dp.GraphBuilder("fan_bad_inputs")
    v = g.input("v", (10,))
    with pytest.raises(dp.ContractError, match="rank >= 2"):
        dp.fanbeam(v, [0.0], 20.0, 10.0, 8)
    x = g.input("x", (10, 10))
    t = g.input("t", (3,))
    with pytest.raises(dp.ContractError, match="angles as a constant array"):
        dp.fanbeam(x, t, 20.0, 10.0, 8)

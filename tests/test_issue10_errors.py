"""Bad inputs to the gather/scatter, matmul, interpolation and projection functions (issue 10).

One table: each case builds a graph with a mistake and names the three parts its
ContractError must hold: the culprit (the function or op node and its input), what was
expected and what was found. The issue's list (a float index array, an order scipy lacks (``order=2`` until issue 29),
coordinates with the wrong leading dimension, an unknown mode, mismatched matmul shapes)
is covered for every public function that takes that argument, plus the other argument
errors of the same functions. Nothing compiles: these errors come from the builder.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pytest

import dpt_ir as dp

Build = Callable[[dp.GraphBuilder, dp.Tensor], object]
C2 = np.zeros((2, 3))  # valid constant coordinates for a 2-D input


def _in(g: dp.GraphBuilder, name: str, shape: tuple[int, ...], dtype: str = "float32") -> dp.Tensor:
    return g.input(name, shape, dtype, requires_grad=dtype.startswith("float"))


MODE_LIST = "constant, nearest, reflect, mirror, wrap, grid-constant, grid-mirror, grid-wrap"
ORDER_EXPECTED = "order must be one of 0, 1, 2, 3, 4, 5"
# (id, build, culprit, expected, found)
CASES: list[tuple[str, Build, str, str, str]] = [
    # A float index array (constant or graph tensor), for every gather/scatter entry point.
    ("take_float_const", lambda g, a: dp.take(a, np.array([0.0, 1.0])), "op 'take' on %a", "must be integers",
     "found a float64 array"),
    ("take_float_tensor", lambda g, a: dp.take(a, _in(g, "i", (2,))), "op 'take' on %a, %i", "an int32 tensor",
     "found float32"),
    ("take_along_float", lambda g, a: dp.take_along_axis(a, _in(g, "i", (5, 1)), 1), "op 'take' on %a, %i",
     "an int32 tensor", "found float32"),
    ("getitem_float", lambda g, a: a[_in(g, "i", (2,), "float64")], "%a, %i", "an int32 tensor", "found float64"),
    ("add_at_float", lambda g, a: dp.add_at(a, _in(g, "i", (2,)), 1.0), "op 'add_at' on %a, %i",
     "an int32 tensor", "found float32"),
    ("add_at_values_shape", lambda g, a: dp.add_at(a, np.array([0, 1]), _in(g, "v", (3, 6))), "op 'add_at' on %a",
     "broadcast to the indexed shape [2, 6]", "found %v of shape [3, 6]"),
    ("take_unknown_mode", lambda g, a: dp.take(a, np.array([0]), mode="edge"), "op 'take' on %a",
     "expected one of 'raise', 'wrap', 'clip'", "unknown mode 'edge'"),
    ("take_out_of_range", lambda g, a: dp.take(a, np.array([30])), "op 'take' on %a", "-30 <= index < 30",
     "index 30 is out of bounds"),
    # An order scipy does not have (every order from 0 to 5 is accepted), for every function.
    ("mc_order6", lambda g, a: dp.map_coordinates(a, C2, order=6), "dp.map_coordinates on %a", ORDER_EXPECTED,
     "found 6"),
    ("mc_order6_tensor", lambda g, a: dp.map_coordinates(a, _in(g, "c", (2, 3)), order=6),
     "dp.map_coordinates on %a", ORDER_EXPECTED, "found 6"),
    ("affine_order6", lambda g, a: dp.affine_transform(a, np.eye(2), order=6), "dp.affine_transform on %a",
     ORDER_EXPECTED, "found 6"),
    ("shift_order7", lambda g, a: dp.shift(a, 1.0, order=7), "dp.shift on %a", ORDER_EXPECTED, "found 7"),
    ("zoom_order_neg", lambda g, a: dp.zoom(a, 2.0, order=-1), "dp.zoom on %a", ORDER_EXPECTED, "found -1"),
    ("rotate_order6", lambda g, a: dp.rotate(a, 10.0, order=6), "dp.rotate on %a", ORDER_EXPECTED, "found 6"),
    ("spline_order6", lambda g, a: dp.spline_filter(a, order=6), "dp.spline_filter1d on %a", ORDER_EXPECTED,
     "found 6"),
    ("mc_order_bool", lambda g, a: dp.map_coordinates(a, C2, order=True), "dp.map_coordinates on %a",
     ORDER_EXPECTED, "found True"),
    # Coordinates with the wrong leading dimension (or dtype), constant and graph tensor.
    ("mc_leading_const", lambda g, a: dp.map_coordinates(a, np.zeros((3, 4))), "dp.map_coordinates on %a",
     "coordinates of shape (2, *output_shape)", "found shape [3, 4]"),
    ("mc_leading_tensor", lambda g, a: dp.map_coordinates(a, _in(g, "c", (3, 4))), "dp.map_coordinates on %a",
     "float coordinates of shape (2, *output_shape)", "found %c of shape [3, 4]"),
    ("mc_int_coords", lambda g, a: dp.map_coordinates(a, _in(g, "c", (2, 4), "int32")), "dp.map_coordinates on %a",
     "float coordinates", "dtype int32"),
    ("mc_nonfinite_coords", lambda g, a: dp.map_coordinates(a, np.full((2, 3), np.nan)), "dp.map_coordinates on %a",
     "expected finite coordinates", "found non-finite values"),
    ("affine_matrix_tensor", lambda g, a: dp.affine_transform(a, _in(g, "m", (3, 3))), "dp.affine_transform on %a",
     "a matrix of shape (2, 2)", "found %m of shape [3, 3]"),
    ("affine_offset_tensor", lambda g, a: dp.affine_transform(a, np.eye(2), _in(g, "o", (3,))),
     "dp.affine_transform on %a", "an offset of shape (2,)", "found shape [3]"),
    # An unknown mode, for every function that takes one.
    ("mc_mode", lambda g, a: dp.map_coordinates(a, C2, mode="edge"), "dp.map_coordinates on %a", MODE_LIST,
     "unknown mode 'edge'"),
    ("mc_mode_tensor", lambda g, a: dp.map_coordinates(a, _in(g, "c", (2, 3)), mode="edge"),
     "dp.map_coordinates on %a", MODE_LIST, "unknown mode 'edge'"),
    ("affine_mode", lambda g, a: dp.affine_transform(a, np.eye(2), mode="edge"), "dp.affine_transform on %a",
     MODE_LIST, "unknown mode 'edge'"),
    ("shift_mode", lambda g, a: dp.shift(a, 1.0, mode=None), "dp.shift on %a", MODE_LIST, "unknown mode None"),
    ("zoom_mode", lambda g, a: dp.zoom(a, 2.0, mode="edge"), "dp.zoom on %a", MODE_LIST, "unknown mode 'edge'"),
    ("rotate_mode", lambda g, a: dp.rotate(a, 2.0, mode="edge"), "dp.rotate on %a", MODE_LIST, "unknown mode 'edge'"),
    ("spline_mode", lambda g, a: dp.spline_filter1d(a, mode="edge"), "dp.spline_filter1d on %a", MODE_LIST,
     "unknown mode 'edge'"),
    # cval must be a constant real number (NaN allowed, as in scipy).
    ("mc_cval_str", lambda g, a: dp.map_coordinates(a, C2, cval="x"), "dp.map_coordinates on %a",
     "cval as a real number", "found 'x'"),
    ("shift_cval_tensor", lambda g, a: dp.shift(a, 1.0, cval=_in(g, "t", ())), "dp.shift on %a",
     "cval as a constant number", "found the graph tensor %t"),
    # Constant geometry given as a graph tensor, and other shape errors.
    ("radon_theta_tensor", lambda g, a: dp.radon(a, _in(g, "t", (3,))), "dp.radon on %a", "theta as a constant array",
     "found the graph tensor %t"),
    ("radon_rank1", lambda g, a: dp.radon(dp.sum(a, axis=0)), "dp.radon on %sum", "an image of rank >= 2",
     "found rank 1"),
    ("radon_no_angle", lambda g, a: dp.radon(a, []), "dp.radon on %a", "at least one angle", "found none"),
    ("rotate_nan", lambda g, a: dp.rotate(a, float("nan")), "dp.rotate on %a", "finite angle", "non-finite"),
    ("shift_length", lambda g, a: dp.shift(a, (1.0, 2.0, 3.0)), "dp.shift on %a", "a number or 2 numbers",
     "found shape [3]"),
    # Mismatched matmul shapes: inner axes, vectors, batch axes, rank 0.
    ("matmul_inner", lambda g, a: a @ _in(g, "b", (5, 2)), "op 'matmul' on %a, %b",
     "the last axis of the first (6) must equal the second-to-last axis of the second (5)",
     "shapes [5, 6] and [5, 2] do not fit"),
    ("matmul_vector", lambda g, a: dp.matmul(_in(g, "v", (4,)), _in(g, "w", (5,))), "op 'matmul' on %v, %w",
     "must equal the only axis of the second (5)", "shapes [4] and [5] do not fit"),
    ("matmul_batch", lambda g, a: _in(g, "p", (2, 3, 4)) @ _in(g, "q", (3, 4, 2)), "op 'matmul' on %p, %q",
     "expected equal sizes or 1", "batch axes (all but the last two) of [2, 3, 4] and [3, 4, 2]"),
    ("matmul_rank0", lambda g, a: dp.matmul(_in(g, "s", ()), a), "op 'matmul' on %s, %a", "rank >= 1",
     "found a rank-0 tensor %s"),
]


@pytest.mark.parametrize("build, culprit, expected, found", [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_bad_input_names_culprit_expectation_and_finding(build: Build, culprit: str, expected: str, found: str) -> None:
    g = dp.GraphBuilder("bad")
    a = _in(g, "a", (5, 6))
    with pytest.raises(dp.ContractError) as err:
        build(g, a)
    message = str(err.value)
    for part in (culprit, expected, found):
        assert part in message, (part, message)


def test_valid_neighbours_of_the_bad_cases_build() -> None:
    """The table's arguments one step from an error are accepted, so each case fails for
    the reason it names: orders 0 to 5, every mode, a NaN or NumPy-scalar cval, int64
    indices, matching matmul shapes."""
    g = dp.GraphBuilder("good")
    a = _in(g, "a", (5, 6))
    for order in range(6):
        dp.map_coordinates(a, C2, order=order)
    for mode in MODE_LIST.split(", "):
        dp.shift(a, 0.5, order=1, mode=mode, cval=float("nan"))
    dp.map_coordinates(a, _in(g, "c", (2, 4)), order=3, cval=np.float32(0.5))
    dp.take(a, np.array([0, -30, 29], np.int64))
    dp.add_at(a, np.array([0, 1]), _in(g, "v", (1, 6)))
    assert (a @ _in(g, "b", (6, 2))).shape == (5, 2)
    assert (_in(g, "p", (2, 3, 4)) @ _in(g, "q", (1, 4, 2))).shape == (2, 3, 2)

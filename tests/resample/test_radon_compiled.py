"""``dp.radon`` on the C++ path (issue 29): matrix-free projection and its exact transpose.

- A stack of 3 cropped slices, and of 2 square 80² slices (float64, 40 angles): the compiled
  forward equals the interpreter to rounding, its gradient (the transpose) too, and the dot
  test holds to 1e-12; threads 1 and 2 give the same bits.
- Quarter-turn pairs: angles a quarter turn apart pair up (a repeated angle, one a nanodegree
  off and one with no partner stay alone), at odd and even frame sides, cropped and padded;
  the program equals the interpreter, passes the dot test and gives the same bits for 1 and 2
  threads.
- No per-problem table: the only launch constants of a 256² program with 180 angles are the
  angle tables (7 float64 per angle: the table, a slot and a leader), and nothing in the
  program grows with the image.
- Bad geometry is a ContractError naming the argument (an empty theta, a rank-1 input, a
  non-finite angle, a graph tensor as theta, a non-bool circle).
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.cxx.projection import units
from dpt_ir.ir.projection import ParallelBeam, angle_table
from dpt_ir.reference.radon_ref import radon_shape

from .projection_checks import assert_stack_program

THETA = np.linspace(0.0, 180.0, 40, endpoint=False)


def _graph(shape: tuple[int, ...], theta: np.ndarray, circle: bool = True) -> dp.Graph:
    g = dp.GraphBuilder("radon_stack")
    x = g.input("x", shape, "float64")
    y = dp.radon(x, theta, circle=circle)
    w = g.input("w", y.shape, "float64", requires_grad=False)
    g.output("y", y)
    g.output("loss", dp.sum(w * y))
    return g.build()


@pytest.mark.parametrize(("shape", "circle"), [((3, 17, 14), True), ((3, 17, 14), False), ((2, 80, 80), True)])
def test_stack_equals_the_interpreter_and_passes_the_dot_test(shape: tuple[int, ...], circle: bool) -> None:
    # 80²: two CPU transpose bands of a frame equal to the image (taps outside a band land in
    # the work block's margins), and forward rows read unmasked
    graph = _graph(shape, THETA, circle)
    rng = np.random.default_rng(29)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((shape[0], *radon_shape(shape[1:], list(THETA), circle)))
    assert_stack_program(graph, x, w)


MIXED = [0.0, 30.0, 0.0, 90.0, 120.0, 200.0, 17.0, 107.000000001, 290.0, -70.0]


def test_quarter_turns_pair_and_the_rest_stay_alone() -> None:
    beam = ParallelBeam(1, 9, 9, 9, 0, 0, angle_table(9, MIXED))
    found = sorted((int(a), int(p)) for a, p in units(beam) if a >= 0)
    # 0 leads 90, 30 leads 120, 200 leads 290 (and -70 is 290's angle: taken); the second 0,
    # 17 (107.000000001 is a nanodegree off) and -70 stay alone
    assert found == [(0, 3), (1, 4), (2, -1), (5, 8), (6, -1), (7, -1), (9, -1)], found


@pytest.mark.parametrize(("shape", "circle"), [((2, 12, 12), True), ((1, 11, 11), True), ((2, 9, 14), False)])
def test_paired_and_lone_angles_equal_the_interpreter(shape: tuple[int, ...], circle: bool) -> None:
    graph = _graph(shape, np.array(MIXED), circle)
    rng = np.random.default_rng(5)
    x = rng.standard_normal(shape)
    w = rng.standard_normal((shape[0], *radon_shape(shape[1:], MIXED, circle)))
    assert_stack_program(graph, x, w)


def test_the_angle_table_is_the_only_constant() -> None:
    program = dp.compile(_graph((256, 256), np.arange(180.0)), wrt=["x"], device="cpu")
    kernels = [k for plan in program.plans.values() for k in plan.kernels]
    sizes = [(p, values.size) for k in kernels for p, (_, values) in k.constants.items()]
    # per angle: (cos, sin, kx, ky), a slot (leader, partner) and the angle's leader
    assert sizes and all(p.startswith("$beam:") and n == 7 * 180 for p, n in sizes), sizes
    (values,) = {values.tobytes(): values for k in kernels for _, values in k.constants.values()}.values()
    np.testing.assert_array_equal(values[:720], angle_table(256, list(np.arange(180.0))).reshape(-1))
    slots = values[720:1080].reshape(180, 2)
    # each angle below 90 leads the one a quarter turn on; the units spread over every other slot
    np.testing.assert_array_equal(slots[0::2], np.stack([np.arange(90.0), np.arange(90.0) + 90], axis=1))
    assert (slots[1::2] == -1).all()
    np.testing.assert_array_equal(values[1080:], np.r_[np.full(90, -1.0), np.arange(90.0)])


def _error(fn) -> str:  # type: ignore[no-untyped-def]
    g = dp.GraphBuilder("bad")
    x = g.input("img", (5, 6), "float64")
    with pytest.raises(dp.ContractError) as err:
        fn(x, g)
    return str(err.value)


def test_bad_geometry_is_a_contract_error_naming_the_argument() -> None:
    assert "at least one angle in theta" in _error(lambda x, g: dp.radon(x, []))
    assert "rank >= 2" in _error(lambda x, g: dp.radon(dp.sum(x, axis=0)))
    assert "finite theta" in _error(lambda x, g: dp.radon(x, [0.0, np.nan]))
    assert "theta as a constant array" in _error(lambda x, g: dp.radon(x, g.input("t", (3,), "float64")))
    assert "circle as a bool" in _error(lambda x, g: dp.radon(x, [0.0], circle="yes"))

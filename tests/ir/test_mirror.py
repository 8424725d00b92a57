"""`dpt_ir.ir.mirror.mirror_sum`: which weights sum as scipy's correlate1d sums a mirrored line,
and in what order."""

from __future__ import annotations

import numpy as np

from dpt_ir.ir.mirror import MirrorSum, mirror_sum


def test_symmetric_line_pairs_from_the_outermost_in() -> None:
    w = np.array([[0.1, 0.2, 0.4, 0.2, 0.1]])
    assert mirror_sum(w) == MirrorSum(centre=(2, 0.4), pairs=((0, 4, 0.1), (1, 3, 0.2)), sign=1, axis=1)
    column = mirror_sum(w.T)  # the long axis may be any axis: positions are flat
    assert column is not None and column.axis == 0 and column.pairs == mirror_sum(w).pairs


def test_antisymmetric_line_has_no_centre_and_differences() -> None:
    w = np.array([-0.5, 0.0, 0.5])
    assert mirror_sum(w) == MirrorSum(centre=None, pairs=((0, 2, -0.5),), sign=-1, axis=0)


def test_zero_pairs_are_skipped() -> None:
    w = np.array([1.0, 0.0, 2.0, 0.0, 1.0])
    assert mirror_sum(w) == MirrorSum(centre=(2, 2.0), pairs=((0, 4, 1.0),), sign=1, axis=0)


def test_other_weights_are_not_mirror_sums() -> None:
    assert mirror_sum(np.array([1.0, 2.0, 1.0, 0.5])) is None  # even length
    assert mirror_sum(np.array([1.0, 2.0, 1.0 + 2**-40])) is None  # not exactly symmetric
    assert mirror_sum(np.array([-1.0, 0.5, 1.0])) is None  # antisymmetric needs a zero centre
    assert mirror_sum(np.ones((3, 3))) is None  # not a line
    assert mirror_sum(np.array([2.0])) is None  # no pair

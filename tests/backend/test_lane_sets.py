"""The CPU driver's two lane sets for sums (`LanePass.fold`, `dpt_ir.backends.cxx.drivers`): a
float64 row sum has exactly the bits of the documented order (per 512-element block: group
pairs into sets A and B, a last odd group into A, B folded into A lane by lane, the tail into
A's lanes 0.., then `dp_lanes_sum`'s tree), which differ from the one-set order's on this
data; a max keeps one set (the sign of a zero depends on which came first)."""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp

LENGTHS = (7, 8, 15, 16, 24, 40, 520, 1000, 1031)
BLOCK = 512  # Target.block on the CPU


def lanes_tree(a: np.ndarray) -> float:
    return ((a[0] + a[1]) + (a[2] + a[3])) + ((a[4] + a[5]) + (a[6] + a[7]))


def two_set_sum(row: np.ndarray) -> float:
    lanes = np.zeros(8)
    for jb in range(0, row.size, BLOCK):
        x = row[jb : jb + BLOCK]
        n8, second, k = x.size & ~7, np.zeros(8), 0
        while k + 16 <= n8:
            lanes, second = lanes + x[k : k + 8], second + x[k + 8 : k + 16]
            k += 16
        while k < n8:
            lanes, k = lanes + x[k : k + 8], k + 8
        lanes = lanes + second
        for t in range(n8, x.size):
            lanes[t - n8] += x[t]
    return lanes_tree(lanes)


def one_set_sum(row: np.ndarray) -> float:
    lanes = np.zeros(8)
    for jb in range(0, row.size, BLOCK):
        x = row[jb : jb + BLOCK]
        n8 = x.size & ~7
        for k in range(0, n8, 8):
            lanes = lanes + x[k : k + 8]
        for t in range(n8, x.size):
            lanes[t - n8] += x[t]
    return lanes_tree(lanes)


@pytest.fixture(scope="module")
def program() -> dp.Program:
    g = dp.GraphBuilder("lane_sets")
    for n in LENGTHS:
        x = g.input(f"x{n}", (3, n), "float64")
        g.output(f"s{n}", dp.sum(x, axis=1))
        g.output(f"m{n}", dp.max(x, axis=1))
    return dp.compile(g.build(), device="cpu", threads=1)


def data() -> dict[str, np.ndarray]:
    rng = np.random.default_rng(7)
    return {f"x{n}": rng.standard_normal((3, n)) * 10.0 ** rng.uniform(-4, 8, (3, n)) for n in LENGTHS}


def test_row_sums_have_the_two_set_order_bits(program: dp.Program) -> None:
    feed = data()
    out = program.run(**feed)
    differs = 0
    for n in LENGTHS:
        for r, row in enumerate(feed[f"x{n}"]):
            assert out[f"s{n}"][r] == two_set_sum(row), (n, r)
            differs += int(one_set_sum(row) != two_set_sum(row))
        np.testing.assert_array_equal(out[f"m{n}"], feed[f"x{n}"].max(axis=1))
    assert differs > 0, "the data cannot tell the two orders apart"


def test_sums_fold_a_second_set_and_max_does_not(program: dp.Program) -> None:
    text = "".join(module.text for module in program.modules.values())
    assert "ln0_s_b[8]" in text or "ln1_s_b[8]" in text
    assert "_m_b[8]" not in text

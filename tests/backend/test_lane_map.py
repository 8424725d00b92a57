"""A lane pass's map (`LanePass.map`, `dpt_ir.backends.cxx.drivers`) moves where the CPU
driver computes each element's mapped value, never the value: logsumexp, whose sum of
``exp(x - m)`` the driver maps in a full-width loop of its own, gives exactly the bits of a
twin op whose lane update inlines the same exp (`LanePass.inlined`), over rows of every tail
length, whole arrays (task partials), float32 and float64, and special values."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.ir import registry
from dpt_ir.ir.registry import CxxReduce, OpDef, get_op

LENGTHS = (7, 8, 15, 16, 24, 40, 520, 1000, 1031)
TWIN = "logsumexp_inlined_lanes"


def _inlined_twin(op: OpDef) -> OpDef:
    """``op`` with every lane pass's map inlined into its update (no map left)."""

    def cxx(in_t: str, out_t: str) -> CxxReduce | None:
        reduce = op.cxx_reduce(in_t, out_t) if op.cxx_reduce else None
        if reduce is None:
            return None
        passes = tuple(dataclasses.replace(p, update=p.inlined(), map=None) for p in reduce.passes)
        return dataclasses.replace(reduce, passes=passes)

    return dataclasses.replace(op, name=TWIN, cxx_reduce=cxx)


@pytest.fixture(scope="module")
def programs(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[dp.Program, Path]]:
    lse = get_op("logsumexp")
    assert any(p.map for p in lse.cxx_reduce("float", "float").passes)  # the test needs a mapped pass
    with pytest.MonkeyPatch.context() as mp:
        mp.setitem(registry._REGISTRY, TWIN, _inlined_twin(lse))
        g = dp.GraphBuilder("lane_map")
        for dtype in ("float32", "float64"):
            for n in LENGTHS:
                x = g.input(f"x{n}_{dtype}", (5, n), dtype)
                for axes, tag in (([1], "rows"), ([0, 1], "all")):
                    attrs = {"axes": axes, "keepdims": False}
                    g.output(f"lse_{tag}{n}_{dtype}", x.builder.emit("logsumexp", [x], attrs))
                    g.output(f"twin_{tag}{n}_{dtype}", x.builder.emit(TWIN, [x], attrs))
        dump = tmp_path_factory.mktemp("lane_map")
        yield dp.compile(g.build(), device="cpu", threads=1, dump_dir=dump, checks=False), dump


def _inputs(rng: np.random.Generator) -> dict[str, np.ndarray]:
    out = {}
    for dtype in ("float32", "float64"):
        for n in LENGTHS:
            x = rng.normal(scale=4.0, size=(5, n)).astype(dtype)
            x[1, n // 2] = np.inf  # a row whose maximum is +inf
            x[2, :] = -np.inf  # a row of -inf only
            x[3, n - 1] = np.nan  # a NaN in the tail
            x[4, 0] = -0.0
            out[f"x{n}_{dtype}"] = x
    return out


def test_the_mapped_pass_equals_its_inlined_twin_bit_for_bit(programs: tuple[dp.Program, Path]) -> None:
    program, _ = programs
    out = program.run(**_inputs(np.random.default_rng(7)))
    for dtype in ("float32", "float64"):
        for n in LENGTHS:
            for tag in ("rows", "all"):
                a, b = out[f"lse_{tag}{n}_{dtype}"], out[f"twin_{tag}{n}_{dtype}"]
                assert a.tobytes() == b.tobytes(), (tag, n, dtype, a, b)


def test_only_the_mapped_op_maps_its_block_first(programs: tuple[dp.Program, Path]) -> None:
    _, dump = programs
    lines = [ln for p in (dump / "kernels").glob("*.py") for ln in p.read_text().splitlines()]
    # logsumexp's CPU drivers: the block's exps in a loop of their own, the lane loop folding them
    assert any("DP_VEC_LOOP" in ln and "mb0[k] = dp_exp(" in ln for ln in lines)
    # the twin's CPU drivers: the exp inside the 8-lane loop, as before the map existed
    assert any("DP_LANE_LOOP" in ln and "(double)(dp_exp(x - " in ln for ln in lines)

"""Launch records in the disk cache (`dpt_ir.backends.launches`): constants round-trip
bit for bit in their Warp type, each distinct constant is stored once however many
launches bind it, and launches that bound equal constants share one array after loading.
Pure data: no Warp build."""

from __future__ import annotations

import json

import numpy as np

from dpt_ir.backends.launches import KernelSource, kernels_from_record, kernels_record

WEIGHTS = np.array([0.25, -0.0, np.inf, np.nan, 1e-310], dtype=np.float64)
TABLE = np.array([3, -1, 2**31 - 1, -(2**31)], dtype=np.int32)


def _launch(name: str, weights: np.ndarray, table: np.ndarray) -> KernelSource:
    constants = {f"$weights:{name}": ("float64", weights), f"$table:{name}": ("int32", table)}
    partials = {f"$partial:{name}:s": ("float64", 16)}
    return KernelSource(name, "@wp.kernel ...", [*constants, *partials], 8, "f0", partials, constants, name)


def test_constants_round_trip_once_each_and_shared() -> None:
    launches = [
        _launch("run_f0", WEIGHTS, TABLE),
        _launch("vg_f0", WEIGHTS.copy(), TABLE),
        _launch("tp_f0", WEIGHTS[::-1].copy(), TABLE),
    ]
    record = json.loads(json.dumps(kernels_record(launches)))  # what the cache file holds
    assert len(record["constants"]) == 3  # two distinct weight arrays and one table, not six
    loaded = kernels_from_record(record)
    for before, after in zip(launches, loaded, strict=True):
        assert after.name == before.name and after.params == before.params and after.partials == before.partials
        for p, (t, values) in before.constants.items():
            t2, v2 = after.constants[p]
            assert t2 == t and v2.dtype == values.dtype
            assert v2.tobytes() == values.tobytes()  # -0.0, inf, NaN and subnormals bit for bit
    run, vg, tp = loaded
    assert run.constants["$weights:run_f0"][1] is vg.constants["$weights:vg_f0"][1]
    assert run.constants["$weights:run_f0"][1] is not tp.constants["$weights:tp_f0"][1]

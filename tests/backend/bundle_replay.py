"""Replaying an exported CUDA plan on the CPU (``gpu_check.py --dry``) with both host builds
of its ``kernels.cu``: the CPU drivers and the CUDA drivers built as host C++.

`replay_with_poison` exports ``graph``'s program, replays its one plan on ``feed`` (and the
plan's constants), and replays it again with one element of one input made infinite, so
that a test can check the results against the bundle's reference, the two builds against
each other bit for bit, and the status flag the poisoned element raises.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np

import dpt_ir as dp
from dpt_ir.export import export_cuda

Replayed = tuple[dict[bool, dict[str, np.ndarray]], dict[bool, list[str]], dict[bool, list[str]]]


def replay_with_poison(graph: dp.Graph, feed: dict[str, np.ndarray], folder: Path, poison: str, at: int) -> Replayed:
    """Per build (``cuda`` False, True): the plan's results, the outputs outside the bundle's
    tolerance, and the status messages raised with ``feed[poison]``'s flat element ``at``
    set to infinity. A finite replay that raises a flag fails here."""
    from benchmarks import gpu_check
    from benchmarks.gpu_bundle_io import constants_of, inputs_of, load

    export_cuda(dp.compile(graph, device="cpu"), str(folder / "ok"), inputs=feed)
    doc, ref, source = load(folder / "ok")
    (plan,) = doc["plans"]
    data = {**inputs_of(doc, ref, folder / "ok"), **constants_of(plan, ref)}
    value = data[poison]
    inf = {**data, poison: np.where(np.arange(value.size).reshape(value.shape) == at, np.inf, value)}
    results, bad, raised = {}, {}, {}
    for cuda in (False, True):
        be = gpu_check.Host(source, cuda, folder)
        out, flags, _ = gpu_check.run_plan(be, plan, data)
        assert not flags, (cuda, flags)
        results[cuda] = {k: np.array(v) for k, v in out.items()}
        bad[cuda] = gpu_check.compare(plan, out, ref, doc["tolerance"])
        raised[cuda] = [doc["status"][s]["message"] for s in gpu_check.run_plan(be, plan, inf)[1]]
    return results, bad, raised

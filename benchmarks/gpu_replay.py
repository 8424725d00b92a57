"""A CUDA bundle plan's stages replayed on a back end (`benchmarks.gpu_check`'s ``Host`` or
``Gpu``), with NumPy alone: no dpt_ir, no warp-lang.

Assumes: a plan of a validated ``plan.json`` (`benchmarks.gpu_bundle_io.load`, version 2)
and a back end with ``upload``, ``zeros``, ``host`` and ``launch``. Guarantees: the stages
run in order, the status word cleared before each and read after it (the first stage
raising stops the plan, as the runtime raises); a segment stage's copies, then its
launches; a loop stage as `dpt_ir.runtime.loop.Loop` runs it: the body's launches
per step, carries, ``xs`` rows and ``ys`` rows moved by slicing the back end's arrays
(host NumPy or CuPy: one code path), a reverse sweep's actions in the bundle's order. See
docs/gpu-check.md ("Loop programs").
"""

from __future__ import annotations

from typing import Any

import numpy as np


def _copy(bufs: dict[str, Any], c: dict[str, Any], i: int = 0) -> None:
    """``Copy`` of plan.json at loop step ``i``: ``dst[dst_at + i dst_step :][:size] = src[...]``."""
    d, s, n = c["dst_at"] + i * c["dst_step"], c["src_at"] + i * c["src_step"], c["size"]
    bufs[c["dst"]][d : d + n] = bufs[c["src"]][s : s + n]


class Replay:
    """One plan's buffers and its stages run in order; ``launched`` counts the launches of a run."""

    def __init__(self, be: Any, plan: dict[str, Any], data: dict[str, np.ndarray]) -> None:
        self.be, self.plan, self.launched = be, plan, 0
        self.bufs = {}
        for b in plan["buffers"]:
            src = data.get(b["name"])
            self.bufs[b["name"]] = be.upload(src) if src is not None else be.zeros(b["size"], b["dtype"])
        self.status = self.bufs.get("$status")

    def pieces(self, run: dict[str, Any]) -> None:
        for c in run["copies"]:
            _copy(self.bufs, c)
        for launch in run["launches"]:
            if launch["dim"] > 0:
                self.be.launch(launch, [self.bufs[a] for a in launch["args"]], self.status)
                self.launched += 1

    def stage(self, s: dict[str, Any]) -> None:
        if s["kind"] == "segment":
            self.pieces(s["run"])
        elif s["op"] == "scan":
            self.scan(s)
        else:
            self.reverse(s)

    def _step(self, s: dict[str, Any], current: list[str], i: int) -> None:
        """Body step ``i`` from the carry in buffers ``current``; the new carry is then current."""
        bufs = self.bufs
        for src, dst in zip(current, s["carry_in"], strict=True):
            bufs[dst][...] = bufs[src]
        for c in s["feed"]:
            _copy(bufs, c, i)
        self.pieces(s["body"])
        current[:] = s["carry_out"]

    def scan(self, s: dict[str, Any]) -> None:
        current, keep = list(s["init"]), s["keep"]
        for i in range(s["length"]):
            self._step(s, current, i)
            for c in s["emit"]:
                _copy(self.bufs, c, i)
            if keep and i + 1 < s["length"]:  # the carries the reverse reads (store every carry)
                for dst, src in zip(keep[i], current, strict=True):
                    self.bufs[dst][...] = self.bufs[src]
        for c in s["final"]:
            _copy(self.bufs, c)

    def reverse(self, s: dict[str, Any]) -> None:
        """A scan_vjp: its checkpoint schedule's actions, in order, as the runtime runs them."""
        bufs, current = self.bufs, list(s["init"])
        for name in s["zero"]:
            bufs[name][...] = 0
        for c in s["begin"]:
            _copy(bufs, c)
        for act in s["actions"]:
            kind, at = act["kind"], act["at"]
            if kind == "store" and act["slot"] > 0:
                for dst, src in zip(s["slots"][act["slot"] - 1], current, strict=True):
                    bufs[dst][...] = bufs[src]
            elif kind == "restore":
                current = list(s["init"] if act["slot"] == 0 else s["slots"][act["slot"] - 1])
            elif kind == "advance":
                for i in range(at, at + act["count"]):
                    self._step(s, current, i)
            elif kind == "reverse":
                for src, dst in zip(current, s["vjp_carry_in"], strict=True):
                    bufs[dst][...] = bufs[src]
                for c in s["vjp_feed"]:
                    _copy(bufs, c, at)
                self.pieces(s["vjp"])
                for c in s["after_vjp"]:
                    _copy(bufs, c, at)
        for c in s["final"]:
            _copy(bufs, c)

    def run(self) -> list[int]:
        """Every stage, the status word cleared before each and read after it; the raised slots
        of the first stage raising any (the plan stops there, as the runtime raises)."""
        self.launched = 0
        for s in self.plan["stages"]:
            if self.status is not None:
                self.status[...] = 0
            self.stage(s)
            if self.status is not None:
                raised = [int(k) for k in np.flatnonzero(self.be.host(self.status))]
                if raised:
                    return raised
        return []

    def again(self) -> None:
        """Every stage, no status read (timing)."""
        for s in self.plan["stages"]:
            self.stage(s)

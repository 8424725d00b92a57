"""Tape passes of loop programs: `LoopTapePass`, DESIGN §6's lifecycle on the stages of a
`dpt_ir.runtime.loop_program.LoopProgram`.

Assumes: ``segments`` cut the joint graph of every float output (`tape_graph`) with the
forward part (the nodes that read no cotangent) first and a cut between the parts
(`Segments.split`); the program serialises its tape passes (a `PassLock`, held from
``forward`` to ``close``), since the stages' loop buffers are shared.
Guarantees:
- states ``new -> recording -> recorded -> complete -> closed``; ``forward`` runs once,
  inside ``with``, the forward stages only (the loops' forward, keeping carries where the
  reverse stores every carry); ``backward(seed=...)`` (a scalar or an array per output,
  zero for outputs not named) runs the backward stages once on the values the forward
  left: nothing is recomputed beyond the checkpoint schedule; ``close`` hands every
  workspace back and releases the program. Misuse is a `LifecycleError`; an exception
  while recording, or in ``forward`` or ``backward``, closes the pass;
- the arrays ``forward`` and ``backward`` return (outputs in their shapes, a scalar as a
  1-element array; gradients wrt ``wrt``) stay valid until ``close``;
- a loop program does not join a caller's ``wp.Tape`` (``tape=`` is a `ContractError`):
  its stages are not Warp-recorded kernels (use ``tp.backward(seed=...)``).
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.api.autodiff import joint_graph, seed_arrays
from dpt_ir.ir import records
from dpt_ir.ir.contracts import check_inputs
from dpt_ir.ir.errors import ContractError, LifecycleError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.types import is_float
from dpt_ir.runtime.program import require_state


def tape_graph(graph: Graph, wrt: tuple[str, ...]) -> tuple[Graph, int]:
    """The joint graph seeded at every float output, its nodes reordered so the forward
    part (nodes that read no cotangent, directly or not) comes first, and where the
    backward part starts. The order stays topological: a forward node never reads a
    backward one."""
    outputs = [o.name for o in graph.outputs if is_float(graph.types[o.value].dtype)]
    joint = joint_graph(graph, wrt, outputs)
    backward = set(records.joint_record(joint).cotangents.values())
    for node in joint.nodes:
        if any(i in backward for i in node.inputs):
            backward.add(node.name)
    first = [n for n in joint.nodes if n.name not in backward]
    later = [n for n in joint.nodes if n.name in backward]
    return joint.replace(nodes=tuple(first + later)), len(first)


class PassLock:
    """Held by a program's open tape pass from ``forward`` to ``close``: a pass in another
    thread waits for it; one in the same thread (which would wait forever) is refused."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._owner: int | None = None

    def acquire(self, where: str) -> None:
        if self._owner == threading.get_ident():
            raise LifecycleError(
                f"{where}: another tape pass of this loop program is open in this thread; close it first "
                "(a loop program runs one tape pass at a time)"
            )
        self._lock.acquire()
        self._owner = threading.get_ident()

    def release(self) -> None:
        self._owner = None
        self._lock.release()


class LoopTapePass:
    """One forward and one backward of a loop program (see the module docstring)."""

    def __init__(self, program: Any, segments: Any, lock: PassLock) -> None:
        self.program = program
        self.segments = segments
        self.lock = lock
        self.state = "new"
        self._env: dict[str, wp.array] | None = None
        self._held: list[tuple[Any, Any]] = []
        self._locked = False

    def _require(self, allowed: tuple[str, ...], action: str) -> None:
        require_state(self.program.graph.name, self.state, allowed, action)

    def __enter__(self) -> LoopTapePass:
        self._require(("new",), "start recording")
        if wp._src.context.runtime.tape is not None:
            raise LifecycleError(
                f"tape pass of {self.program.graph.name!r}: a wp.Tape is active; a loop program does not join "
                "a caller's tape (run its tape pass outside it and seed backward(seed=...) explicitly)"
            )
        self.state = "recording"
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            if self.state != "closed":
                self.close()
            return
        if self.state == "recording":
            self.state = "recorded"

    def forward(self, **inputs: Any) -> dict[str, wp.array]:
        """Run the forward stages once; returns output name -> wp.array (this pass's until ``close``)."""
        self._require(("recording",), "run forward")
        if self._env is not None:
            raise LifecycleError("tape pass: forward already ran in this pass (one evaluation per pass)")
        self.lock.acquire(f"tape pass of {self.program.graph.name!r}")
        self._locked = True
        try:
            env = self.program.device_arrays(check_inputs(self.program.graph, inputs))
            self.segments.run(env, self._held, 0, self.segments.split)
        except BaseException:
            self.close()
            raise
        self._env = env
        graph = self.program.graph
        return {o.name: _shaped(env[o.value], graph.types[o.value].shape) for o in graph.outputs}

    def backward(self, seed: Mapping[str, Any] | None = None) -> dict[str, wp.array]:
        """Seed output cotangents (scalar or array per output; unnamed outputs get zero) and
        run the backward stages once; returns input name -> gradient wp.array."""
        if self.state == "recording":
            raise LifecycleError("tape pass: backward cannot run while recording; leave the `with` block first")
        self._require(("recorded",), "run backward")
        if self._env is None:
            raise LifecycleError("tape pass: backward needs a completed forward in this pass")
        if seed is None:
            raise ContractError("tape pass: backward needs an explicit seed, e.g. seed={'loss': 1.0}")
        if not isinstance(seed, Mapping):
            raise ContractError(f"seed: expected a dict output name -> scalar or array, found {type(seed).__name__}")
        joint = self.segments.graph
        arrays = seed_arrays(self.program.graph, dict(seed))
        for name in arrays:
            if name not in records.joint_record(joint).cotangents:
                raise ContractError(f"seed: output {name!r} is not a float output, so it takes no cotangent")
        seeds = {}
        for out, ct in records.joint_record(joint).cotangents.items():
            t = joint.types[ct]
            seeds[ct] = arrays.get(out, np.zeros(t.shape, dtype=t.dtype))
        try:
            env = {**self._env, **self.program.device_arrays(seeds)}
            self.segments.run(env, self._held, self.segments.split)
        except BaseException:
            self.close()
            raise
        self.state = "complete"
        values = {w: joint.output_value(records.joint_record(joint).gradients[w]) for w in self.program.wrt}
        return {w: _shaped(env[v], joint.types[v].shape) for w, v in values.items()}

    def close(self) -> None:
        """Hand the workspaces back and release the program."""
        if self.state == "closed":
            raise LifecycleError("tape pass: already closed")
        for plan, ws in self._held:
            plan.checkin(ws)
        self._held, self._env = [], None
        if self._locked:
            self._locked = False
            self.lock.release()
        self.state = "closed"


def _shaped(flat: wp.array, shape: tuple[int, ...]) -> wp.array:
    return flat.reshape(shape or (1,))

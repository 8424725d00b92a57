"""`Program` and `TapePass`: running compiled plans with status checkpoints.

A Program holds up to three plans, each with its own generated Warp module: ``run``
(forward only), ``value_and_grad`` (seed fixed at 1 at compile time, so forward and
backward share kernels) and ``tape`` (forward and backward phases with cotangent inputs).
A plan's module is built on its first call (``run`` builds only the ``run`` module), once
per process even when threads race to it; `Program.build_all` builds every one now. Kernels raise
flags in a status word; it is read only at checkpoints (after a forward, after a
backward), and a raised flag becomes a `NumericalError` naming the kernel, node and
reason; no output is returned then.

Threads: every call checks a workspace (buffers and status word) out of its plan's pool
for its duration, and a tape pass owns one from ``forward`` to ``close``, so concurrent
calls and passes never share arrays (see docs/runtime.md). A `TapePass` object itself is
used by one thread at a time.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.api.autodiff import seed_arrays
from dpt_ir.backends.launches import StatusSlot
from dpt_ir.ir.errors import ContractError, LifecycleError, NumericalError
from dpt_ir.ir.graph import Graph
from dpt_ir.runtime.host_run import host_run
from dpt_ir.runtime.modules import BUILD_LOCK, GeneratedModule, load
from dpt_ir.runtime.plan import ExecutionPlan, Workspace
from dpt_ir.runtime.report import BuildRow, LoopCost, ProgramReport
from dpt_ir.runtime.second_order import DerivedPlans, PlanMaker, gnvp, hvp, jvp


class Program:
    """A compiled graph. See DESIGN §2 for the API."""

    def __init__(
        self,
        graph: Graph,
        wrt: tuple[str, ...],
        loss: str | None,
        device: str,
        plans: dict[str, ExecutionPlan],
        checks: bool,
        report: ProgramReport,
        module_name: str,
        derive: PlanMaker | None = None,
    ) -> None:
        """``derive(kind, residual)``: the driver's builder of the jvp, hvp and gnvp plans
        (`dpt_ir.driver.second_order`), called on their first use; None: not available."""
        self.graph = graph
        self.wrt = wrt
        self.loss = loss
        self.device = device
        self.plans = plans
        self.checks = checks  # the status word is compiled in
        self._report = report  # the compile's figures; `report` adds the modules' builds as they happen
        self.module_name = module_name  # the stem of the program's module names (and of its cache entry)
        self.launch_count = 0  # launches of the last evaluation (of any thread)
        self.input_types = {i.name: i.type for i in graph.inputs}  # the graph is immutable
        self.derived = DerivedPlans(derive)  # the jvp, hvp and gnvp plans, built on first use

    @property
    def report(self) -> ProgramReport:
        """What the compile made and how (`ProgramReport`), with each plan's module build as it
        stands now."""
        builds = {name: BuildRow.model_validate(plan.module.info) for name, plan in self.plans.items()}
        return ProgramReport.model_validate({**self._report.model_dump(), "builds": builds})

    def loop_costs(self) -> tuple[LoopCost, ...]:
        """The measured costs of the program's loop sweeps (`LoopProgram.loop_costs`): none here."""
        return ()

    def served_from_memory(self, seconds: float) -> None:
        """Record that a compile returned this program from the process's cache in ``seconds``."""
        update = {"cache": "memory", "compile_seconds": seconds}
        self._report = ProgramReport.model_validate({**self._report.model_dump(), **update})

    @property
    def modules(self) -> dict[str, GeneratedModule]:
        """Each plan's generated module, by plan name (built or not yet: ``info["built"]``)."""
        return {name: plan.module for name, plan in self.plans.items()}

    def build_all(self) -> None:
        """Build every plan's module now (each is otherwise built on its plan's first call):
        for a caller that wants the whole build paid up front, such as ``dpt-ir compile``
        or a compile-time benchmark. Their build seconds go to ``report.builds``."""
        for plan in self.plans.values():
            plan.ready()
        if "tape" in self.plans:
            _accumulate_kernel(self.device)

    def __repr__(self) -> str:
        kernels = {k: len(p.launches) for k, p in self.plans.items()}
        return f"Program({self.graph.name!r}, wrt={list(self.wrt)}, device={self.device!r}, kernels={kernels})"

    # -- evaluation --
    def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Forward only: a dict output name -> numpy array. A CPU call whose inputs are NumPy
        arrays of exactly their types takes the workspace's fast path (`runtime.host_run`)."""
        plan = self.plans["run"]
        ws = plan.checkout()  # not `plan.workspace()`: this is the path of every small call
        try:
            fast = ws.host_run
            if fast and (out := fast(self, plan, ws, inputs)) is not None:
                return out
            bound = plan.bind(inputs, self.input_types, ws)
            direct = _direct_results(plan, bound, plan.direct_run_outputs)
            ws.clear_status()
            self.launch_count = plan.run("forward", bound, ws)
            if fast is None:
                ws.host_run = host_run(plan, ws, self.input_types)
            self.checkpoint("forward", ws)
            return {name: _take(plan, name, ws, direct) for name in plan.outputs}
        finally:
            plan.checkin(ws)

    def value_and_grad(self, **inputs: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Outputs and the gradients of the loss output (seeded with 1) wrt ``wrt``; on the CPU
        with NumPy inputs of exactly their types, through the workspace's fast path as `run`."""
        if not self.wrt:
            raise ContractError(f"program {self.graph.name!r} was compiled without wrt; pass wrt=[...] to compile")
        if "value_and_grad" not in self.plans:
            raise ContractError(
                f"program {self.graph.name!r}: value_and_grad needs the output to differentiate; the graph "
                f"has no single scalar float output, so compile with loss='<output name>'"
            )
        plan = self.plans["value_and_grad"]
        with plan.workspace() as ws:
            fast = ws.host_run
            if fast and (results := fast(self, plan, ws, inputs)) is not None:
                return results
            bound = plan.bind(inputs, self.input_types, ws)
            direct = _direct_results(plan, bound, plan.direct_gradients)
            ws.clear_status()
            self.launch_count = plan.run("forward", bound, ws) + plan.run("backward", bound, ws)
            if fast is None:
                names = tuple(o.name for o in self.graph.outputs)
                ws.host_run = host_run(plan, ws, self.input_types, "value_and_grad", names)
            self.checkpoint("value_and_grad", ws)
            outs = {o.name: _read(plan, o.name, ws, direct) for o in self.graph.outputs}
            grads = {w: _take(plan, g, ws, direct) for w, g in plan.gradients.items()}
            return outs, grads

    def jvp(self, tangents: Mapping[str, Any], **inputs: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Forward mode: ``(outputs, output_tangents)``, per float output its Jacobian times
        ``tangents`` (a dict ``wrt`` input -> array of its shape; the others are zero)."""
        return jvp(self, tangents, inputs)

    def hvp(
        self, vectors: Mapping[str, Any], **inputs: Any
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(outputs, grads, hvps)``: the gradients `value_and_grad` gives and the Hessian of
        its loss times ``vectors`` (a dict ``wrt`` input -> array; the others are zero)."""
        return hvp(self, vectors, inputs)

    def gnvp(
        self, vectors: Mapping[str, Any], output: str, **inputs: Any
    ) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(outputs, products)``: ``J_rᵀ (J_r v)`` per ``wrt`` input, ``J_r`` the Jacobian of
        float output ``output`` (the residual), fused into one pass with the forward."""
        return gnvp(self, vectors, output, inputs)

    def tape_pass(self, tape: wp.Tape | None = None) -> TapePass:
        """A new forward + backward pass (FirstOrderPass lifecycle; see `TapePass`)."""
        if not self.wrt:
            raise ContractError(f"program {self.graph.name!r} was compiled without wrt; pass wrt=[...] to compile")
        return TapePass(self, tape)

    # -- status --
    def checkpoint(self, where: str, ws: Workspace) -> None:
        """Read the status word of ``ws``; raise NumericalError if any kernel raised a flag."""
        raised = [ws.slots[k] for k in ws.raised()]
        if raised:
            ws.clear_status()
            reasons = "; ".join(describe_slot(s) for s in raised[:8])
            more = f" (and {len(raised) - 8} more)" if len(raised) > 8 else ""
            raise NumericalError(f"{where} of {self.graph.name!r}: {reasons}{more}")


def describe_slot(slot: StatusSlot) -> str:
    what = "out-of-domain input" if slot.kind == "domain" else "non-finite value"
    detail = f": {slot.detail}" if slot.detail else ""
    origin = f" in {slot.origin}" if slot.origin else ""
    return f"{what} at node {slot.node!r} (op {slot.op}{origin}, kernel {slot.kernel}){detail}"


def _direct_results(plan: ExecutionPlan, bound: dict[str, Any], values: tuple[str, ...]) -> dict[str, np.ndarray]:
    """CPU plans: a fresh NumPy array per value of ``values`` that the kernels write into
    directly, bound for this call instead of the workspace's buffer (`ExecutionPlan.run`
    binds it), so the result needs no copy out of the workspace (a pass over 4 MB
    at 1024²). Only values with a buffer of their own (a graph output's), written by a launch
    and read by no other pipeline (`ExecutionPlan.direct_gradients`, `direct_run_outputs`);
    everything else is read back by `_read`."""
    out: dict[str, np.ndarray] = {}
    for value in values:
        shape, dtype = plan.fresh[value]
        out[value] = bound[value] = np.empty(shape, dtype=dtype)
    return out


def _take(plan: ExecutionPlan, output: str, ws: Workspace, direct: Mapping[str, np.ndarray]) -> np.ndarray:
    """Output ``output``: its `_direct_results` array itself (fresh for this call), or `_read`'s copy."""
    value = plan.outputs[output]
    return direct[value] if value in direct else _read(plan, output, ws)


def _read(
    plan: ExecutionPlan, output: str, ws: Workspace, direct: Mapping[str, np.ndarray] | None = None
) -> np.ndarray:
    """A host copy of output ``output`` of ``plan`` in ``ws``, in its declared shape (from
    ``direct``, `_direct_results`' arrays, when its value was written there)."""
    value = plan.outputs[output]
    if direct and value in direct:
        return direct[value].copy()
    return plan.output_copy(output, ws)


def require_state(graph: str, state: str, allowed: tuple[str, ...], action: str) -> None:
    """A tape pass's lifecycle check: ``action`` is allowed only in the ``allowed`` states."""
    if state not in allowed:
        raise LifecycleError(
            f"tape pass of {graph!r}: cannot {action} in state {state!r} (expected {' or '.join(allowed)})"
        )


class TapePass:
    """One forward and one backward, FirstOrderPass-style.

    States: ``new -> recording -> recorded -> complete -> closed``. ``forward`` runs
    once, inside ``with``; ``backward`` needs a completed, unconsumed forward and runs
    outside it; ``close`` zeroes the cotangents and resets the tape. Misuse raises
    `LifecycleError`; an exception while recording closes the pass. With
    ``tape=`` the program joins the caller's ``wp.Tape``: its backward is registered with
    ``Tape.record_func`` and runs inside ``tape.backward()``.

    The pass owns a workspace of the tape plan from ``forward`` to ``close``: the arrays
    ``forward`` and ``backward`` return stay this pass's until ``close`` hands the workspace
    back, and other passes and calls, in this thread or others, use their own. A pass
    dropped without ``close`` takes its workspace with it (freed, never reused).
    """

    def __init__(self, program: Program, tape: wp.Tape | None) -> None:
        self.program = program
        self.plan = program.plans["tape"]
        self.tape = tape
        self.state = "new"
        self._ws: Workspace | None = None
        self._bound: dict[str, Any] | None = None
        self._inputs: dict[str, Any] = {}

    def _require(self, allowed: tuple[str, ...], action: str) -> None:
        require_state(self.program.graph.name, self.state, allowed, action)

    def __enter__(self) -> TapePass:
        self._require(("new",), "start recording")
        active = wp._src.context.runtime.tape
        if active is not None and active is not self.tape:
            raise LifecycleError(
                "tape pass: another wp.Tape is active; pass it explicitly with program.tape_pass(tape=t) "
                "to compose with it"
            )
        self.state = "recording"
        return self

    def __exit__(self, exc_type: Any, exc: Any, tb: Any) -> None:
        if exc_type is not None:
            if self.state != "closed":  # forward may have closed it already; keep the user's exception
                self.close()
            return
        if self.state == "recording":
            self.state = "recorded"

    def forward(self, **inputs: Any) -> dict[str, wp.array]:
        """Run the forward phase once; returns output name -> wp.array (this pass's until
        ``close``)."""
        self._require(("recording",), "run forward")
        if self._bound is not None:
            raise LifecycleError("tape pass: forward already ran in this pass (one evaluation per pass)")
        types = self.program.input_types
        self._ws = ws = self.plan.checkout()
        try:
            bound = self.plan.bind(inputs, types, ws)
            ws.clear_status()
            self.program.launch_count = self.plan.run("forward", bound, ws)
            self.program.checkpoint("forward", ws)
        except BaseException:
            self.close()
            raise
        self._bound = bound
        self._inputs = inputs
        fwd = {o.name for o in self.program.graph.outputs}
        outs = {n: self.plan.output_array(n, ws) for n in self.plan.outputs if n in fwd}
        if self.tape is not None:
            for out in self.plan.cotangents:  # the caller's kernels accumulate into them: start at zero
                self.plan.output_array(out, ws).grad.zero_()
            arrays = [a for a in outs.values()] + [
                v for v in inputs.values() if isinstance(v, wp.array) and v.requires_grad
            ]
            # A zero-size array's gradient has nothing to zero, and Warp refuses it (an empty
            # gradient array is falsy to `Tape.record_func`).
            self.tape.record_func(backward=self._tape_backward, arrays=[a for a in arrays if a.size])
        return outs

    def backward(self, seed: Mapping[str, Any] | None = None) -> dict[str, wp.array]:
        """Seed output cotangents (scalar or array per output; unnamed outputs get zero)
        and run the backward phase once; returns input name -> gradient wp.array."""
        if self.state == "recording":
            raise LifecycleError("tape pass: backward cannot run while recording; leave the `with` block first")
        self._require(("recorded",), "run backward")
        if self._bound is None:
            raise LifecycleError("tape pass: backward needs a completed forward in this pass")
        seeds = self._seeds(seed)
        grads = self._run_backward(seeds)
        self.state = "complete"
        return grads

    def _seeds(self, seed: Mapping[str, Any] | None) -> dict[str, Any]:
        graph = self.program.graph
        if seed is None:
            raise ContractError("tape pass: backward needs an explicit seed, e.g. seed={'loss': 1.0}")
        if not isinstance(seed, Mapping):
            raise ContractError(f"seed: expected a dict output name -> scalar or array, found {type(seed).__name__}")
        arrays = seed_arrays(graph, dict(seed))
        full = {}
        for out, ct in self.plan.cotangents.items():
            t = self.plan.graph.types[ct]
            value = arrays.get(out, np.zeros(t.shape, dtype=t.dtype))
            full[ct] = value
        assert self._ws is not None
        return self.plan.bind(full, {ct: self.plan.graph.types[ct] for ct in full}, self._ws, what="seed")

    def _run_backward(self, seeds: dict[str, Any]) -> dict[str, wp.array]:
        assert self._bound is not None and self._ws is not None
        ws = self._ws
        bound = {**self._bound, **seeds}
        ws.clear_status()
        self.program.launch_count = self.plan.run("backward", bound, ws)
        self.program.checkpoint("backward", ws)
        return {w: self.plan.output_array(g, ws) for w, g in self.plan.gradients.items()}

    def _tape_backward(self) -> None:
        """Called by the caller's ``tape.backward()``: our outputs' adjoints are the seeds."""
        self._require(("recorded",), "run backward")
        assert self._ws is not None
        seeds = {}
        for out, ct in self.plan.cotangents.items():
            seeds[ct] = self.plan.output_array(out, self._ws).grad.flatten()
        grads = self._run_backward(seeds)
        for w, g in grads.items():
            user = self._inputs.get(w)
            if isinstance(user, wp.array) and user.requires_grad:
                dst, src = user.grad.flatten(), g.flatten()
                wp.launch(
                    _accumulate_kernel(self.program.device),
                    dim=src.shape[0],
                    inputs=[dst, src],
                    device=self.program.device,
                    record_tape=False,
                )
        self.state = "complete"

    def close(self) -> None:
        """Zero the cotangents, reset the tape, hand the workspace back. Idempotent on error
        paths."""
        if self.state == "closed":
            raise LifecycleError("tape pass: already closed")
        ws, self._ws = self._ws, None
        if ws is not None:
            for out in self.plan.cotangents:
                arr = self.plan.output_array(out, ws)
                if arr.grad is not None:
                    arr.grad.zero_()
            self.plan.checkin(ws)
        if self.tape is not None:
            self.tape.reset()
        self._bound = None
        self._inputs = {}
        self.state = "closed"


_STATIC_BUILT: set[str] = set()  # devices the static kernels are built for


def _accumulate_kernel(device: str) -> Any:
    """The kernel that adds a program's gradient into a caller's (composition with a
    caller's tape), built for ``device`` on first use."""
    from dpt_ir.runtime import static_kernels

    if device not in _STATIC_BUILT:
        with BUILD_LOCK:
            if device not in _STATIC_BUILT:
                load(static_kernels, device, "static_kernels", None, purge=False)
                _STATIC_BUILT.add(device)
    return static_kernels.accumulate

"""Forward mode and second order on a compiled `Program`: ``jvp``, ``hvp`` and ``gnvp``.

Each evaluates a plan whose graph `dpt_ir.api.second_order` derived from the program's graph
(a forward-only graph with one vector input per ``wrt`` input, its `Derived` record naming
them). The plans come from the driver's builder, injected into the `Program` (the runtime
never imports the driver), at the first call of each kind, once per process even when threads
race to it (`DerivedPlans`); a call then costs one forward evaluation of that plan, with the
same workspaces, status checkpoints and thread safety as `Program.run`.

Contracts: vectors are a dict ``wrt`` input -> array of its shape (a missing one is zero); a
vector for another input, a wrong shape, ``gnvp`` of a non-float or unknown output and ``hvp``
of a program without a loss are ContractErrors, raised before any kernel runs.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import numpy as np

from dpt_ir.ir import records
from dpt_ir.ir.errors import ContractError
from dpt_ir.reference.interpreter import vector_arrays
from dpt_ir.runtime.plan import ExecutionPlan

if TYPE_CHECKING:
    from dpt_ir.runtime.program import Program

PlanMaker = Callable[[str, "str | None"], ExecutionPlan]
Arrays = dict[str, np.ndarray]


class DerivedPlans:
    """A program's jvp, hvp and gnvp plans, made by ``make(kind, residual)`` on first use."""

    def __init__(self, make: PlanMaker | None) -> None:
        self._make = make
        self._plans: dict[tuple[str, str | None], ExecutionPlan] = {}
        self._lock = threading.Lock()

    def get(self, program: Program, kind: str, of: str | None = None) -> ExecutionPlan:
        if self._make is None:
            raise ContractError(f"program {program.graph.name!r}: {kind} is not available for this program's kind")
        with self._lock:  # one build per plan, however many threads ask at once
            plan = self._plans.get((kind, of))
            if plan is None:
                plan = self._plans[(kind, of)] = self._make(kind, of)
            return plan

    @property
    def built(self) -> dict[str, ExecutionPlan]:
        """The plans made so far, by name (``jvp``, ``hvp``, ``gnvp-<output>``)."""
        with self._lock:
            return {kind if of is None else f"{kind}-{of}": p for (kind, of), p in self._plans.items()}


def _evaluate(
    program: Program, plan: ExecutionPlan, vectors: Any, inputs: dict[str, Any], what: str
) -> tuple[Arrays, records.Derived]:
    """Every output of ``plan`` for ``inputs`` and the ``vectors`` of the ``wrt`` inputs, and the
    plan's `Derived` record (which names them)."""
    record = records.derived_record(plan.graph)
    vec = vector_arrays(program.graph, program.wrt, vectors, what)
    named = {record.vectors[w]: v for w, v in vec.items()}
    types = {**program.input_types, **{n: plan.graph.input_map[n].type for n in named}}
    with plan.workspace() as ws:
        bound = plan.bind({**inputs, **named}, types, ws)
        direct = _direct_outputs(plan, bound)
        ws.clear_status()
        program.launch_count = plan.run("forward", bound, ws)
        program.checkpoint(what, ws)
        values = {name: direct[v] if v in direct else plan.output_copy(name, ws) for name, v in plan.outputs.items()}
    return values, record


def _direct_outputs(plan: ExecutionPlan, bound: dict[str, Any]) -> Arrays:
    """CPU plans: a fresh NumPy array per output value the kernels can write directly
    (`ExecutionPlan.direct_values`: one output each), bound for this call, so the result needs
    no copy out of the workspace (as `value_and_grad`'s gradients)."""
    out: Arrays = {}
    if plan.device != "cpu":
        return out
    for value in plan.outputs.values():
        if value in plan.direct_values:
            t = plan.graph.types[value]
            out[value] = bound[value] = np.empty(t.shape, dtype=t.dtype)
    return out


def _require_wrt(program: Program, what: str) -> None:
    if not program.wrt:
        raise ContractError(f"program {program.graph.name!r} was compiled without wrt; {what} needs wrt=[...]")


def jvp(program: Program, tangents: Any, inputs: dict[str, Any]) -> tuple[Arrays, Arrays]:
    """``(outputs, output_tangents)``: per float output, its Jacobian times ``tangents``."""
    _require_wrt(program, "jvp")
    plan = program.derived.get(program, "jvp")
    values, record = _evaluate(program, plan, tangents, inputs, "tangent")
    return {o.name: values[o.name] for o in program.graph.outputs}, {o: values[p] for o, p in record.products.items()}


def hvp(program: Program, vectors: Any, inputs: dict[str, Any]) -> tuple[Arrays, Arrays, Arrays]:
    """``(outputs, grads, hvps)``: the loss's gradient and its Hessian times ``vectors``."""
    _require_wrt(program, "hvp")
    plan = program.derived.get(program, "hvp")
    values, record = _evaluate(program, plan, vectors, inputs, "vector")
    outs = {o.name: values[o.name] for o in program.graph.outputs}
    return outs, {w: values[g] for w, g in record.gradients.items()}, {w: values[p] for w, p in record.products.items()}


def gnvp(program: Program, vectors: Any, output: Any, inputs: dict[str, Any]) -> tuple[Arrays, Arrays]:
    """``(outputs, products)``: ``J_rᵀ (J_r v)`` per ``wrt`` input for residual output ``output``."""
    _require_wrt(program, "gnvp")
    names = [o.name for o in program.graph.outputs]
    if not isinstance(output, str) or output not in names:
        raise ContractError(f"gnvp: output={output!r} is not an output of {program.graph.name!r}; outputs are {names}")
    plan = program.derived.get(program, "gnvp", output)
    values, record = _evaluate(program, plan, vectors, inputs, "vector")
    return {n: values[n] for n in names}, {w: values[p] for w, p in record.products.items()}

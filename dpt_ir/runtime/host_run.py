"""`host_run`: a CPU `Program.run` or `Program.value_and_grad` call that does only what its
inputs leave to do.

Assumes: a CPU plan's workspace that has run the entry's phases once through the general path
(`ExecutionPlan.run`: each phase is recorded, the module built, and every input name was bound,
so `ExecutionPlan.ready_to_bind` has nothing left to find); the caller has checked the
workspace out for the whole call.

Guarantees: a call with exactly the plan's inputs, each a NumPy array of its type's shape, dtype
and C strides (what `ExecutionPlan.bind` returns as it is), does what the general path does, in
the same order and with the same arrays: fresh result arrays for the plan's direct values
(`runtime.program._direct_results`: `run`'s outputs, `value_and_grad`'s gradients), the status
word cleared, every descriptor the recorded phases re-point set to this call's array or to the
workspace's buffer (`RecordedPhase.run`; all of them before the first step, each phase's
descriptors being its own), the recorded steps of each phase in order, the launch count, the
status word read (a raised flag is `Program.checkpoint`'s NumericalError), then the results
(`run`: the outputs, the fresh arrays themselves, the others copied out of the workspace;
`value_and_grad`: copies of every output, and the gradients, fresh or copied). Its results are
the general path's, bit for bit. Any other call (a `wp.array` input, a list, a strided view, a
wrong dtype, a missing or extra name) is refused before anything is written: the call returns
None and the caller takes the general path, which checks it and reports what is wrong. A
workspace whose outputs copy an input (``ws.copies``), or a plan that is not on the CPU, has no
fast path.

Why a function written for the workspace: at a small size the general path's Python steps
cost as much as the kernel (a 64² float32 ``matmul``: 4.4 us of a 10 us call, the kernel
5.6 us); a generic version of the steps below, looping over its inputs and descriptors,
still spent 3.2 us where this one spends 2.3 (a 1 x 1 product, one thread); a 16² objective's
`value_and_grad` 7.4 -> 4.2-4.6 us. Its text is kept as the function's ``source`` attribute.
"""

from __future__ import annotations

import ctypes
from collections.abc import Callable
from typing import Any

import numpy as np

from dpt_ir.runtime.plan import _host_spec
from dpt_ir.runtime.recorded import _DATA_OFFSET, RecordedPhase, _pointer_at

FEW_FLAGS = 8  # a status word of at most this many flags is cleared and read flag by flag
# entry -> (its phases, the plan's direct values it binds fresh arrays for, its checkpoint's name)
ENTRIES = {
    "run": (("forward",), "direct_run_outputs", "forward"),
    "value_and_grad": (("forward", "backward"), "direct_gradients", "value_and_grad"),
}
HostCall = Callable[[Any, Any, Any, dict[str, Any]], Any]  # (program, plan, ws, values) -> results or None


def host_run(
    plan: Any, ws: Any, types: dict[str, Any], entry: str = "run", outputs: tuple[str, ...] = ()
) -> HostCall | bool:
    """The fast path of ``ws`` after its first call of ``entry`` (`ENTRIES`): a function
    ``(program, plan, ws, values)`` giving that entry's results, or None for a call it does not
    take; False where ``ws`` has none. ``outputs``: the program's outputs `value_and_grad` returns
    (its plan's graph also has the gradients')."""
    phases = [ws.phases.get(phase) for phase in ENTRIES[entry][0]]
    if plan.device != "cpu" or None in phases or ws.copies or _DATA_OFFSET is None:
        return False
    return _Writer(plan, ws, types, entry, phases, outputs).function()


class _Writer:
    """The text of one workspace's call (``lines``) and the objects it names (``names``)."""

    def __init__(
        self,
        plan: Any,
        ws: Any,
        types: dict[str, Any],
        entry: str,
        phases: list[RecordedPhase],
        outputs: tuple[str, ...],
    ) -> None:
        _, direct, where = ENTRIES[entry]
        self.graph = plan.graph.name
        self.names: dict[str, Any] = {
            "ndarray": np.ndarray,
            "empty": np.empty,
            "pointer_at": _pointer_at,
            "offset": _DATA_OFFSET,
            "keys": types.keys(),
            "count": sum(recorded.count for recorded in phases),
        }
        self.lines = ["if values.keys() != keys:", "    return None"]
        descs: dict[str, list[Any]] = {}
        fallback: dict[str, int] = {}
        for recorded in phases:
            for name, targets in recorded.names:
                descs.setdefault(name, []).extend(targets)
            fallback.update(recorded.fallback)
        inputs = [(n, *_host_spec(t)[1:], descs.pop(n, [])) for n, t in types.items()]
        for k, (name, shape, dtype, strides, _) in enumerate(inputs):
            self.names.update({f"shape{k}": shape, f"dtype{k}": dtype, f"strides{k}": strides})
            self.lines += [
                f"v{k} = values[{name!r}]",
                f"if type(v{k}) is not ndarray or v{k}.shape != shape{k} or v{k}.strides != strides{k} "
                f"or v{k}.dtype != dtype{k}:",
                "    return None",
            ]
        for k, (*_, targets) in enumerate(inputs):  # only after every input passed: nothing written before
            self._point(f"v{k}", f"in{k}", targets)
        made: dict[str, str] = {}
        for k, value in enumerate(getattr(plan, direct)):
            made[value] = f"f{k}"
            self.names.update({f"fresh_shape{k}": plan.fresh[value][0], f"fresh_dtype{k}": plan.fresh[value][1]})
            self.lines.append(f"f{k} = empty(fresh_shape{k}, dtype=fresh_dtype{k})")
            self._point(f"f{k}", f"out{k}", descs.pop(value, []))
        for k, (d, ptr) in enumerate((d, fallback[n]) for n, targets in descs.items() for d in targets):
            self.names.update({f"fixed{k}": d, f"fixed_ptr{k}": ptr})
            self.lines.append(f"fixed{k}.data = fixed_ptr{k}")
        raised = self._status(ws)
        for k, step in enumerate(step for recorded in phases for step in recorded.steps):
            self.names[f"step{k}"] = step
            self.lines.append(f"step{k}()")
        self.lines.append("program.launch_count = count")
        if raised:
            self.lines += [f"if {raised}:", f"    program.checkpoint({where!r}, ws)"]
        self.lines.append(f"return {self._results(plan, entry, made, outputs)}")

    @staticmethod
    def _results(plan: Any, entry: str, made: dict[str, str], outputs: tuple[str, ...]) -> str:
        """The expression of the call's results (`runtime.program`'s ``_take`` and ``_read``)."""

        def take(output: str, copy: bool) -> str:
            value = plan.outputs[output]
            if value in made:
                return f"{made[value]}.copy()" if copy else made[value]
            return f"plan.output_copy({output!r}, ws)"

        if entry == "run":
            return "{" + ", ".join(f"{o!r}: {take(o, False)}" for o in plan.outputs) + "}"
        values = ", ".join(f"{o!r}: {take(o, True)}" for o in outputs)
        grads = ", ".join(f"{w!r}: {take(g, False)}" for w, g in plan.gradients.items())
        return f"{{{values}}}, {{{grads}}}"

    def _point(self, array: str, label: str, targets: list[Any]) -> None:
        """Lines pointing ``targets`` (descriptors, named ``<label>_<k>``) at ``array``'s data."""
        if targets:
            self.lines.append(f"p = pointer_at(id({array}) + offset).value or 0")
        for k, d in enumerate(targets):
            self.names[f"{label}_{k}"] = d
            self.lines.append(f"{label}_{k}.data = p")

    def _status(self, ws: Any) -> str:
        """Lines clearing ``ws``'s status word; returns the test of a raised flag ('' without
        one). A word of a few flags goes through a ctypes view, flag by flag (about 30 ns a flag,
        against 160 for NumPy's fill and compare), a longer one through NumPy."""
        flags = ws.flags
        if flags is None:
            return ""
        if flags.size > FEW_FLAGS:
            self.names.update({"flags": flags, "clear": ws._clear})
            self.lines.append("flags.fill(0)")
            return "flags.tobytes() != clear"
        self.names["word"] = (ctypes.c_int32 * flags.size).from_address(flags.ctypes.data)
        self.lines += [f"word[{k}] = 0" for k in range(flags.size)]
        return " or ".join(f"word[{k}]" for k in range(flags.size))

    def function(self) -> HostCall:
        text = "def call(program, plan, ws, values):\n" + "".join(f"    {line}\n" for line in self.lines)
        namespace = dict(self.names)
        exec(compile(text, f"<dpt_ir host run of {self.graph!r}>", "exec"), namespace)
        call = namespace["call"]
        call.source = text
        return call

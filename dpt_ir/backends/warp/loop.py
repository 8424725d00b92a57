"""The launches of one compiled loop node: `Loop` runs a ``scan`` or a ``scan_vjp``.

Assumes: the node is a loop op (`dpt_ir.ops.loop`) whose body has no loops, every float
input in the carries' dtype (`check_loop_dtypes`), and its body (and, for ``scan_vjp``,
body-vjp) pieces compiled as forward-only programs (`dpt_ir.backends.warp.loop_program`).

Guarantees:
- ``scan`` launches the body's kernels ``length`` times: carries ping-pong between the
  output buffers of two workspaces of the body's plan (no per-step copy), ``xs`` are read
  as per-step views of the stacked arrays; the outputs a kernel writes and no other
  output shares (`direct_outputs`) are bound to their destinations, so each ``y`` is
  written straight into the packed result at its step's offset, the final carries too,
  and kept carries into their own arrays; other outputs are copied there;
- ``scan_vjp`` replays the node's checkpoint schedule (`dpt_ir.revolve`, the same data
  the interpreter replays), storing carries in ``slots`` preallocated arrays and running
  the vjp program at each ``reverse`` action; when the schedule stores every carry and
  the forward scan ran in the same evaluation (`keep`/``source``), it reads the carries
  the forward kept instead. Closed-over gradients are summed in reverse step order inside
  the vjp kernel (`vjp_piece`): deterministic, bit-identical for every policy;
- the body's status words are checked after each node (`NumericalError` naming the loop).
"""

from __future__ import annotations

import hashlib
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.backends.warp.plan import WP_DTYPES
from dpt_ir.errors import ContractError
from dpt_ir.graph import Graph, Node, Output
from dpt_ir.ops.loop import ScanAttrs, body_vjp, checkpoint_plan, grad_layout, result_types
from dpt_ir.types import TensorType, is_float


def _offsets(types: list[TensorType]) -> list[int]:
    out, at = [], 0
    for t in types:
        out.append(at)
        at += t.size
    return out


def piece_names(a: ScanAttrs) -> tuple[str, str]:
    """The names of a loop's body and body-vjp pieces (one per distinct body)."""
    digest = hashlib.sha256(a.body.model_dump_json().encode()).hexdigest()[:12]
    return f"body_{digest}", f"body_vjp_{digest}"


ACC_PREFIX = "acc."  # the vjp piece's input holding a closure's gradient summed over later steps


def vjp_piece(a: ScanAttrs) -> Graph:
    """The vjp program's graph: the body's joint graph reduced to its gradient outputs,
    where each float closed-over input's gradient is ``acc.<input> + this step's part``
    (the running sum over the steps already reversed, fused into the vjp kernel: the same
    additions in the same order as summing afterwards, without a launch per step)."""
    from dpt_ir.builder import GraphBuilder

    joint = body_vjp(a.body)
    grads = joint.meta["gradients"]
    b, handles = GraphBuilder.from_graph(joint)
    closures = a.body.inputs[a.carries + a.xs + (1 if a.index else 0) :]
    outputs = {o.name: o.value for o in joint.outputs if o.name in set(grads.values())}
    for inp in closures:
        if is_float(inp.type.dtype):
            acc = b.add_input(ACC_PREFIX + inp.name, inp.type)
            total = b.emit("add", [acc, handles[outputs[grads[inp.name]]]], meta={"phase": "backward"})
            outputs[grads[inp.name]] = total.name
    b.set_outputs([Output(name=k, value=v) for k, v in outputs.items()])
    return b.build().replace(name=f"{a.body.name}.vjp", meta={})


def direct_outputs(plan: Any, names: list[str]) -> dict[int, str]:
    """Outputs ``names`` of ``plan`` (by position) that a kernel writes and that no other
    output shares: a loop binds them to their destination (a kept carry, a packed
    result), so the kernel writes there and nothing is copied. The others are copied
    from the workspace."""
    values = list(plan.outputs.values())
    written = {p for launch in plan.launches for p in launch.params}
    chosen = [plan.outputs[name] for name in names]
    return {k: v for k, v in enumerate(chosen) if v in plan.graph.node_map and v in written and values.count(v) == 1}


def check_loop_dtypes(node: Node, in_types: tuple[TensorType, ...]) -> None:
    """Compiled loops pack every float input's gradient in the carries' dtype."""
    dtype = in_types[0].dtype
    for k, t in enumerate(in_types):
        if is_float(t.dtype) and t.dtype != dtype:
            raise ContractError(
                f"compile: node {node.name!r}: loop input {k} has dtype {t.dtype}; compiled loops expect every "
                f"float input in the carries' dtype {dtype}"
            )


class Loop:
    """One loop node's compiled body (forward and vjp programs) and its buffers."""

    def __init__(self, node: Node, in_types: tuple[TensorType, ...], programs: dict[str, Any], device: str) -> None:
        """``programs``: the compiled pieces by `piece_names` (the body's, and for a
        ``scan_vjp`` the body vjp's)."""
        self.node = node
        self.attrs: ScanAttrs = node.opdef.parse_attrs(node.attrs, f"node {node.name!r}")  # type: ignore[assignment]
        a = self.attrs
        self.in_types = in_types[: len(in_types) - 1] if node.op == "scan_vjp" else in_types
        dtype = self.in_types[0].dtype
        self.device = device
        body_name, vjp_name = piece_names(a)
        self.body = programs[body_name]
        joint = body_vjp(a.body)
        self.grad_outputs = dict(joint.meta["gradients"])
        # Only the reverse sweep (a scan_vjp node) runs the body's vjp.
        self.vjp = programs[vjp_name] if node.op == "scan_vjp" else None
        self.names = [i.name for i in a.body.inputs]
        self.results = result_types(a.body, a)
        self.result_offsets = _offsets(self.results)
        self.ct_names = joint.meta["cotangents"]
        self.body_outputs = [o.name for o in a.body.outputs]
        self.packed = wp.zeros(sum(t.size for t in self.results), dtype=WP_DTYPES[dtype], device=self.device)
        layout = grad_layout(self.in_types)
        self.grad_offsets = {k: off for k, off, _ in layout}
        self.grads = wp.zeros(sum(size for _, _, size in layout), dtype=WP_DTYPES[dtype], device=self.device)
        self.iota = wp.array(np.arange(a.length, dtype=np.int32), dtype=wp.int32, device=self.device)
        plan = checkpoint_plan(a, self.in_types)
        self.schedule = plan
        self.slots: list[list[wp.array]] = []  # a scan_vjp's stored carries, allocated at its first run
        # A scan whose reverse stores every carry keeps them as it runs (see `keep`); that
        # reverse (``source``) then reads them instead of rerunning the forward.
        self.trajectory: list[list[wp.array]] = []
        self.source: Loop | None = None
        closures = range(a.carries + a.xs, len(self.in_types))
        # The closures' gradient sums start at zero; then each reverse step's vjp reads the
        # sum so far (``acc.<input>``) and writes the new one (ping-pong in its workspaces).
        self.zeros = {
            k: wp.zeros(self.in_types[k].size, dtype=WP_DTYPES[dtype], device=self.device)
            for k in closures
            if is_float(self.in_types[k].dtype)
        }
        self.sums: dict[int, wp.array] = {}
        self.fwd_plan = self.body.plans["run"]
        self.direct = direct_outputs(self.fwd_plan, self.body_outputs)
        self.fwd_ws = [self.fwd_plan.checkout(), self.fwd_plan.checkout()]
        self.vjp_plan = self.vjp.plans["run"] if self.vjp is not None else None
        self.vjp_ws = [self.vjp_plan.checkout(), self.vjp_plan.checkout()] if self.vjp_plan is not None else []
        # The xs' gradients the vjp kernel writes straight into the packed gradient.
        self.vjp_direct: dict[int, str] = {}
        if self.vjp_plan is not None:
            xs = [k for k in range(a.carries, a.carries + a.xs) if k in self.grad_offsets]
            found = direct_outputs(self.vjp_plan, [self.grad_outputs[self._name(k)] for k in xs])
            self.vjp_direct = {xs[j]: v for j, v in found.items()}

    def _carries(self) -> list[wp.array]:
        return [
            wp.zeros(self.in_types[k].size, dtype=self.packed.dtype, device=self.device)
            for k in range(self.attrs.carries)
        ]

    def keep(self) -> None:
        """Store every step's carry during the forward (for a store-every-carry reverse)."""
        self.trajectory = [self._carries() for _ in range(self.attrs.length - 1)]

    def held(self) -> dict[str, Any]:
        """What the reverse sweep holds and recomputes (`dpt_ir.revolve.CheckpointPlan` fields)."""
        p = self.schedule
        if self.source is None:
            return {"policy": p.policy, "slots": p.slots, "bytes_held": p.bytes_held, "advances": p.advances,
                    "recompute_factor": p.recompute_factor}  # fmt: skip
        return {"policy": f"{p.policy}, kept by the forward", "slots": p.length, "bytes_held": p.bytes_held,
                "advances": 0, "recompute_factor": 0.0}  # fmt: skip

    # -- one step --
    def _feed(self, carry: list[wp.array], arrays: list[wp.array], i: int) -> dict[str, wp.array]:
        a = self.attrs
        bound = dict(zip(self.names[: a.carries], carry, strict=True))
        for j in range(a.xs):
            size = self.in_types[a.carries + j].size // a.length
            bound[self.names[a.carries + j]] = arrays[a.carries + j][i * size : (i + 1) * size]
        at = a.carries + a.xs
        if a.index:
            bound[self.names[at]] = self.iota[i : i + 1]
            at += 1
        for k in range(a.carries + a.xs, len(self.in_types)):
            bound[self.names[at + k - a.carries - a.xs]] = arrays[k]
        return bound

    def _advance(self, carry: list[wp.array], arrays: list[wp.array], i: int, toggle: int) -> list[wp.array]:
        ws = self.fwd_ws[toggle]
        self.fwd_plan.run("forward", self._feed(carry, arrays, i), ws)
        return [self.fwd_plan.output_array(self.body_outputs[k], ws).flatten() for k in range(self.attrs.carries)]

    def _check(self, program: Any, spaces: list[Any]) -> None:
        for ws in spaces:
            program.checkpoint(f"loop {self.node.name!r}", ws)

    @staticmethod
    def _begin(spaces: list[Any]) -> None:
        for ws in spaces:
            if ws.status is not None:
                ws.status.zero_()

    # -- the node --
    def forward(self, arrays: list[wp.array]) -> wp.array:
        """The packed results of ``scan`` on its input arrays (flat)."""
        a = self.attrs
        self._begin(self.fwd_ws)
        carry = arrays[: a.carries]
        final = [
            self.packed[self.result_offsets[k] : self.result_offsets[k] + self.results[k].size]
            for k in range(a.carries)
        ]
        for i in range(a.length):
            ws = self.fwd_ws[i % 2]
            into = final if i + 1 == a.length else self.trajectory[i] if self.trajectory else None
            bound = self._feed(carry, arrays, i)
            for k, value in self.direct.items():
                if k < a.carries and into is not None:
                    bound[value] = into[k]
                elif k >= a.carries:
                    row = self.results[k].size // a.length
                    start = self.result_offsets[k] + i * row
                    bound[value] = self.packed[start : start + row]
            self.fwd_plan.run("forward", bound, ws)
            carry = [self._result(k, ws, bound) for k in range(a.carries)]
            for k in range(a.carries):
                if into is not None and carry[k] is not into[k]:  # not written in place: copy
                    wp.copy(into[k], carry[k])
                    carry[k] = into[k]
            for k in range(a.carries, len(self.results)):
                if k not in self.direct:
                    row = self.results[k].size // a.length
                    y = self._result(k, ws, bound)
                    wp.copy(self.packed, y, dest_offset=self.result_offsets[k] + i * row, count=row)
        self._check(self.body, self.fwd_ws)
        return self.packed

    def _result(self, k: int, ws: Any, bound: dict[str, wp.array]) -> wp.array:
        """Body output ``k`` of the step just run: where it was bound, else in ``ws``."""
        value = self.direct.get(k)
        if value is not None and value in bound:
            return bound[value]
        return self.fwd_plan.output_array(self.body_outputs[k], ws).flatten()

    def reverse(self, arrays: list[wp.array]) -> wp.array:
        """The packed gradients of ``scan_vjp`` (inputs: the scan's, then its cotangent)."""
        a = self.attrs
        gy = arrays[-1]
        forward = arrays[:-1]
        self._begin(self.fwd_ws + self.vjp_ws)
        self.sums = dict(self.zeros)  # read only: the vjp writes each new sum into its workspace
        g_carry = [gy[self.result_offsets[k] : self.result_offsets[k] + self.results[k].size] for k in range(a.carries)]
        if self.source is not None:  # the forward kept every carry: c_i for step i
            kept = [list(forward[: a.carries]), *self.source.trajectory]
            for i in range(a.length - 1, -1, -1):
                g_carry = self._reverse_step(kept[i], forward, gy, g_carry, i, i % 2)
            return self._finish(g_carry)
        if not self.slots:
            self.slots = [self._carries() for _ in range(self.schedule.slots)]
        carry, toggle, vtoggle = list(forward[: a.carries]), 0, 0
        for act in self.schedule.actions:
            if act.kind == "store":
                for k in range(a.carries):
                    wp.copy(self.slots[act.slot][k], carry[k])
            elif act.kind == "restore":
                carry = list(self.slots[act.slot])
            elif act.kind == "advance":
                for i in range(act.at, act.at + act.count):
                    carry = self._advance(carry, forward, i, toggle)
                    toggle ^= 1
            else:
                g_carry = self._reverse_step(carry, forward, gy, g_carry, act.at, vtoggle)
                vtoggle ^= 1
        return self._finish(g_carry)

    def _finish(self, g_carry: list[wp.array]) -> wp.array:
        """Pack the initial carries' and the closures' gradients; check the status words."""
        a = self.attrs
        for k in range(a.carries):
            wp.copy(self.grads, g_carry[k], dest_offset=self.grad_offsets[k], count=self.in_types[k].size)
        for k, total in self.sums.items():
            wp.copy(self.grads, total, dest_offset=self.grad_offsets[k], count=total.shape[0])
        self._check(self.body, self.fwd_ws)
        if self.vjp is not None:
            self._check(self.vjp, self.vjp_ws)
        return self.grads

    def _reverse_step(
        self, carry: list[wp.array], forward: list[wp.array], gy: wp.array, g_carry: list[wp.array], i: int, vt: int
    ) -> list[wp.array]:
        a = self.attrs
        bound = self._feed(carry, forward, i)
        for k, total in self.sums.items():
            bound[ACC_PREFIX + self._name(k)] = total
        for k, name in enumerate(self.body_outputs):
            if k < a.carries:
                bound[self.ct_names[name]] = g_carry[k]
            else:
                row = self.results[k].size // a.length
                start = self.result_offsets[k] + i * row
                bound[self.ct_names[name]] = gy[start : start + row]
        for k, value in self.vjp_direct.items():
            row = self.in_types[k].size // a.length
            start = self.grad_offsets[k] + i * row
            bound[value] = self.grads[start : start + row]
        ws, plan = self.vjp_ws[vt], self.vjp_plan
        assert plan is not None  # a scan_vjp node's loop has its vjp program
        plan.run("forward", bound, ws)

        def grad(k: int) -> wp.array:
            return plan.output_array(self.grad_outputs[self._name(k)], ws).flatten()

        for j in range(a.xs):
            k = a.carries + j
            if k in self.grad_offsets and k not in self.vjp_direct:
                row = self.in_types[k].size // a.length
                wp.copy(self.grads, grad(k), dest_offset=self.grad_offsets[k] + i * row, count=row)
        for k in self.sums:
            self.sums[k] = grad(k)
        return [grad(k) for k in range(a.carries)]

    def _name(self, k: int) -> str:
        """The body input standing for loop input ``k`` (the step index sits before the closures)."""
        a = self.attrs
        return self.names[k] if k < a.carries + a.xs else self.names[k + (1 if a.index else 0)]

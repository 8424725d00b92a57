"""The launches of one compiled loop node: `Loop` runs a ``scan`` or a ``scan_vjp``.

Assumes: the node is a loop op (`dpt_ir.ops.loop`) whose body has no loops, every float
input in the carries' dtype (`check_loop_dtypes`), and its body (and, for ``scan_vjp``,
body-vjp) pieces compiled as forward-only programs (`dpt_ir.runtime.loop_program`).

Guarantees:
- ``scan`` launches the body's kernels ``length`` times in one workspace of the body's
  plan: carries alternate between two carry-sized arrays (no per-step copy), ``xs`` are
  read as per-step views of the stacked arrays; the outputs whose value is a direct value
  (`ExecutionPlan.direct_outputs`: a kernel writes it, no other output shares it) are
  bound to their destinations, so each ``y`` is written straight into the packed result
  at its step's offset, the final carries too, and kept carries into their own arrays;
  other outputs are copied there. Each step (the vjp's too) is
  ``ExecutionPlan.run`` of the body's plan in the loop's own workspace: the launches
  recorded there at the first step, re-pointed at the step's arrays
  (`dpt_ir.runtime.recorded`), so bit-identical to ``wp.launch`` of them;
- ``scan_vjp`` replays the node's checkpoint schedule (`dpt_ir.ops.revolve`, the same data
  the interpreter replays). It allocates ``slots + 2`` carry-sized arrays: slot 0 is the
  initial carry itself (the schedule stores ``c_0`` there once and never overwrites it),
  ``slots - 1`` stored carries, and three step buffers shared by the current carry, the
  next one and the carry's cotangent (`_spares`; a recomputed step's passed-through carry
  shares its source's array, as in the forward, so an advance copies nothing for it; a
  store then copies in an order that reads each shared array before it is overwritten,
  `_store`). It runs the vjp program at each
  ``reverse`` action; when the schedule stores every carry and the forward scan ran in the
  same evaluation (`keep`/``source``), it reads the carries the forward kept instead.
  Closed-over gradients are summed in reverse step order inside the vjp kernel
  (`vjp_piece`): deterministic, bit-identical for every policy;
- on the CPU, each direction (forward, reverse with its checkpoint schedule) runs as one
  native call (`dpt_ir.runtime.loop_native`): the step logic above runs once, at the first
  call, to record an op table of the kernel calls, pointer rewrites and copies it makes, and
  every call replays that table natively, bit-identical to running the steps one by one. CUDA
  plans run step by step (their recorded launches are Warp commands, not native entry points);
- the body's status words are checked after each node (`NumericalError` naming the loop).
"""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.ir import records
from dpt_ir.ir.graph import Node
from dpt_ir.ir.types import TensorType, is_float
from dpt_ir.ops.loop import ScanAttrs, body_input, body_vjp, checkpoint_plan, grad_layout, result_types
from dpt_ir.ops.revolve import first_sweep
from dpt_ir.runtime.loop_native import NativeSteps
from dpt_ir.runtime.loop_pieces import ACC_PREFIX, piece_names
from dpt_ir.runtime.plan import WP_DTYPES


def _view(arr: wp.array, start: int, stop: int) -> wp.array:
    """The flat view ``arr[start:stop]``; an empty window (a zero-size carry, ``x`` or
    ``y``) is an empty array of its own, since Warp refuses to slice a zero-size array."""
    if stop <= start:
        return wp.empty(0, dtype=arr.dtype, device=arr.device)
    return arr[start:stop]


def _offsets(types: list[TensorType]) -> list[int]:
    out, at = [], 0
    for t in types:
        out.append(at)
        at += t.size
    return out


class Loop:
    """One loop node's compiled body (forward and vjp programs) and its buffers."""

    def __init__(
        self,
        node: Node,
        in_types: tuple[TensorType, ...],
        programs: dict[str, Any],
        device: str,
        unread: frozenset[str] = frozenset(),
    ) -> None:
        """``programs``: the compiled pieces by `piece_names` (the body's, and for a
        ``scan_vjp`` the body vjp's). ``unread``: the body inputs whose gradients no consumer
        of the packed result reads (`loop_pieces.unread_gradients`): the vjp piece leaves them
        out and their parts of the packed gradient stay zero."""
        self.node = node
        self.attrs: ScanAttrs = node.opdef.parse_attrs(node.attrs, f"node {node.name!r}")  # type: ignore[assignment]
        a = self.attrs
        self.in_types = in_types[: len(in_types) - 1] if node.op == "scan_vjp" else in_types
        dtype = self.in_types[0].dtype
        self.device = device
        self.unread = unread
        self.piece_names = piece_names(a, unread)
        body_name, vjp_name = self.piece_names
        self.body = programs[body_name]
        joint = body_vjp(a.body)
        self.grad_outputs = {k: g for k, g in records.joint_record(joint).gradients.items() if k not in unread}
        # Only the reverse sweep (a scan_vjp node) runs the body's vjp.
        self.vjp = programs[vjp_name] if node.op == "scan_vjp" else None
        self.names = [i.name for i in a.body.inputs]
        self.results = result_types(a.body, a)
        self.result_offsets = _offsets(self.results)
        self.ct_names = records.joint_record(joint).cotangents
        self.body_outputs = [o.name for o in a.body.outputs]
        self.wp_dtype = WP_DTYPES[dtype]
        layout = grad_layout(self.in_types)
        self.grad_offsets = {k: off for k, off, _ in layout}
        self.grad_size = sum(size for _, _, size in layout)
        self.schedule = checkpoint_plan(a, self.in_types)
        self.through = self._passed_through()
        self.slots: list[list[wp.array]] = []  # a scan_vjp's stored carries 1.. (slot 0 is c_0 itself)
        self.sweep = first_sweep(self.schedule.actions)
        # A scan keeps the carries its reverse (``source``) would rebuild first (see `keep`):
        # every carry for a store-every-carry reverse, else its schedule's first sweep's.
        # (That reverse starts from ``c_{length-1}`` where the forward left it: `last_carry`.)
        self.kept: dict[int, list[wp.array]] = {}  # step p -> the carries c_p
        self.destinations: list[list[wp.array]] = []  # a scan's: where step i writes c_{i+1} (`ready`)
        self.source: Loop | None = None
        self.fwd_plan = self.body.plans["run"]
        self.direct = self.fwd_plan.direct_outputs(self.body_outputs)
        self.vjp_plan = self.vjp.plans["run"] if self.vjp is not None else None
        self.vjp_direct: dict[int, str] = {}  # loop input k -> the vjp output value of its gradient
        if self.vjp_plan is not None:
            wanted = [k for k in range(len(self.in_types)) if k in self.grad_offsets and self._name(k) not in unread]
            found = self.vjp_plan.direct_outputs([self.grad_outputs[self._name(k)] for k in wanted])
            self.vjp_direct = {wanted[j]: v for j, v in found.items()}
        self._keeps: frozenset[int] = frozenset()  # the steps `keep` asked for
        self._keeps_all = False  # every step kept, for a reverse that only reads them (they may share arrays)
        # The op table of each direction ("forward", "reverse"), recorded at its first call
        # (`loop_native`); `_emit` is the table being recorded, None when running.
        self._tables: dict[str, NativeSteps] = {}
        self._emit: NativeSteps | None = None
        self._allocated = False  # the buffers are allocated at the first use (`ready`), never at compile
        self.seconds: float | None = None  # the last sweep's wall seconds (`LoopProgram.loop_costs`)

    # -- buffers --
    def ready(self) -> None:
        """Allocate the loop's buffers and workspaces, once, at its first use: compiling a loop
        program allocates nothing data-sized (the first call does)."""
        if self._allocated:
            return
        if self.source is not None:
            self.source.ready()
        a = self.attrs
        self.packed = wp.zeros(sum(t.size for t in self.results), dtype=self.wp_dtype, device=self.device)
        self.grads = wp.zeros(self.grad_size, dtype=self.wp_dtype, device=self.device)
        self.iota = wp.array(np.arange(a.length, dtype=np.int32), dtype=wp.int32, device=self.device)
        self.fwd_ws = self.fwd_plan.checkout()
        self.vjp_ws = self.vjp_plan.checkout() if self.vjp_plan is not None else None
        self.pool = self._pool()
        # A closure's gradient sum ping-pongs between the vjp's output and one array of
        # ours: each reverse step reads the sum so far (``acc.<input>``) and writes the new one.
        self.sum_pool = {k: [self._vjp_out(k), self._zeros(k)] for k in self.closures()}
        self.zeros = {k: self._zeros(k) for k in self.closures()}
        if self._keeps:
            self.kept = self._kept_carries()
        if self.vjp is None:
            self.destinations = self._destinations()
        if self.vjp is not None and not self.stores_every_carry():
            # Slots the first sweep fills are the forward's kept carries, when it keeps them.
            kept = self.source.kept if self.source is not None else {}
            stores = self.sweep.stores
            self.slots = [list(kept[stores[m]]) if m in stores and kept else self._carries()
                          for m in range(1, self.schedule.slots)]  # fmt: skip
        self._allocated = True

    def _zeros(self, k: int) -> wp.array:
        return wp.zeros(self.in_types[k].size, dtype=self.wp_dtype, device=self.device)

    def _carries(self) -> list[wp.array]:
        return [self._zeros(k) for k in range(self.attrs.carries)]

    def _kept_carries(self) -> dict[int, list[wp.array]]:
        """The carries of the kept steps (1 to length - 1). Where sharing is allowed (a reverse
        that only reads them), a carry the body passes through (its new value is carry ``m``'s
        old one, as a leapfrog's previous field) shares carry ``m``'s array of the step before
        when that step is kept too: the same values, so each step copies and holds one carry
        fewer (`_copy` skips a copy onto itself)."""
        a, out = self.attrs, {}
        for p in sorted(self._keeps):
            prior = out.get(p - 1) if self._keeps_all else None
            out[p] = [prior[self.through[k]] if prior is not None and k in self.through else self._zeros(k)
                      for k in range(a.carries)]  # fmt: skip
        return out

    def _passed_through(self) -> dict[int, int]:
        """Carry ``k`` -> ``m`` where the body's new carry ``k`` is its input carry ``m`` unchanged."""
        a = self.attrs
        inputs = {name: m for m, name in enumerate(self.names[: a.carries])}
        outputs = [o.value for o in a.body.outputs[: a.carries]]
        return {k: inputs[v] for k, v in enumerate(outputs) if v in inputs and inputs[v] != k}

    def closures(self) -> list[int]:
        """The loop inputs (closed-over, float) whose gradient a reverse sums over its steps:
        none for a forward ``scan``, and none whose gradient is unread."""
        a = self.attrs
        if self.vjp is None:
            return []
        return [
            k
            for k in range(a.carries + a.xs, len(self.in_types))
            if is_float(self.in_types[k].dtype) and self._name(k) not in self.unread
        ]

    def _vjp_out(self, k: int) -> wp.array:
        """The vjp workspace's array of loop input ``k``'s gradient when its kernel writes it
        (`ExecutionPlan.direct_outputs`), else a new one."""
        assert self.vjp_plan is not None and self.vjp_ws is not None
        if k in self.vjp_direct:
            return self.vjp_plan.output_array(self.grad_outputs[self._name(k)], self.vjp_ws).flatten()
        return self._zeros(k)

    def _pool(self) -> list[list[wp.array]]:
        """The carry-sized buffers the steps write, per carry: a ``scan`` alternates its carry
        between two (the body's output in its one workspace, and one of ours); a
        ``scan_vjp`` shares three between the current carry, the next one and the carry's
        cotangent (at most two are live when a step writes the third)."""
        out = []
        for k in range(self.attrs.carries):
            own = self.fwd_plan.output_array(self.body_outputs[k], self.fwd_ws).flatten() if k in self.direct else None
            arrays = [own if own is not None else self._zeros(k), self._zeros(k)]
            if self.vjp is not None:
                arrays.append(self._vjp_out(k))
            out.append(arrays)
        return [list(p) for p in zip(*out, strict=True)] if out else []

    def stores_every_carry(self) -> bool:
        """Whether the reverse's schedule holds every carry (then it only reads its slots)."""
        return self.schedule.slots == self.schedule.length

    def keeps_every_carry(self) -> bool:
        """Whether this forward keeps every step's carry (for a store-every-carry reverse)."""
        return self._keeps_all

    def keep(self, reverse: Loop) -> bool:
        """Keep, during the forward, the carries ``reverse`` (this scan's ``scan_vjp``) would
        rebuild first, and make this loop its ``source``: every carry for a store-every-carry
        reverse, which then reruns no forward step; else the carries its schedule's first
        sweep stores, which that reverse then overwrites as its slots (so at most one reverse
        reads them, and only when nothing else is kept), and starts from ``c_{length-1}``
        where the forward left it (`last_carry`). Allocated with the other buffers (`ready`).
        False where nothing is kept for ``reverse``."""
        every = reverse.stores_every_carry()
        if every and (self._keeps_all or not self._keeps):
            self._keeps, self._keeps_all = frozenset(range(1, self.attrs.length)), True
        elif not every and not self._keeps:
            self._keeps = frozenset(reverse.sweep.stores.values())
        else:
            return False
        reverse.source = self
        return True

    def carry_bytes_held(self) -> int:
        """Bytes of the carry-sized arrays this loop owns for carries and their cotangents
        (stored carries, kept carries, the step buffers), body temporaries excluded; a
        reverse's slots that are its forward's kept carries are the forward's (`held` gives
        them as ``kept_bytes``). Measured on the arrays, so asking allocates them (`ready`)."""
        self.ready()
        arrays = [x for group in (*self.slots, *self.kept.values(), *self.pool) for x in group]
        borrowed = {x.ptr for group in self.source.kept.values() for x in group} if self.source else set()
        return sum(x.capacity for p, x in {x.ptr: x for x in arrays}.items() if p not in borrowed)

    def workspace_bytes(self) -> int:
        """Bytes of the body's and vjp's workspaces outside `pool`: the body's own
        temporaries, ys, the closures' gradient sums (allocating them, `ready`)."""
        self.ready()
        pooled = {x.ptr for group in self.pool for x in group}
        arrays = {}
        for ws in (self.fwd_ws, self.vjp_ws):
            if ws is not None:
                for x in (*ws.buffers.values(), *ws.shaped.values()):
                    arrays.setdefault(x.ptr, x)
        extra = [x for group in self.sum_pool.values() for x in group[1:]]
        return sum(x.capacity for p, x in arrays.items() if p not in pooled) + sum(x.capacity for x in extra)

    def held(self) -> dict[str, Any]:
        """What the reverse sweep holds and recomputes (`dpt_ir.ops.revolve.CheckpointPlan` fields)."""
        p = self.schedule
        sizes = {"carry_bytes": p.carry_bytes, "carry_bytes_held": self.carry_bytes_held(),
                 "workspace_bytes": self.workspace_bytes()}  # fmt: skip
        if self.source is None:
            return {"policy": p.policy, "slots": p.slots, "bytes_held": p.bytes_held, "advances": p.advances,
                    "recompute_factor": p.recompute_factor, **sizes}  # fmt: skip
        kept = {x.ptr: x for group in self.source.kept.values() for x in group}  # the forward's (shared arrays once)
        sizes["kept_bytes"] = sum(x.capacity for x in kept.values())
        if self.stores_every_carry():
            return {"policy": f"{p.policy}, kept by the forward", "slots": p.length, "bytes_held": p.bytes_held,
                    "advances": 0, "recompute_factor": 0.0, **sizes}  # fmt: skip
        rerun = p.advances - self.sweep.advances
        return {"policy": f"{p.policy}, its first sweep kept by the forward", "slots": p.slots,
                "bytes_held": p.bytes_held, "advances": rerun, "recompute_factor": rerun / p.length,
                **sizes}  # fmt: skip

    # -- one step --
    def _feed(self, carry: list[wp.array], arrays: list[wp.array], i: int) -> dict[str, wp.array]:
        a = self.attrs
        bound = dict(zip(self.names[: a.carries], carry, strict=True))
        for j in range(a.xs):
            size = self.in_types[a.carries + j].size // a.length
            bound[self.names[a.carries + j]] = _view(arrays[a.carries + j], i * size, (i + 1) * size)
        at = a.carries + a.xs
        if a.index:
            bound[self.names[at]] = self.iota[i : i + 1]
            at += 1
        for k in range(a.carries + a.xs, len(self.in_types)):
            bound[self.names[at + k - a.carries - a.xs]] = arrays[k]
        return bound

    def _step(
        self, carry: list[wp.array], arrays: list[wp.array], i: int, into: list[wp.array], ys: dict[str, wp.array]
    ) -> None:
        """Run step ``i`` of the forward body from ``carry``, its new carries written into
        ``into`` (bound when the kernel writes them, else copied), the outputs ``ys``
        (value -> array) bound where given."""
        a = self.attrs
        bound = {**self._feed(carry, arrays, i), **ys}
        for k, value in self.direct.items():
            if k < a.carries:
                bound[value] = into[k]
        # A passed-through carry is copied from its source carry, not from the body's copy
        # of that input into its output (which no one then reads); one whose array already
        # is its source's (`_kept_carries`) needs no copy at all.
        shared = {k for k, m in self.through.items() if into[k].ptr == carry[m].ptr}
        self._run(self.fwd_plan, bound, self.fwd_ws, self._unread_copies(set(self.through)))
        for k in range(a.carries):
            if k in self.direct or k in shared:
                continue
            if k in self.through:
                self._copy(into[k], carry[self.through[k]])
            else:
                self._copy(into[k], self.fwd_plan.output_array(self.body_outputs[k], self.fwd_ws).flatten())

    def _unread_copies(self, through: set[int]) -> frozenset[str]:
        """The body inputs whose copy into an output no one reads when the passed-through
        carries ``through`` take their values from the carries instead (an input also
        output as a ``y`` or another carry is still read)."""
        a, outputs = self.attrs, [o.value for o in self.attrs.body.outputs]
        kept = {outputs[k] for k in range(len(outputs)) if k >= a.carries or k not in through}
        return frozenset(outputs[k] for k in through if outputs[k] not in kept)

    def _run(self, plan: Any, bound: dict[str, wp.array], ws: Any, unread: frozenset[str] = frozenset()) -> None:
        """``plan``'s forward on ``bound``; ``unread``: inputs whose output copy a native
        table may leave out (the step-by-step path makes every copy: the same values)."""
        if self._emit is not None:
            self._emit.phase(plan, bound, ws, unread)
        else:
            plan.run("forward", bound, ws)

    def _copy(self, dst: wp.array, src: wp.array, dest_offset: int = 0, count: int | None = None) -> None:
        if dst.ptr == src.ptr and dest_offset == 0 and count is None:  # the same array (`_kept_carries`)
            return
        if self._emit is not None:
            self._emit.copy(dst, src, dest_offset, count)
        elif count is None:
            wp.copy(dst, src, dest_offset=dest_offset)
        else:
            wp.copy(dst, src, dest_offset=dest_offset, count=count)

    def recorded(self, direction: str) -> bool:
        """Whether ``direction`` ("forward", "reverse") runs as a native table recorded already:
        a call then touches only this loop's own buffers and tables (`loop_program` may run
        several such loops at once)."""
        table = self._tables.get(direction)
        return table is not None and table.ok

    def _native(self, direction: str, arrays: list[wp.array], steps: Any, pool: bool = True) -> bool:
        """Run ``steps(arrays)`` (the step logic of ``direction``) as one native call of its op
        table, recorded at the first call (`loop_native`); False where the loop cannot (its
        plans are CUDA's: their steps are not native entry points), and then nothing ran."""
        if self.device != "cpu":
            return False
        table = self._tables.get(direction)
        if table is None or not table.fits(arrays):
            table = NativeSteps(arrays)
            self._emit = table
            try:
                steps(arrays)
            finally:
                self._emit = None
            table.finish()
            self._tables[direction] = table
        if not table.ok:
            return False
        table.run(arrays, pool)
        return True

    def _check(self, program: Any, ws: Any) -> None:
        if ws is not None:
            program.checkpoint(f"loop {self.node.name!r}", ws)

    @staticmethod
    def _begin(*spaces: Any) -> None:
        for ws in spaces:
            if ws is not None:
                ws.clear_status()

    # -- the node --
    def forward(self, arrays: list[wp.array], pool: bool = True) -> wp.array:
        """The packed results of ``scan`` on its input arrays (flat). ``pool=False``: the native
        table runs on the calling thread alone (other loops run beside it), the same bits."""
        self.ready()
        start = time.perf_counter()
        self._begin(self.fwd_ws)
        if not self._native("forward", arrays, self._forward_steps, pool):
            self._forward_steps(arrays)
        self._check(self.body, self.fwd_ws)
        self.seconds = time.perf_counter() - start
        return self.packed

    def _destinations(self) -> list[list[wp.array]]:
        """Where forward step ``i`` writes ``c_{i+1}``: the packed result's final carries at the
        last step, a kept step's own arrays, else the two pool buffers in turn (so never the
        step's input), where from the second step a passed-through carry is its source's array
        of the step before (`_rotated`). Made once, with the other buffers (`ready`)."""
        a = self.attrs
        final = [
            _view(self.packed, self.result_offsets[k], self.result_offsets[k] + self.results[k].size)
            for k in range(a.carries)
        ]
        out: list[list[wp.array]] = []
        at = 1  # at: the pool buffer holding the carry
        for i in range(a.length - 1):
            if i + 1 in self.kept:
                out.append(self.kept[i + 1])
            else:
                at ^= 1
                out.append(self._rotated(self.pool[at], out[-1]) if out and self.through else self.pool[at])
        return [*out, final]

    def _rotated(self, row: list[wp.array], prior: list[wp.array]) -> list[wp.array]:
        """``row`` with each passed-through carry ``k`` taking carry ``m``'s array of ``prior``
        (the step's input: the same values, so the step copies nothing for it), and each other
        carry the first pool array of its size that neither ``prior`` nor the row holds (the
        pool arrays the shared carries leave free: a leapfrog's fields rotate over three)."""
        a = self.attrs
        out: list[wp.array | None] = [prior[self.through[k]] if k in self.through else None for k in range(a.carries)]
        used = _pointers([*prior, *(x for x in out if x is not None)])
        for j in range(a.carries):
            if out[j] is not None:
                continue
            size = self.in_types[j].size
            mates = [k for k in (j, *sorted(self.through)) if self.in_types[k].size == size]
            spare = [self.pool[b][k] for k in mates for b in (0, 1)]
            out[j] = _first_free((row[j], *spare), used)  # prior holds 2 of them at most
        return out  # type: ignore[return-value]

    def last_carry(self, initial: list[wp.array]) -> list[wp.array]:
        """The arrays holding ``c_{length-1}`` after a forward (``initial``: ``c_0``, the loop's
        input): a reverse that starts there reads them before the next forward writes them."""
        self.ready()
        return list(self.destinations[-2]) if self.attrs.length > 1 else initial

    def _forward_steps(self, arrays: list[wp.array]) -> None:
        a = self.attrs
        carry = list(arrays[: a.carries])
        for i, into in enumerate(self.destinations):
            ys = {}
            for k, value in self.direct.items():  # each y straight into its row of the packed result
                if k >= a.carries:
                    row = self.results[k].size // a.length
                    start = self.result_offsets[k] + i * row
                    ys[value] = _view(self.packed, start, start + row)
            self._step(carry, arrays, i, into, ys)
            for k in range(a.carries, len(self.results)):
                if k not in self.direct:
                    row = self.results[k].size // a.length
                    y = self.fwd_plan.output_array(self.body_outputs[k], self.fwd_ws).flatten()
                    self._copy(self.packed, y, dest_offset=self.result_offsets[k] + i * row, count=row)
            carry = into

    def reverse(self, arrays: list[wp.array], pool: bool = True) -> wp.array:
        """The packed gradients of ``scan_vjp`` (inputs: the scan's, then its cotangent);
        ``pool`` as `forward`'s."""
        self.ready()
        start = time.perf_counter()
        self._begin(self.fwd_ws, self.vjp_ws)
        if not self._native("reverse", arrays, self._reverse_steps, pool):
            self._reverse_steps(arrays)
        self._check(self.body, self.fwd_ws)
        if self.vjp is not None:
            self._check(self.vjp, self.vjp_ws)
        self.seconds = time.perf_counter() - start
        return self.grads

    def _reverse_steps(self, arrays: list[wp.array]) -> None:
        a = self.attrs
        gy = arrays[-1]
        forward = arrays[:-1]
        self.sums = dict(self.zeros)  # read only: each step writes the new sum into `sum_pool`
        g_carry = [
            _view(gy, self.result_offsets[k], self.result_offsets[k] + self.results[k].size) for k in range(a.carries)
        ]
        initial = list(forward[: a.carries])  # slot 0 always holds c_0: the input itself, never copied
        if self.source is not None and self.stores_every_carry():  # the forward kept c_i for every step i
            kept = {0: initial, **self.source.kept}
            for i in range(a.length - 1, -1, -1):
                g_carry = self._reverse_step(kept[i], forward, g_carry, gy, i)
            self._finish(g_carry)
            return
        carry = initial
        actions = self.schedule.actions
        if self.source is not None:  # the forward ran the first sweep: it kept the slots and c_{length-1}
            actions = actions[self.sweep.actions :]
            carry = self.source.last_carry(initial)
        for act in actions:
            if act.kind == "store" and act.slot > 0:
                carry = self._store(carry, self.slots[act.slot - 1])
            elif act.kind == "restore":
                carry = initial if act.slot == 0 else list(self.slots[act.slot - 1])
            elif act.kind == "advance":
                for i in range(act.at, act.at + act.count):
                    into = self._spares(carry, g_carry, shared=True)
                    self._step(carry, forward, i, into, {})
                    carry = into
            elif act.kind == "reverse":
                g_carry = self._reverse_step(carry, forward, g_carry, gy, act.at)
        self._finish(g_carry)

    def _spares(self, carry: list[wp.array], g_carry: list[wp.array], shared: bool) -> list[wp.array]:
        """Where a reverse-sweep step writes its new carries (``shared``: a recomputed forward
        step) or cotangents: per carry, a step buffer of its type that holds neither ``carry``
        nor ``g_carry`` (the three buffers a carry has suffice: at most two are live). A
        recomputed step's passed-through carry takes its source's array instead (the same
        values, read only: no copy a step), as the forward rotates them (`_rotated`)."""
        busy = _pointers([*carry, *g_carry])
        out: list[wp.array] = []
        for k in range(self.attrs.carries):
            if shared and k in self.through:
                out.append(carry[self.through[k]])
                continue
            kind = (self.in_types[k].dtype, self.in_types[k].size)
            mates = [
                x
                for row in self.pool
                for j, x in enumerate(row)
                if (self.in_types[j].dtype, self.in_types[j].size) == kind
            ]
            out.append(_first_free(mates, busy))
        return out

    def _store(self, carry: list[wp.array], slot: list[wp.array]) -> list[wp.array]:
        """Copy ``carry`` into ``slot`` and return the slot's arrays, now the carry. A carry
        may share an array with the slot (a passed-through carry of a step recomputed from
        it): each copy runs once no other pending copy reads its destination (the copies of
        a carry of buffers shared this way have no cycle: a passed-through carry only reads)."""
        pending = [(slot[k], carry[k]) for k in range(self.attrs.carries) if slot[k].ptr != carry[k].ptr]
        while pending:
            k = next(n for n, (dst, _) in enumerate(pending) if all(src.ptr != dst.ptr for _, src in pending))
            dst, src = pending.pop(k)
            self._copy(dst, src)
        return list(slot)

    def _finish(self, g_carry: list[wp.array]) -> None:
        """Pack the initial carries' and the closures' gradients."""
        a = self.attrs
        for k in range(a.carries):
            self._copy(self.grads, g_carry[k], dest_offset=self.grad_offsets[k], count=self.in_types[k].size)
        for k, total in self.sums.items():
            self._copy(self.grads, total, dest_offset=self.grad_offsets[k], count=total.shape[0])

    def _reverse_step(
        self, carry: list[wp.array], forward: list[wp.array], g_carry: list[wp.array], gy: wp.array, i: int
    ) -> list[wp.array]:
        """Step ``i``'s vjp on ``carry`` and the cotangent ``g_carry``; returns the new
        cotangent, written into step buffers that hold neither (`_spares`)."""
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
                bound[self.ct_names[name]] = _view(gy, start, start + row)
        targets = dict(enumerate(self._spares(carry, g_carry, shared=False)))
        for k, pair in self.sum_pool.items():
            targets[k] = pair[1] if self.sums[k] is pair[0] else pair[0]
        for j in range(a.xs):
            k = a.carries + j
            if k in self.grad_offsets:
                row = self.in_types[k].size // a.length
                start = self.grad_offsets[k] + i * row
                targets[k] = _view(self.grads, start, start + row)
        for k, value in self.vjp_direct.items():
            bound[value] = targets[k]
        plan, ws = self.vjp_plan, self.vjp_ws
        assert plan is not None and ws is not None  # a scan_vjp node's loop
        self._run(plan, bound, ws)
        for k, target in targets.items():
            if k not in self.vjp_direct:
                self._copy(target, plan.output_array(self.grad_outputs[self._name(k)], ws).flatten())
        for k in self.sums:
            self.sums[k] = targets[k]
        return [targets[k] for k in range(a.carries)]

    def _name(self, k: int) -> str:
        """The body input standing for loop input ``k`` (`dpt_ir.ops.loop.body_input`)."""
        return body_input(self.attrs, k)


def _pointers(arrays: list[wp.array]) -> set[int]:
    """The data pointers of ``arrays`` (a zero-size array has none: it holds no memory)."""
    return {x.ptr for x in arrays if x.ptr}


def _first_free(candidates: Sequence[wp.array], busy: set[int]) -> wp.array:
    """The first of ``candidates`` whose memory no array of ``busy`` holds (a zero-size array
    holds none, so it is always free); its pointer is added to ``busy``."""
    pick = next(x for x in candidates if not x.ptr or x.ptr not in busy)
    if pick.ptr:
        busy.add(pick.ptr)
    return pick

"""Compiled programs of graphs that hold loops (``scan`` / ``scan_vjp`` nodes).

Assumes: ``graph`` is valid; its loop nodes are ops of kind ``loop`` (`dpt_ir.ops.loop`).

Guarantees:
- the body of each loop is compiled **once**, through the ordinary pipeline, as two
  programs: its forward (the body graph) and its vjp (the body's joint graph from the
  derivative table, reduced to its gradient outputs). Neither depends on ``length``, so
  compile time and the generated kernels do not either;
- the graph around the loops (forward, and for ``value_and_grad`` the joint graph from
  `dpt_ir.autodiff`, whose loops' gradients are ``scan_vjp`` nodes) is cut at the loop
  nodes into segments of ordinary nodes, each compiled as a forward-only program;
- a loop launches its body's kernels ``length`` times: carries ping-pong between the
  output buffers of two workspaces of the body's plan (no per-step copy), ``xs`` are read
  as per-step views of the stacked arrays, each ``y`` is copied into the packed result at
  its step's offset. The reverse replays the node's checkpoint schedule
  (`dpt_ir.revolve`, the interpreter's), storing carries in ``slots`` preallocated
  arrays, running the vjp program at each ``reverse`` action; closed-over gradients are
  accumulated in reverse step order (deterministic, bit-identical for every policy);
- every segment and body plan checks its status word after it runs (`NumericalError`);
- evaluations of one `LoopProgram` are serialised by a lock (its loop buffers are shared).
"""

from __future__ import annotations

import hashlib
import json
import threading
import time
from pathlib import Path
from typing import Any

import numpy as np
import warp as wp

from dpt_ir.autodiff import joint_graph
from dpt_ir.contracts import check_inputs
from dpt_ir.errors import ContractError
from dpt_ir.graph import Graph, Input, Node, Output
from dpt_ir.ops.loop import ScanAttrs, body_vjp, checkpoint_plan, grad_layout, result_types
from dpt_ir.types import TensorType, is_float

WP_TYPES = {"float32": wp.float32, "float64": wp.float64, "int32": wp.int32, "uint8": wp.uint8, "bool": wp.bool}


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


def vjp_piece(a: ScanAttrs) -> Graph:
    """The body's joint graph reduced to its gradient outputs: the vjp program's graph."""
    joint = body_vjp(a.body)
    grads = set(joint.meta["gradients"].values())
    outputs = tuple(o for o in joint.outputs if o.name in grads)
    return Graph(name=f"{a.body.name}.vjp", inputs=joint.inputs, nodes=joint.nodes, outputs=outputs)


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
        self.packed = wp.zeros(sum(t.size for t in self.results), dtype=WP_TYPES[dtype], device=self.device)
        layout = grad_layout(self.in_types)
        self.grad_offsets = {k: off for k, off, _ in layout}
        self.grads = wp.zeros(sum(size for _, _, size in layout), dtype=WP_TYPES[dtype], device=self.device)
        self.iota = wp.array(np.arange(a.length, dtype=np.int32), dtype=wp.int32, device=self.device)
        plan = checkpoint_plan(a, self.in_types)
        self.schedule = plan
        self.slots: list[list[wp.array]] = []  # a scan_vjp's stored carries, allocated at its first run
        # A scan whose reverse stores every carry keeps them as it runs (see `keep`); that
        # reverse (``source``) then reads them instead of rerunning the forward.
        self.trajectory: list[list[wp.array]] = []
        self.source: Loop | None = None
        closures = range(a.carries + a.xs, len(self.in_types))
        self.accumulators = {
            k: wp.zeros(self.in_types[k].size, dtype=WP_TYPES[dtype], device=self.device)
            for k in closures
            if is_float(self.in_types[k].dtype)
        }
        if self.accumulators:  # built now, so that no launch compiles
            from dpt_ir.backends.warp import static_kernels
            from dpt_ir.backends.warp.module import load
            from dpt_ir.backends.warp.quiet import quiet_warp

            load(static_kernels, self.device, "static_kernels", None, purge=False)
            acc = next(iter(self.accumulators.values()))
            with quiet_warp():  # the accumulate overload of this dtype: 0 += 0
                wp.launch(static_kernels.accumulate, dim=acc.shape[0], inputs=[acc, acc], device=self.device)
        self.fwd_plan = self.body.plans["run"]
        self.fwd_ws = [self.fwd_plan.checkout(), self.fwd_plan.checkout()]
        self.vjp_plan = self.vjp.plans["run"] if self.vjp is not None else None
        self.vjp_ws = [self.vjp_plan.checkout(), self.vjp_plan.checkout()] if self.vjp_plan is not None else []

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
        for i in range(a.length):
            ws = self.fwd_ws[i % 2]
            carry = self._advance(carry, arrays, i, i % 2)
            if self.trajectory and i + 1 < a.length:
                for dst, src in zip(self.trajectory[i], carry, strict=True):
                    wp.copy(dst, src)
            for j in range(len(self.results) - a.carries):
                t = self.results[a.carries + j]
                row = t.size // a.length
                y = self.fwd_plan.output_array(self.body_outputs[a.carries + j], ws).flatten()
                wp.copy(self.packed, y, dest_offset=self.result_offsets[a.carries + j] + i * row, count=row)
        for k in range(a.carries):
            wp.copy(self.packed, carry[k], dest_offset=self.result_offsets[k], count=self.results[k].size)
        self._check(self.body, self.fwd_ws)
        return self.packed

    def reverse(self, arrays: list[wp.array]) -> wp.array:
        """The packed gradients of ``scan_vjp`` (inputs: the scan's, then its cotangent)."""
        a = self.attrs
        gy = arrays[-1]
        forward = arrays[:-1]
        self._begin(self.fwd_ws + self.vjp_ws)
        for acc in self.accumulators.values():
            acc.zero_()
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
        for k, acc in self.accumulators.items():
            wp.copy(self.grads, acc, dest_offset=self.grad_offsets[k], count=acc.shape[0])
        self._check(self.body, self.fwd_ws)
        if self.vjp is not None:
            self._check(self.vjp, self.vjp_ws)
        return self.grads

    def _reverse_step(
        self, carry: list[wp.array], forward: list[wp.array], gy: wp.array, g_carry: list[wp.array], i: int, vt: int
    ) -> list[wp.array]:
        from dpt_ir.backends.warp import static_kernels

        a = self.attrs
        bound = self._feed(carry, forward, i)
        for k, name in enumerate(self.body_outputs):
            if k < a.carries:
                bound[self.ct_names[name]] = g_carry[k]
            else:
                row = self.results[k].size // a.length
                start = self.result_offsets[k] + i * row
                bound[self.ct_names[name]] = gy[start : start + row]
        ws, plan = self.vjp_ws[vt], self.vjp_plan
        assert plan is not None  # a scan_vjp node's loop has its vjp program
        plan.run("forward", bound, ws)

        def grad(k: int) -> wp.array:
            name = self.names[k] if k < a.carries + a.xs else self.names[k + (1 if a.index else 0)]
            return plan.output_array(self.grad_outputs[name], ws).flatten()

        for j in range(a.xs):
            k = a.carries + j
            if k in self.grad_offsets:
                row = self.in_types[k].size // a.length
                wp.copy(self.grads, grad(k), dest_offset=self.grad_offsets[k] + i * row, count=row)
        for k, acc in self.accumulators.items():
            src = grad(k)
            wp.launch(static_kernels.accumulate, dim=acc.shape[0], inputs=[acc, src], device=self.device)
        return [grad(k) for k in range(a.carries)]


class Segments:
    """A graph cut at its loop nodes: forward-only programs of the ordinary nodes between
    them, and a `Loop` per loop node, run in order on flat arrays keyed by value name."""

    def __init__(self, graph: Graph, prefix: str) -> None:
        """Cut ``graph``; its segments' pieces are named ``<prefix>.seg<k>``. Nothing is
        compiled until `bind`."""
        self.graph = graph
        self.prefix = prefix
        self.layout: list[tuple[str, Graph | Node]] = []
        self.stages: list[tuple[str, Any, Graph | Node]] = []
        reads_after = _later_reads(graph)
        pending: list[Node] = []
        for k, node in enumerate(graph.nodes):
            if node.opdef.kind != "loop":
                pending.append(node)
                continue
            self._flush(pending, reads_after[k])
            check_loop_dtypes(node, tuple(graph.types[i] for i in node.inputs))
            self.layout.append(("loop", node))
            pending = []
        self._flush(pending, reads_after[len(graph.nodes)])

    def _flush(self, nodes: list[Node], later: set[str]) -> None:
        if not nodes:
            return
        defined = {n.name for n in nodes}
        outputs = [v for v in dict.fromkeys(n.name for n in nodes) if v in later]
        if not outputs:
            return
        needed = dict.fromkeys(i for n in nodes for i in n.inputs if i not in defined)
        inputs = tuple(Input(name=v, type=self.graph.types[v], requires_grad=False) for v in needed)
        seg = Graph(
            name=f"{self.prefix}.seg{len(self.layout)}",
            inputs=inputs,
            nodes=tuple(nodes),
            outputs=tuple(Output(name=v, value=v) for v in outputs),
        )
        self.layout.append(("segment", seg))

    def pieces(self) -> dict[str, Graph]:
        """The graphs to compile: the segments, each loop's body and each reverse's body vjp."""
        out: dict[str, Graph] = {}
        for kind, what in self.layout:
            if kind == "segment":
                out[what.name] = what  # type: ignore[assignment]
                continue
            a: ScanAttrs = what.opdef.parse_attrs(what.attrs, f"node {what.name!r}")  # type: ignore[union-attr,assignment]
            inner = [n.name for n in a.body.nodes if n.opdef.kind == "loop"]
            if inner:
                raise ContractError(
                    f"compile: node {what.name!r}: its body holds loop node(s) {inner}; compiled loops expect a "
                    "body without loops (nested loops run in the interpreter: dp.interpret, dp.interpret_grad)"
                )
            body, vjp = piece_names(a)
            out[body] = a.body
            if what.op == "scan_vjp":  # type: ignore[union-attr]
                out[vjp] = vjp_piece(a)
        return out

    def bind(self, programs: dict[str, Any], device: str) -> None:
        """Make the stages from the compiled pieces."""
        scans: dict[tuple[str, ...], Loop] = {}  # scan stages by their inputs
        for kind, what in self.layout:
            if kind == "segment":
                self.stages.append(("segment", programs[what.name], what))
                continue
            node: Node = what  # type: ignore[assignment]
            in_types = tuple(self.graph.types[i] for i in node.inputs)
            loop = Loop(node, in_types, programs, device)
            forward = scans.get(node.inputs[:-1]) if node.op == "scan_vjp" else None
            if forward is not None and loop.schedule.slots == loop.schedule.length:
                forward.keep()  # store-every-carry: the forward keeps them, the reverse reruns nothing
                loop.source = forward
            if node.op == "scan":
                scans[node.inputs] = loop
            self.stages.append(("loop", loop, node))

    def run(self, env: dict[str, wp.array], held: list[tuple[Any, Any]]) -> None:
        """Evaluate every stage, adding each value later stages read to ``env``; the
        segment workspaces used are appended to ``held`` (the caller checks them in)."""
        for kind, runner, what in self.stages:
            if kind == "segment":
                plan = runner.plans["run"]
                ws = plan.checkout()
                held.append((plan, ws))
                if ws.status is not None:
                    ws.status.zero_()
                plan.run("forward", {i.name: env[i.name] for i in what.inputs}, ws)
                runner.checkpoint("forward", ws)
                for o in what.outputs:
                    env[o.value] = plan.output_array(o.name, ws).flatten()
            else:
                arrays = [env[i] for i in what.inputs]
                env[what.name] = runner.forward(arrays) if what.op == "scan" else runner.reverse(arrays)


def saved_text(loops: list[dict[str, Any]]) -> str:
    """``saved.txt`` of a loop program: what each reverse sweep holds and recomputes (the
    pieces' own ``saved.txt`` are in their dump folders)."""
    lines = ["# loops: what each reverse sweep (scan_vjp) holds and recomputes"]
    for r in loops:
        if r["op"] != "scan_vjp":
            continue
        lines += [
            f"{r['node']}: {r['length']} steps, policy: {r['policy']}",
            f"  holds {r['slots']} stored carries = {r['bytes_held']} bytes "
            f"(plus the current carry and its cotangent, each in two ping-pong buffers)",
            f"  recomputes {r['advances']} forward steps to rebuild carries: "
            f"recompute factor {r['recompute_factor']:.3f} "
            "(forward steps rerun / length; each step's vjp also runs its step's forward once)",
        ]
    return "\n".join(lines) + "\n"


def _later_reads(graph: Graph) -> list[set[str]]:
    """For each node position k (and len(nodes)), the values read by nodes at k or later,
    or returned as outputs."""
    out: list[set[str]] = [set() for _ in range(len(graph.nodes) + 1)]
    acc = {o.value for o in graph.outputs}
    out[len(graph.nodes)] = set(acc)
    for k in range(len(graph.nodes) - 1, -1, -1):
        acc = acc | set(graph.nodes[k].inputs)
        out[k] = acc
    return out


class LoopProgram:
    """A compiled graph with loops: `run` and `value_and_grad` as `dpt_ir.runtime.Program`'s.
    Tape passes are not offered (yet): ``tape_pass`` raises ContractError."""

    def __init__(
        self,
        graph: Graph,
        wrt: tuple[str, ...],
        loss: str | None,
        options: dict[str, Any],
        dump_dir: Path | None = None,
    ) -> None:
        from dpt_ir.compiler import compile_pieces

        start = time.perf_counter()
        self.graph, self.wrt, self.loss = graph, wrt, loss
        self.device = options["device"]
        self.forward = Segments(graph, "run")
        self.joint: Segments | None = None
        if wrt and loss is not None:
            self.joint = Segments(joint_graph(graph, wrt, [loss]), "vg")
        cuts = [self.forward] + ([self.joint] if self.joint else [])
        pieces = {name: g for cut in cuts for name, g in cut.pieces().items()}
        base = {k: v for k, v in options.items() if k != "device"}
        programs = compile_pieces(graph.name, pieces, self.device, base, dump_dir)
        for cut in cuts:
            cut.bind(programs, self.device)
        self._lock = threading.Lock()
        modules = sorted({p.module_name for p in programs.values()})
        # Generated kernels (Warp kernel definitions) in the program's module.
        self.kernel_count = len({k.function for p in programs.values() for k in p.plans["run"].kernels})
        self.report = {
            "graph": graph.name,
            "device": self.device,
            "compile_seconds": time.perf_counter() - start,
            "modules": modules,
            "distinct_kernels": self.kernel_count,
            "loops": self._loops_report(),
        }
        if dump_dir is not None:
            dump_dir.mkdir(parents=True, exist_ok=True)
            (dump_dir / "saved.txt").write_text(saved_text(self.report["loops"]))
            (dump_dir / "report.json").write_text(json.dumps(self.report, indent=2, sort_keys=True))

    def _loops_report(self) -> list[dict[str, Any]]:
        out = []
        for seg in [self.forward] + ([self.joint] if self.joint else []):
            for kind, runner, node in seg.stages:
                if kind == "loop":
                    out.append(
                        {
                            "node": node.name,
                            "op": node.op,
                            "length": runner.schedule.length,
                            **runner.held(),
                            "body_kernels": len(runner.fwd_plan.launches),
                            "vjp_kernels": len(runner.vjp_plan.launches) if runner.vjp_plan else 0,
                        }
                    )
        return out

    def _evaluate(self, segments: Segments, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env = {
            k: wp.array(np.ascontiguousarray(v).reshape(-1), dtype=WP_TYPES[v.dtype.name], device=self.device)
            for k, v in values.items()
        }
        held: list[tuple[Any, Any]] = []
        try:
            segments.run(env, held)
            g = segments.graph
            return {o.name: env[o.value].numpy().reshape(g.types[o.value].shape).copy() for o in g.outputs}
        finally:
            for plan, ws in held:
                plan.checkin(ws)

    def run(self, **inputs: Any) -> dict[str, np.ndarray]:
        """Forward only: a dict output name -> numpy array."""
        checked = check_inputs(self.graph, inputs)
        with self._lock:
            return self._evaluate(self.forward, checked)

    def value_and_grad(self, **inputs: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """Outputs and the gradients of the loss output (seeded with 1) wrt ``wrt``."""
        if self.joint is None:
            raise ContractError(
                f"program {self.graph.name!r} was compiled without wrt or without a loss output; "
                "pass wrt=[...] (and loss= when the graph has no single scalar float output) to compile"
            )
        checked = check_inputs(self.graph, inputs)
        joint = self.joint.graph
        ct = joint.meta["cotangents"][self.loss]
        seed = np.ones(joint.types[ct].shape, dtype=joint.types[ct].dtype)
        with self._lock:
            results = self._evaluate(self.joint, {**checked, ct: seed})
        grads = joint.meta["gradients"]
        outs = {o.name: results[o.name] for o in self.graph.outputs}
        return outs, {w: results[grads[w]] for w in self.wrt}

    def tape_pass(self, tape: Any = None) -> Any:
        raise ContractError(
            f"program {self.graph.name!r} holds a loop: tape passes of loop programs are not supported yet; "
            "use run or value_and_grad"
        )

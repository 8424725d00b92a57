"""Compiled programs of graphs that hold loops (``scan`` / ``scan_vjp`` nodes).

Assumes: ``graph`` is valid; its loop nodes are ops of kind ``loop`` (`dpt_ir.ops.loop`),
without loops in their bodies.

Guarantees:
- the graph (forward for ``run``; for ``value_and_grad`` the joint graph from
  `dpt_ir.api.autodiff`, whose loops' gradients are ``scan_vjp`` nodes) is cut at the loop
  nodes into segments of ordinary nodes (`Segments`); every segment, every distinct loop
  body and every body vjp (the body's joint graph reduced to its gradient outputs) is
  compiled through the ordinary pipeline as a forward-only program, all in **one** Warp
  module (`dpt_ir.driver.compile.compile_pieces`). Nothing depends on a loop's ``length``, so
  neither compile time nor the generated kernels do;
- a loop is its own stage (`dpt_ir.runtime.loop.Loop`): fusion never sees it;
- every segment checks its status word after it runs (`NumericalError`);
- evaluations of one `LoopProgram` are serialised by a lock (its loop buffers are shared);
- with ``dump_dir``: ``saved.txt`` (each reverse's policy, bytes held and recompute
  factor), ``report.json`` and each piece's pass dumps.
"""

from __future__ import annotations

import concurrent.futures
import json
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import warp as wp

from dpt_ir.api.autodiff import joint_graph
from dpt_ir.ir import records
from dpt_ir.ir.contracts import check_inputs
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, Input, Node, Output
from dpt_ir.ops.loop import ScanAttrs
from dpt_ir.runtime import loop_derived
from dpt_ir.runtime.loop import Loop
from dpt_ir.runtime.loop_pieces import check_loop_dtypes, live_values, piece_names, unread_gradients, vjp_piece
from dpt_ir.runtime.loop_tape import LoopTapePass, PassLock, tape_graph
from dpt_ir.runtime.plan import WP_DTYPES
from dpt_ir.runtime.report import LoopCost, LoopProgramReport, LoopRow


class PieceCompiler(Protocol):
    """The driver's compile of piece graphs (name -> graph) into forward-only programs."""

    def __call__(
        self, title: str, pieces: dict[str, Graph], dev: str, base: dict[str, Any], out_dir: Path | None
    ) -> dict[str, Any]: ...


class Segments:
    """A graph cut at its loop nodes: forward-only programs of the ordinary nodes between
    them, and a `Loop` per loop node, run in order on flat arrays keyed by value name."""

    def __init__(
        self, graph: Graph, prefix: str, cut: int | None = None, prune: bool = False, threads: int = 1
    ) -> None:
        """Cut ``graph``; its segments' pieces are named ``<prefix>.seg<k>``. With ``cut``,
        the graph is also cut before node position ``cut``, and `split` is the first stage
        after it. ``prune`` (a first-order joint graph, whose only gradient outputs are of
        inputs that require one): each reverse loop's vjp leaves out the gradients no output
        reads (`unread_gradients`). ``threads``: how many independent loops next to each other
        (`dpt_ir.passes.loop_batches`' loops, one per batch element) may run at once. Nothing is
        compiled until `bind`. Without ``cut``, the nodes run in `loops_together` order."""
        graph = graph if cut is not None else loops_together(graph)
        self.graph = graph
        self.prefix = prefix
        self.threads = threads
        self.unread: dict[str, frozenset[str]] = {}  # scan_vjp node -> body inputs whose gradient is unread
        live = live_values(graph) if prune else None
        self.layout: list[tuple[str, Graph | Node]] = []
        self.stages: list[tuple[str, Any, Graph | Node]] = []
        self.split = 0
        reads_after = _later_reads(graph)
        pending: list[Node] = []
        for k, node in enumerate(graph.nodes):
            if k == cut:
                self._flush(pending, reads_after[k])
                self.split, pending = len(self.layout), []
            if node.opdef.kind != "loop":
                pending.append(node)
                continue
            self._flush(pending, reads_after[k])
            check_loop_dtypes(node, tuple(graph.types[i] for i in node.inputs))
            if live is not None and node.op == "scan_vjp":
                a = node.opdef.parse_attrs(node.attrs, f"node {node.name!r}")
                self.unread[node.name] = unread_gradients(live, node, a)  # type: ignore[arg-type]
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
            unread = self.unread.get(what.name, frozenset())  # type: ignore[union-attr]
            body, vjp = piece_names(a, unread)
            out[body] = a.body
            if what.op == "scan_vjp":  # type: ignore[union-attr]
                out[vjp] = vjp_piece(a, unread)
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
            loop = Loop(node, in_types, programs, device, self.unread.get(node.name, frozenset()))
            forward = scans.get(node.inputs[:-1]) if node.op == "scan_vjp" else None
            if forward is not None:
                forward.keep(loop)  # the carries the reverse would rebuild first: it reads them instead
            if node.op == "scan":
                scans[node.inputs] = loop
            self.stages.append(("loop", loop, node))

    def run(
        self, env: dict[str, wp.array], held: list[tuple[Any, Any]], start: int = 0, stop: int | None = None
    ) -> None:
        """Evaluate stages ``start:stop`` (every stage by default), adding each value later
        stages read to ``env``; the segment workspaces used are appended to ``held`` (the
        caller checks them in)."""
        stages = self.stages[start:stop]
        k = 0
        while k < len(stages):
            kind, runner, what = stages[k]
            if kind == "segment":
                plan = runner.plans["run"]
                ws = plan.checkout()
                held.append((plan, ws))
                ws.clear_status()
                plan.run("forward", {i.name: env[i.name] for i in what.inputs}, ws)
                runner.checkpoint("forward", ws)
                for o in what.outputs:
                    env[o.value] = plan.output_array(o.name, ws).flatten()
                k += 1
                continue
            group = self._independent(stages, k)
            if len(group) > 1:
                run_side_by_side(group, env, self.threads)
            else:
                env[what.name] = _result(runner, what, env)
            k += len(group)

    def _independent(self, stages: list[tuple[str, Any, Any]], k: int) -> list[tuple[Any, Node]]:
        """The loop stages from ``k`` on that read none of one another's results (at most one
        without threads, or before every loop of the run has its native table recorded: the
        first call records them one at a time)."""
        group: list[tuple[Any, Node]] = []
        made: set[str] = set()
        for kind, runner, node in stages[k:]:
            if kind != "loop" or made & set(node.inputs) or (group and not self._concurrent(group, runner, node)):
                break
            group.append((runner, node))
            made.add(node.name)
        return group

    def _concurrent(self, group: list[tuple[Any, Node]], runner: Any, node: Node) -> bool:
        def ready(r: Any, n: Node) -> bool:
            return bool(r.recorded("forward" if n.op == "scan" else "reverse"))

        return self.threads > 1 and all(ready(r, n) for r, n in [*group, (runner, node)])


def run_side_by_side(group: list[tuple[Any, Node]], env: dict[str, wp.array], threads: int) -> None:
    """Run independent loops on ``threads`` threads at once (each replays its own native table,
    in its own buffers, with the GIL released, its split launches' parts in order on its own
    thread: the same bits), their results put in ``env`` in stage order; an error is the
    earliest stage's, as when they run one after another."""
    with concurrent.futures.ThreadPoolExecutor(max_workers=min(threads, len(group))) as pool:
        # Each loop on its own thread only: the threads are taken by the loops themselves.
        futures = [pool.submit(_result, runner, node, env, False) for runner, node in group]
    for (_, node), future in zip(group, futures, strict=True):
        env[node.name] = future.result()


def _result(runner: Any, node: Node, env: dict[str, wp.array], pool: bool = True) -> wp.array:
    """The packed result of loop ``node`` (a scan's outputs, a scan_vjp's gradients)."""
    arrays = [env[i] for i in node.inputs]
    return runner.forward(arrays, pool) if node.op == "scan" else runner.reverse(arrays, pool)


def loops_together(graph: Graph) -> Graph:
    """``graph`` with its nodes reordered so that loops that do not read one another's results
    stand next to each other (one stage after the other, which `Segments.run` may run at once):
    nodes sorted, stably, by how many loops lie on the longest path to them, each loop before
    the ordinary nodes of its depth. A topological order: a reader is never sorted before what it
    reads (a loop adds one to the depth, and an ordinary node sorts after the loops of its depth)."""
    depth: dict[str, int] = {}
    keys: dict[str, int] = {}
    for node in graph.nodes:
        loop = node.opdef.kind == "loop"
        d = max((depth.get(i, 0) for i in node.inputs), default=0) + int(loop)
        depth[node.name] = d
        keys[node.name] = 2 * d - 1 if loop else 2 * d
    ordered = sorted(graph.nodes, key=lambda n: keys[n.name])  # stable: ties keep the graph's order
    if [n.name for n in ordered] == [n.name for n in graph.nodes]:
        return graph
    return graph.replace(nodes=tuple(ordered))


def saved_text(loops: tuple[LoopRow, ...], costs: tuple[LoopCost, ...] = ()) -> str:
    """``saved.txt`` of a loop program: what each reverse sweep holds and recomputes (the
    pieces' own ``saved.txt`` are in their dump folders), and, once measured (``costs``, the
    second ``value_and_grad``'s), what its sweep and the rebuilding of carries cost."""
    lines = ["# loops: what each reverse sweep (scan_vjp) holds and recomputes"]
    measured = {c.node: c for c in costs}
    for r in loops:
        if r.op != "scan_vjp":
            continue
        lines += [
            f"{r.node}: {r.length} steps, policy: {r.policy}",
            f"  holds {r.slots} stored carries = {r.bytes_held} bytes "
            f"(the first is the initial carry itself); with the step buffers (the current carry, the next "
            f"one and the cotangent, sharing three) it owns {r.carry_bytes_held} bytes of carries "
            f"and cotangents, plus {r.workspace_bytes} bytes of the body's own workspaces"
            + (f"; it reads the {r.kept_bytes} bytes of carries the forward kept" if r.kept_bytes is not None else "")
            + (" (its stored carries past the first)" if r.kept_bytes is not None and r.advances else ""),
            f"  recomputes {r.advances} forward steps to rebuild carries: "
            f"recompute factor {r.recompute_factor:.3f} "
            "(forward steps rerun / length; each step's vjp also runs its step's forward once)",
        ]
        c = measured.get(r.node)
        if c is not None and c.seconds is not None and c.seconds_per_step is not None:
            line = f"  measured at the second value_and_grad: this sweep {c.seconds * 1e3:.3f} ms "
            line += f"({c.seconds_per_step * 1e6:.2f} us a step)"
            if c.rerun_seconds is not None:
                line += f", of which rebuilding carries about {c.rerun_seconds * 1e3:.3f} ms "
                line += f"({c.steps_rerun} steps at its forward's measured time a step)"
            lines.append(line)
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
    """A compiled graph with loops: `run`, `value_and_grad` and `tape_pass` as
    `dpt_ir.runtime.program.Program`'s (a `dpt_ir.interop.CompiledProgram`)."""

    def __init__(
        self,
        graph: Graph,
        wrt: tuple[str, ...],
        loss: str | None,
        options: dict[str, Any],
        compile_pieces: PieceCompiler,
        dump_dir: Path | None = None,
        threads: int = 1,
    ) -> None:
        """``compile_pieces``: the driver's compile of a set of piece graphs into forward-only
        programs of one module (`dpt_ir.driver.compile.compile_pieces`), called now for the
        run and value_and_grad pieces and at the first tape pass for the tape's. ``threads``:
        the program's CPU threads (independent loops may run side by side on them)."""
        start = time.perf_counter()
        self.graph, self.wrt, self.loss = graph, wrt, loss
        self.device = options["device"]
        self.threads = threads
        self.forward = Segments(graph, "run", threads=threads)
        self.joint: Segments | None = None
        if wrt and loss is not None:
            self.joint = Segments(joint_graph(graph, wrt, [loss]), "vg", prune=True, threads=threads)
        cuts = [self.forward] + ([self.joint] if self.joint else [])
        pieces = {name: g for cut in cuts for name, g in cut.pieces().items()}
        base = {k: v for k, v in options.items() if k != "device"}
        programs = compile_pieces(graph.name, pieces, self.device, base, dump_dir)
        for cut in cuts:
            cut.bind(programs, self.device)
        self._lock = threading.Lock()
        self._base = base
        self._compile_pieces = compile_pieces
        self._tape: Segments | None = None  # compiled at the first tape_pass
        self._derived: dict[tuple[str, str | None], Segments] = {}  # jvp, hvp, gnvp: compiled at first use
        self._dump_dir = dump_dir
        # value_and_grad calls so far: the second writes its measured costs into saved.txt (the
        # first records the loops' native step tables, a one-time cost).
        self._joint_calls = 0
        self._tape_lock = PassLock()  # held by the open tape pass, from forward to close
        modules = sorted({p.module_name for p in programs.values()})
        self.module_name = "+".join(modules)
        # Generated kernels (Warp kernel definitions) in the program's module.
        self.kernel_count = len({k.function for p in programs.values() for k in p.plans["run"].kernels})
        self._compile_seconds = time.perf_counter() - start
        self._modules = tuple(modules)
        self._report: LoopProgramReport | None = None  # made when first asked: see `report`
        if dump_dir is not None:
            dump_dir.mkdir(parents=True, exist_ok=True)
            (dump_dir / "saved.txt").write_text(saved_text(self.report.loops))
            doc = self.report.model_dump(mode="json", exclude_none=True)
            (dump_dir / "report.json").write_text(json.dumps(doc, indent=2, sort_keys=True))

    @property
    def report(self) -> LoopProgramReport:
        """What the compile made (`LoopProgramReport`). Its loop rows measure the loops' buffers,
        so the first report (or a dump, which writes it at compile) allocates them, as the first
        call would; compiling alone allocates nothing data-sized."""
        if self._report is None:
            self._report = LoopProgramReport(
                graph=self.graph.name,
                device=self.device,
                options=dict(self._base),  # as `Program.report`'s: the switches and budgets every piece compiled with
                compile_seconds=self._compile_seconds,
                modules=self._modules,
                distinct_kernels=self.kernel_count,
                loops=self._loops_report(),
            )
        return self._report

    def __repr__(self) -> str:
        loops = {
            plan: sum(kind == "loop" for kind, _ in seg.layout)
            for plan, seg in (("run", self.forward), ("value_and_grad", self.joint))
            if seg is not None
        }
        return (
            f"LoopProgram({self.graph.name!r}, wrt={list(self.wrt)}, device={self.device!r}, loops={loops}, "
            f"kernels={self.kernel_count})"
        )

    def loop_costs(self) -> tuple[LoopCost, ...]:
        """Each loop node's sweep as last run (`LoopCost`): wall seconds, seconds a step, and
        for a reverse sweep the forward steps it reran and their cost at its forward's
        measured time a step. Before a loop has run, its seconds are None."""
        out = []
        for seg in [self.forward] + ([self.joint] if self.joint else []):
            for kind, runner, node in seg.stages:
                if kind != "loop":
                    continue
                n, s = runner.schedule.length, runner.seconds
                row = {"node": node.name, "op": node.op, "length": n, "seconds": s,
                       "seconds_per_step": None if s is None or not n else s / n}  # fmt: skip
                if node.op == "scan_vjp":
                    rerun = int(runner.held()["advances"])
                    fwd = runner.source.seconds if runner.source is not None else None
                    row.update(steps_rerun=rerun, rerun_seconds=None if fwd is None or not n else rerun * fwd / n)
                out.append(LoopCost(**row))
        return tuple(out)

    def _loops_report(self) -> tuple[LoopRow, ...]:
        out = []
        for seg in [self.forward] + ([self.joint] if self.joint else []):
            for kind, runner, node in seg.stages:
                if kind == "loop":
                    out.append(
                        LoopRow(
                            node=node.name,
                            op=node.op,
                            length=runner.schedule.length,
                            **runner.held(),
                            body_kernels=len(runner.fwd_plan.launches),
                            vjp_kernels=len(runner.vjp_plan.launches) if runner.vjp_plan else 0,
                        )
                    )
        return tuple(out)

    def device_arrays(self, values: dict[str, Any]) -> dict[str, wp.array]:
        """Flat Warp arrays on the program's device of checked inputs (host arrays)."""
        return {
            k: wp.array(np.ascontiguousarray(v).reshape(-1), dtype=WP_DTYPES[v.dtype.name], device=self.device)
            for k, v in values.items()
        }

    def evaluate(self, segments: Segments, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        """The outputs of ``segments`` (one of this program's) for checked host ``values``;
        one evaluation at a time (the loops' buffers are shared)."""
        with self._lock:
            return self._evaluate(segments, values)

    def _evaluate(self, segments: Segments, values: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
        env = self.device_arrays(values)
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
        ct = records.joint_record(joint).cotangents[self.loss]
        seed = np.ones(joint.types[ct].shape, dtype=joint.types[ct].dtype)
        with self._lock:
            results = self._evaluate(self.joint, {**checked, ct: seed})
            self._joint_calls += 1
            if self._dump_dir is not None and self._joint_calls == 2:  # the second call: a steady one
                (self._dump_dir / "saved.txt").write_text(saved_text(self.report.loops, self.loop_costs()))
        grads = records.joint_record(joint).gradients
        outs = {o.name: results[o.name] for o in self.graph.outputs}
        return outs, {w: results[grads[w]] for w in self.wrt}

    def jvp(self, tangents: Any, **inputs: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(outputs, output_tangents)``: per float output, its Jacobian times ``tangents``
        (a dict ``wrt`` input -> array; missing: zero), carried through the loops by tangent scans."""
        return loop_derived.jvp(self, tangents, inputs)

    def hvp(self, vectors: Any, **inputs: Any) -> tuple[dict[str, np.ndarray], ...]:
        """``(outputs, grads, hvps)``: the loss's gradient and its Hessian times ``vectors``."""
        return loop_derived.hvp(self, vectors, inputs)

    def gnvp(self, vectors: Any, output: str, **inputs: Any) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray]]:
        """``(outputs, products)``: ``J_rᵀ (J_r v)`` per ``wrt`` input for residual ``output``."""
        return loop_derived.gnvp(self, vectors, output, inputs)

    def derived_segments(self, kind: str, of: str | None, derive: Callable[[], Graph]) -> Segments:
        """The stages of the ``kind`` plan (gnvp: of output ``of``), the graph ``derive()``
        gives cut and compiled at the first call (`dpt_ir.runtime.loop_derived`)."""
        with self._lock:
            segments = self._derived.get((kind, of))
            if segments is None:
                segments = Segments(derive(), kind, threads=self.threads)
                plan = kind if of is None else f"{kind}-{of}"
                folder = None if self._dump_dir is None else self._dump_dir / plan
                programs = self._compile_pieces(f"{self.graph.name}.{plan}", segments.pieces(), self.device, self._base,
                                               folder)  # fmt: skip
                segments.bind(programs, self.device)
                self._derived[(kind, of)] = segments
        return segments

    def tape_pass(self, tape: Any = None) -> LoopTapePass:
        """A new forward + backward pass (`dpt_ir.runtime.loop_tape.LoopTapePass`):
        forward with the inputs, then ``backward(seed=...)`` with a scalar or array seed per
        output, then ``close``. Its pieces (the joint graph of every float output, cut
        between forward and backward) compile at the first call. One pass is open at a
        time (a pass in another thread waits for it); ``tape=`` (joining a caller's ``wp.Tape``)
        is not offered for loop programs."""
        if not self.wrt:
            raise ContractError(f"program {self.graph.name!r} was compiled without wrt; pass wrt=[...] to compile")
        if tape is not None:
            raise ContractError(
                f"program {self.graph.name!r} holds a loop: its tape pass cannot join a caller's wp.Tape "
                "(tape=...); run program.tape_pass() on its own and seed backward(seed=...) with the cotangents "
                "of its outputs"
            )
        return LoopTapePass(self, self.segments("tape"), self._tape_lock)

    def segments(self, plan: str) -> Segments:
        """The stages of ``plan`` (``run``, ``value_and_grad``, ``tape``: the tape's pieces
        compile at the first call); `dpt_ir.export` reads them to write a loop program's bundle."""
        if plan == "run":
            return self.forward
        if plan == "value_and_grad" and self.joint is not None:
            return self.joint
        if plan != "tape" or not self.wrt:
            raise ContractError(f"program {self.graph.name!r} has no plan {plan!r}")
        with self._lock:
            if self._tape is None:
                joint, cut = tape_graph(self.graph, self.wrt)
                segments = Segments(joint, "tape", cut, threads=self.threads)
                title = f"{self.graph.name}.tape"
                programs = self._compile_pieces(title, segments.pieces(), self.device, self._base, None)
                segments.bind(programs, self.device)
                self._tape = segments
        return self._tape

"""Dump writers: textual IR and Graphviz per pass, the saved-set and fusion tables, and
the JSON report. All of them read only the graph and its typed records
(`dpt_ir.ir.records`, `dpt_ir.ir.kernel_ir`), and, for the kernel sharing part of
``fusion.txt``, plain `SharedKernel` rows the compiler passes in (passes never import the
backend)."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import has_plan, plan_of
from dpt_ir.ir.records import group_of, phase_of, saved_bytes, saved_plan_of, saved_values, wrt_of

if TYPE_CHECKING:
    from dpt_ir.passes.manager import PipelineResult

NL = "\n"
PHASE_COLOURS = {"forward": "#dbe9f6", "backward": "#fde5d2"}


class SharedKernel(pydantic.BaseModel):
    """One launch of a pipeline (``<pipeline>_<group>``, or ``..._final`` for a combine
    kernel) and the generated kernel (``function``) it runs. Launches with one
    ``function`` share a kernel."""

    model_config = pydantic.ConfigDict(frozen=True, extra="forbid")
    function: str
    launch: str


def resolve_dump_dir(dump_dir: str | os.PathLike[str] | None) -> Path | None:
    """``dump_dir`` if given, else the ``DPT_IR_DUMP`` environment variable, else None. An
    empty ``dump_dir`` is a `ContractError` (as a path it is the current folder, which would
    fill with dump files; an empty ``DPT_IR_DUMP`` means no dumps)."""
    if dump_dir is not None:
        if not os.fspath(dump_dir):
            raise ContractError(
                "compile: dump_dir is an empty string; expected a folder to write the dumps into, "
                "or None for no dumps"
            )
        return Path(dump_dir)
    env = os.environ.get("DPT_IR_DUMP")
    return Path(env) if env else None


def write_all(result: PipelineResult, out_dir: Path, shared: list[SharedKernel] | None = None) -> None:
    out_dir.mkdir(parents=True, exist_ok=True)
    for rec, g in zip(result.records, result.stages, strict=True):
        stem = f"{rec.index:02d}-{rec.name}"
        (out_dir / f"{stem}.ir").write_text(g.to_text())
        (out_dir / f"{stem}.dot").write_text(to_dot(g))
    (out_dir / "saved.txt").write_text(saved_table(result.graph))
    (out_dir / "fusion.txt").write_text(fusion_table(result.graph, shared))
    (out_dir / "report.json").write_text(json.dumps(report(result), indent=2, sort_keys=True))


def _quote(s: str) -> str:
    return json.dumps(s)


def to_dot(graph: Graph) -> str:
    """Graphviz source: values as boxes, fusion groups as coloured clusters, saved values
    highlighted in red, program inputs as ellipses."""
    saved = saved_values(graph)
    lines = [f"digraph {_quote(graph.name)} {{", "  rankdir=TB;", '  node [shape=box, fontname="monospace"];']
    for i in graph.inputs:
        label = _quote(f"{i.name}{NL}{i.type}")
        lines.append(f"  {_quote(i.name)} [shape=ellipse, label={label}];")
    members: dict[str, list[str]] = {}
    for n in graph.nodes:
        members.setdefault(group_of(n), []).append(n.name)
    groups = {g.id: g for g in plan_of(graph).groups} if has_plan(graph) else {}
    for gid, names in members.items():
        indent = "  "
        if gid:
            g = groups.get(gid)
            colour = PHASE_COLOURS.get(g.phase if g else "forward", "#eeeeee")
            label = f"{gid}: {g.kind} {list(g.space)}" if g else f"{gid}:  "
            lines += [
                f"  subgraph {_quote('cluster_' + gid)} {{",
                f"    label={_quote(label)};",
                "    style=filled;",
                f"    fillcolor={_quote(colour)};",
            ]
            indent = "    "
        for name in names:
            n = graph.node_map[name]
            attrs = ["label=" + _quote(f"{n.name}{NL}{n.op} : {n.type}")]
            if name in saved:
                attrs += ['color="red"', "penwidth=3"]
            elif phase_of(n) == "backward" and not gid:
                attrs.append(f"style=filled, fillcolor={_quote(PHASE_COLOURS['backward'])}")
            lines.append(f"{indent}{_quote(name)} [{', '.join(attrs)}];")
        if gid:
            lines.append("  }")
    for n in graph.nodes:
        for i in dict.fromkeys(n.inputs):
            lines.append(f"  {_quote(i)} -> {_quote(n.name)};")
    for o in graph.outputs:
        lines.append(f"  {_quote('out:' + o.name)} [shape=doubleoctagon, label={_quote(o.name)}];")
        lines.append(f"  {_quote(o.value)} -> {_quote('out:' + o.name)};")
    lines.append("}")
    return "\n".join(lines) + "\n"


def _table(headers: list[str], rows: list[list[str]]) -> str:
    widths = [max(len(h), *(len(r[k]) for r in rows)) if rows else len(h) for k, h in enumerate(headers)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths)
    out = [fmt.format(*headers), fmt.format(*("-" * w for w in widths))]
    out += [fmt.format(*r) for r in rows]
    return "\n".join(line.rstrip() for line in out)


def saved_table(graph: Graph) -> str:
    """``saved.txt``: each saved value with bytes, provenance, readers and reason; then each
    value the backward recomputes, with the work per element it costs, the bytes saving it
    would have cost, the recompute budget and the reason."""
    plan = saved_plan_of(graph)
    if plan is None or not wrt_of(graph):
        return "no partition: the graph was compiled without wrt (forward only)\n"
    rows = [[r.value, r.type, str(r.bytes), r.provenance, ",".join(r.readers), r.reason] for r in plan.saved]
    text = [
        f"saved set of {graph.name!r}: {len(plan.saved)} value(s), {plan.saved_bytes} bytes",
        "program inputs are read in place by the backward and cost nothing",
        "",
    ]
    text.append(
        _table(["value", "type", "bytes", "from", "read by", "reason"], rows)
        if rows
        else "(nothing saved: the backward recomputes what it needs from program inputs)"
    )
    if plan.derived_attributes:
        text += ["", "derived attributes (saved instead of a tensor):"]
        text.append(
            _table(
                ["node", "op", "attribute", "value"],
                [[d.node, d.op, d.attribute, json.dumps(d.value)] for d in plan.derived_attributes],
            )
        )
    # A pass run after the partition (a custom pipeline's dce) may have dropped a clone.
    recomputed = [r for r in plan.recomputed if r.value in graph.node_map]
    if recomputed:
        text += ["", "recomputed in the backward (not saved):"]
        rows = [
            [
                r.value,
                f"{r.op}(...)",
                r.recomputes,
                str(r.work),
                str(r.save_bytes),
                "none" if r.budget is None else str(r.budget),
                r.reason,
            ]
            for r in recomputed
        ]
        text.append(_table(["value", "op", "recomputes", "work/elem", "save bytes", "budget", "reason"], rows))
    return "\n".join(text) + "\n"


def fusion_table(graph: Graph, shared: list[SharedKernel] | None = None) -> str:
    """``fusion.txt``: each kernel with its nodes and bytes, then why boundaries exist, then
    (given the launches, ``shared``) each distinct generated kernel and the launches using it."""
    if not has_plan(graph):
        return "no fusion: the pipeline did not run the fusion pass\n"
    plan = plan_of(graph)
    text = [f"fusion of {graph.name!r}: {len(plan.groups)} kernel(s)", ""]
    for g in plan.groups:
        axes = f" reduce axes {list(g.axes)}" if g.kind == "reduction" else ""
        text.append(
            f"{g.id} [{g.phase}] {g.kind} over {list(g.space)}{axes}: "
            f"{len(g.nodes)} node(s), reads {g.bytes_read} B, writes {g.bytes_written} B"
        )
        text.append(f"  nodes:   {', '.join(g.nodes)}")
        text.append(f"  reads:   {', '.join(g.inputs) or '-'}")
        text.append(f"  writes:  {', '.join(g.outputs)}")
        if g.scatter is not None:
            text.append(f"  scatter: {g.scatter.node}: {g.scatter.form}: {g.scatter.reason}")
        if g.kind == "contraction" and g.epilogue:
            product = next(r for r in g.roots if r not in g.epilogue)
            text.append(f"  epilogue: {', '.join(g.epilogue)}: run on each finished tile of {product}")
    sets = plan.rows
    if sets:
        text.append("")
    for r in sets:
        text.append(f"{r.id}: row-local fusion of {', '.join(r.groups)} over rows of axes {list(r.axes)}:")
        text.append(f"  {r.reason}")
    text += ["", "boundaries (a value written by one kernel and read by another):"]
    text += [f"  {b.value}: {b.from_} -> {b.to}: {b.reason}" for b in plan.boundaries] or ["  (none)"]
    if plan.halo:
        text += ["", "recomputed over a stencil's halo instead of materialised:"]
        text += [f"  {h.value} inside {h.stencil}: {h.cost} op(s) x {h.reads} reads per element" for h in plan.halo]
    if shared is not None:
        text += ["", *sharing_table(shared)]
    return "\n".join(text) + "\n"


def sharing_table(shared: list[SharedKernel]) -> list[str]:
    """Lines of ``fusion.txt``'s last part: each distinct generated kernel, how many of the
    pipeline's launches use it and which, in launch order."""
    users: dict[str, list[SharedKernel]] = {}
    for s in shared:
        users.setdefault(s.function, []).append(s)
    rows = [[f, str(len(u)), ", ".join(s.launch for s in u)] for f, u in users.items()]
    head = f"generated kernels: {len(users)} distinct for {len(shared)} launch(es); launches of one kernel share it"
    return [head, _table(["kernel", "launches", "launched as"], rows)]


def report(result: PipelineResult, extra: dict[str, Any] | None = None) -> dict[str, Any]:
    g = result.graph
    plan = plan_of(g) if has_plan(g) else None
    groups = plan.groups if plan is not None else ()
    out = {
        "graph": g.name,
        "passes": [
            {
                "index": r.index,
                "name": r.name,
                "seconds": r.seconds,
                "nodes_before": r.nodes_before,
                "nodes": r.nodes,
                "growth": r.growth,
            }
            for r in result.records
        ],
        "kernel_count": len(groups),
        "kernels": [
            {
                "id": k.id,
                "phase": k.phase,
                "kind": k.kind,
                "nodes": len(k.nodes),
                "bytes_read": k.bytes_read,
                "bytes_written": k.bytes_written,
            }
            for k in groups
        ],
        "saved_bytes": saved_bytes(g),
        "workspace_bytes": plan.schedule.workspace_bytes if plan is not None and plan.schedule is not None else 0,
    }
    out.update(extra or {})
    return out

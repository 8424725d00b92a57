"""The kernel plan in the textual IR: one readable statement per kernel, boundary, halo
note and buffer, printed in place of their JSON in the graph's ``meta`` line.

Assumes: `dpt_ir.ir.text`'s printer and parser (a cursor with its lexical helpers) call
`plan_lines` and `PlanReader`.
Guarantees: ``PlanReader`` parses exactly what `plan_lines` prints back into the same
meta records, so the textual IR still round-trips (``Graph.from_text(g.to_text()) ==
g``). A graph whose meta holds records that are not the canonical form of a valid
`KernelPlan` (a hand-edited or deliberately broken plan) keeps them in its JSON meta
line, unchanged. The statements (grammar in ``docs/ir-format.md``)::

    kernel f0 [forward] reduction over [8,6] axes [0,1]: nodes(%a, %s) roots(%s) reads(%x) writes(%s) bytes 384 -> 8
    boundary %s: f0 -> b1 "a reduction result: its readers need it complete (next kernel)"
    halo %t: in %blur cost 2 reads 9
    schedule order(f0, b1) workspace_bytes 0 output_bytes 392
    buffer buf0: f64[1] bytes 8 output values(%s)
    rowset rows0 over [8,6] axes [1] row 6 bytes 96: kernels(f0, f1) "each of f1 reads ..."

The schedule's ``assignment`` is not printed: it is the buffers' values (a plan whose
assignment says otherwise stays JSON).
"""

from __future__ import annotations

import json
import re
from typing import TYPE_CHECKING, Any

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import exact
from dpt_ir.ir.kernel_ir import PLAN_KEYS, KernelGroup, KernelPlan, parse_plan
from dpt_ir.ir.types import SHORT_NAMES

if TYPE_CHECKING:
    from dpt_ir.ir.text import _Parser

KEYWORDS = ("kernel", "boundary", "halo", "schedule", "buffer", "rowset")
_INT = re.compile(r"[0-9]+")


# -- printer ---------------------------------------------------------------------------
def plan_lines(meta: dict[str, Any]) -> tuple[list[str], dict[str, Any]]:
    """The plan statements of a graph's ``meta`` and the meta left for its JSON line; no
    statements (and ``meta`` whole) when the records are not a canonical valid plan."""
    plan = _canonical_plan(meta)
    if plan is None:
        return [], meta
    lines = [_kernel_line(g) for g in plan.groups]
    lines += [f"  boundary %{b.value}: {b.from_} -> {b.to} {_str(b.reason)}" for b in plan.boundaries]
    lines += [f"  halo %{h.value}: in %{h.stencil} cost {h.cost} reads {h.reads}" for h in plan.halo]
    s = plan.schedule
    if s is not None:
        lines.append(f"  schedule order({', '.join(s.order)}) workspace_bytes {s.workspace_bytes} "
                     f"output_bytes {s.output_bytes}")  # fmt: skip
        for b in s.buffers:
            flag = " output" if b.output else ""
            kind = f"{SHORT_NAMES[b.dtype]}[{b.size}]"
            lines.append(f"  buffer {b.id}: {kind} bytes {b.bytes}{flag} values{_refs(b.values)}")
    for r in plan.rows:
        lines.append(f"  rowset {r.id} over {_shape(r.space)} axes {_shape(r.axes)} row {r.row} bytes {r.row_bytes}: "
                     f"kernels({', '.join(r.groups)}) {_str(r.reason)}")  # fmt: skip
    return lines, {k: v for k, v in meta.items() if k not in PLAN_KEYS}


def _canonical_plan(meta: dict[str, Any]) -> KernelPlan | None:
    if "groups" not in meta:
        return None
    try:
        plan = parse_plan(meta)
    except ContractError:
        return None
    records = {k: meta[k] for k in PLAN_KEYS if k in meta}
    if exact(plan.to_meta()) != exact(records):
        return None
    s = plan.schedule
    if s is not None and s.assignment != s.held(s.buffers):
        return None
    return plan


def _kernel_line(g: KernelGroup) -> str:
    axes = f" axes {_shape(g.axes)}" if g.axes else ""
    epilogue = f" epilogue{_refs(g.epilogue)}" if g.epilogue else ""
    scatter = "" if g.scatter is None else f" scatter %{g.scatter.node} {g.scatter.form} {_str(g.scatter.reason)}"
    return (
        f"  kernel {g.id} [{g.phase}] {g.kind} over {_shape(g.space)}{axes}: nodes{_refs(g.nodes)}{epilogue} "
        f"roots{_refs(g.roots)} reads{_refs(g.inputs)} writes{_refs(g.outputs)} "
        f"bytes {g.bytes_read} -> {g.bytes_written}{scatter}"
    )


def _refs(names: tuple[str, ...]) -> str:
    return "(" + ", ".join(f"%{n}" for n in names) + ")"


def _shape(dims: tuple[int, ...]) -> str:
    return "[" + ",".join(str(d) for d in dims) + "]"


def _str(text: str) -> str:
    return json.dumps(text)


# -- parser ----------------------------------------------------------------------------
class PlanReader:
    """Collects the plan statements of one graph block as meta records; `merge` adds them
    to the block's meta."""

    def __init__(self) -> None:
        self.records: dict[str, list[dict[str, Any]]] = {"groups": [], "boundaries": [], "halo": [], "rows": []}
        self.schedule: dict[str, Any] | None = None
        self.first_line = 0

    def statement(self, p: _Parser, keyword: str, line: int) -> None:
        """Parse the rest of a ``keyword`` statement at ``p``'s cursor."""
        self.first_line = self.first_line or line
        {"kernel": self._kernel, "boundary": self._boundary, "halo": self._halo,
         "schedule": self._schedule, "buffer": self._buffer, "rowset": self._rowset}[keyword](p)  # fmt: skip
        p.end_of_line(f"end of line after the {keyword} statement")

    def merge(self, meta: dict[str, Any]) -> dict[str, Any]:
        """``meta`` with the plan read; ContractError when the meta line holds one too."""
        if not self.first_line:
            return meta
        clash = [k for k in PLAN_KEYS if k in meta]
        if clash:
            raise ContractError(
                f"line {self.first_line}: kernel plan statements and the graph's meta key(s) {clash} both give the "
                "plan; expected one of them"
            )
        out = {**meta, **self.records}
        if self.schedule is not None:
            held = {v: b["id"] for b in self.schedule["buffers"] for v in b["values"]}
            out["schedule"] = {**self.schedule, "assignment": held}
        try:
            return {**meta, **parse_plan(out).to_meta()}
        except ContractError as exc:
            raise ContractError(f"line {self.first_line}: {exc}") from None

    def _kernel(self, p: _Parser) -> None:
        gid = p.name("the kernel's id")
        p.expect("[", f"'[' before the phase of kernel {gid}")
        phase = p.name(f"the phase of kernel {gid}")
        p.expect("]", f"']' after the phase of kernel {gid}")
        kind = p.name(f"the kind of kernel {gid}")
        p.expect("over", f"'over' before the iteration space of kernel {gid}")
        space = p.shape(f"kernel {gid}")
        axes = p.shape(f"the axes of kernel {gid}") if p.keyword_ahead("axes") else ()
        p.expect(":", f"':' after the iteration space of kernel {gid}")
        nodes = _ref_list(p, "nodes", gid)
        epilogue = _ref_list(p, "epilogue", gid) if _ahead(p, "epilogue") else []
        roots, reads, writes = (_ref_list(p, word, gid) for word in ("roots", "reads", "writes"))
        p.expect("bytes", f"'bytes' in kernel {gid}")
        bytes_read = _int(p, f"the bytes kernel {gid} reads")
        p.expect("->", f"'->' between the bytes kernel {gid} reads and writes")
        record = {
            "id": gid, "phase": phase, "kind": kind, "space": list(space), "axes": list(axes), "epilogue": epilogue,
            "nodes": nodes, "roots": roots, "inputs": reads, "outputs": writes, "bytes_read": bytes_read,
            "bytes_written": _int(p, f"the bytes kernel {gid} writes"),
        }  # fmt: skip
        if p.keyword_ahead("scatter"):
            node = p.value_ref(f"the scatter node of kernel {gid}")
            form = p.name(f"the scatter form of kernel {gid}")
            record["scatter"] = {"node": node, "form": form, "reason": p.json_string(f"the scatter reason of {gid}")}
        self.records["groups"].append(record)

    def _boundary(self, p: _Parser) -> None:
        value = p.value_ref("the boundary's value")
        p.expect(":", f"':' after boundary %{value}")
        source = p.name(f"the kernel writing boundary %{value}")
        p.expect("->", f"'->' in boundary %{value}")
        target = p.name(f"the kernel reading boundary %{value}")
        reason = p.json_string(f"the reason of boundary %{value}")
        self.records["boundaries"].append({"value": value, "from": source, "to": target, "reason": reason})

    def _halo(self, p: _Parser) -> None:
        value = p.value_ref("the halo note's value")
        p.expect(":", f"':' after halo %{value}")
        p.expect("in", f"'in' in halo %{value}")
        stencil = p.value_ref(f"the stencil of halo %{value}")
        p.expect("cost", f"'cost' in halo %{value}")
        cost = _int(p, f"the cost of halo %{value}")
        p.expect("reads", f"'reads' in halo %{value}")
        self.records["halo"].append({"value": value, "stencil": stencil, "reads": _int(p, "its reads"), "cost": cost})

    def _rowset(self, p: _Parser) -> None:
        rid = p.name("the row set's id")
        p.expect("over", f"'over' before the space of row set {rid}")
        space = p.shape(f"row set {rid}")
        p.expect("axes", f"'axes' in row set {rid}")
        axes = p.shape(f"the axes of row set {rid}")
        p.expect("row", f"'row' in row set {rid}")
        row = _int(p, f"the row size of row set {rid}")
        p.expect("bytes", f"'bytes' in row set {rid}")
        nbytes = _int(p, f"the row bytes of row set {rid}")
        p.expect(":", f"':' before the kernels of row set {rid}")
        p.expect("kernels", f"'kernels(' in row set {rid}")
        groups = _list(p, f"the kernels of row set {rid}", lambda: p.name("a kernel id"))
        reason = p.json_string(f"the reason of row set {rid}")
        self.records["rows"].append(
            {"id": rid, "groups": groups, "space": list(space), "axes": list(axes), "row": row, "row_bytes": nbytes,
             "reason": reason}
        )  # fmt: skip

    def _schedule(self, p: _Parser) -> None:
        if self.schedule is not None:
            raise p.error("one 'schedule' statement per graph")
        p.expect("order", "'order' after 'schedule'")
        order = _list(p, "the schedule's order", lambda: p.name("a kernel id"))
        p.expect("workspace_bytes", "'workspace_bytes' in the schedule")
        workspace = _int(p, "the schedule's workspace bytes")
        p.expect("output_bytes", "'output_bytes' in the schedule")
        output = _int(p, "the schedule's output bytes")
        self.schedule = {"order": order, "buffers": [], "workspace_bytes": workspace, "output_bytes": output}

    def _buffer(self, p: _Parser) -> None:
        if self.schedule is None:
            raise p.error("'schedule' before the first 'buffer' statement")
        bid = p.name("the buffer's id")
        p.expect(":", f"':' after buffer {bid}")
        ttype = p.tensor_type(f"buffer {bid}")
        if len(ttype.shape) != 1:
            raise p.error(f"a one-dimensional size for buffer {bid}")
        p.expect("bytes", f"'bytes' in buffer {bid}")
        nbytes = _int(p, f"the bytes of buffer {bid}")
        output = p.keyword_ahead("output")
        p.expect("values", f"'values' in buffer {bid}")
        values = _list(p, f"the values of buffer {bid}", lambda: p.value_ref(f"a value of buffer {bid}"))
        self.schedule["buffers"].append(
            {"id": bid, "dtype": ttype.dtype, "size": ttype.shape[0], "bytes": nbytes, "output": output,
             "values": values}
        )  # fmt: skip


def _ahead(p: _Parser, word: str) -> bool:
    """Whether the word ``word`` comes next (not consumed)."""
    p.spaces()
    return p.peek(word) and not p.text[p.pos + len(word) : p.pos + len(word) + 1].isalnum()


def _ref_list(p: _Parser, word: str, gid: str) -> list[str]:
    p.expect(word, f"'{word}(' in kernel {gid}")
    return _list(p, f"the {word} of kernel {gid}", lambda: p.value_ref(f"a value in the {word} of kernel {gid}"))


def _list(p: _Parser, what: str, item: Any) -> list[str]:
    """``(a, b, ...)`` or ``()``, each element read by ``item``."""
    p.expect("(", f"'(' opening {what}")
    out: list[str] = []
    p.spaces()
    while not p.peek(")"):
        if out:
            p.expect(",", f"',' or ')' in {what}")
        out.append(item())
        p.spaces()
    p.pos += 1
    return out


def _int(p: _Parser, what: str) -> int:
    p.spaces()
    match = _INT.match(p.text, p.pos)
    if match is None:
        raise p.error(f"{what} (a non-negative integer)")
    p.pos = match.end()
    return int(match.group())

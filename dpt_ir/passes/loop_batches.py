"""loop_batches: a loop whose carries hold a leading batch axis (many shots at once) becomes one
loop per batch element, each on a body built for one element.

Why: every kernel of a batched step sweeps the whole batch before the next kernel starts, so a
step's fields leave the core's cache as soon as the batch holds a few elements (the wave
benchmark: a shot costs 1.3x as much in a batch of 8 as alone). One loop per element keeps an
element's fields in cache across the step's kernels; the elements' loops are independent, and
the runtime runs them side by side on the threads (`dpt_ir.runtime.loop_program`).

Assumes: a valid graph whose ``scan`` nodes' bodies hold no loops. Guarantees: a ``scan`` node
is rewritten when all of these hold:

- its carries share a leading extent ``B``, with ``2 <= B <= max_batch``, and each element's
  carries hold at least ``min_elements`` values together;
- every body node maps the batch: an elementwise op whose batched operands have the output's
  rank (the others broadcast: a lower rank or a leading extent 1), or an op whose batch rule
  (`OpDef.batch_attrs`, `dpt_ir.ops.batch_rules`) gives its one-element attributes. A body
  input is batched when it is a carry, or an ``x`` row or closure of leading extent ``B``; a
  value is batched when it is computed from a batched value;
- every body output (carries and ``y`` rows) is batched.

The rewrite is exact: loop ``b`` reads element ``b`` of each batched input (a ``slice``; an
``xs`` along its axis 1), the unbatched ones whole, and runs the same body on one element;
its results are joined back (``concat``) into the packed value the node had, in the same
layout, so every reader is unchanged. A closure's gradient is then the sum, in loop order,
of the loops' sums over the steps, instead of a sum over the batch inside each step: the
same terms in another order (deterministic; not the batched program's bits). A
``checkpoint="auto"`` budget is shared out: each loop gets ``memory_budget / B``. Loops that
do not qualify are left as they are.
"""

from __future__ import annotations

import math
from typing import Any

from dpt_ir.ir.builder import GraphBuilder, Tensor
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph, Node
from dpt_ir.ops import revolve
from dpt_ir.ops.loop import ScanAttrs, body_input, result_types
from dpt_ir.passes.util import substitute

NAME = "loop_batches"
MIN_ELEMENTS = 4096  # values of one element's carries below which a batch is left whole
MAX_BATCH = 64  # batch extents above which a loop is left whole (one loop node per element)


def run(graph: Graph, min_elements: int = MIN_ELEMENTS, max_batch: int = MAX_BATCH) -> Graph:
    """``graph`` with every qualifying ``scan`` node split (module docstring)."""
    k = 0
    while k < len(graph.nodes):
        node = graph.nodes[k]
        # The forward loop op by name, as the loop runtime names it: its packing convention
        # (carries, then ys) is what the rewrite keeps (docs/loops.md, IR form).
        split = _split(graph, k, min_elements, max_batch) if node.op == "scan" else None
        if split is None:
            k += 1
            continue
        graph, k = split
    return graph


def _batch(graph: Graph, node: Node, a: ScanAttrs, min_elements: int, max_batch: int) -> int | None:
    """The batch extent of ``node``'s carries, if it qualifies by size."""
    carries = [graph.types[i] for i in node.inputs[: a.carries]]
    if any(not t.shape for t in carries) or len({t.shape[0] for t in carries}) != 1:
        return None
    b = carries[0].shape[0]
    per_element = sum(t.size for t in carries) // max(b, 1)
    return b if 2 <= b <= max_batch and per_element >= min_elements else None


def _batched_inputs(graph: Graph, node: Node, a: ScanAttrs, b: int) -> list[bool]:
    """Per scan input (carries, xs, closures): whether it holds the batch axis (for xs: each
    row's axis 0, the stacked array's axis 1)."""
    out = []
    for k, v in enumerate(node.inputs):
        shape = graph.types[v].shape
        if k < a.carries:
            out.append(True)
        elif k < a.carries + a.xs:
            out.append(len(shape) >= 2 and shape[1] == b)
        else:
            out.append(len(shape) >= 1 and shape[0] == b)
    return out


def one_element_body(body: Graph, batched: set[str], b: int) -> Graph | None:
    """``body`` rebuilt for one element of a batch of ``b`` (module docstring), its inputs named
    in ``batched`` (those holding the batch axis) of leading extent 1; None where a node or an
    output does not map the batch, or where its one-element attributes do not type-check."""
    bb = GraphBuilder(body.name)
    handles: dict[str, Tensor] = {}
    holds: set[str] = set()  # values holding the batch axis
    for inp in body.inputs:
        shape = inp.type.shape
        if inp.name in batched:
            if not shape or shape[0] != b:
                return None
            shape = (1, *shape[1:])
            holds.add(inp.name)
        handles[inp.name] = bb.input(inp.name, shape, inp.type.dtype, inp.requires_grad)
    for node in body.nodes:
        attrs = _one_element_attrs(body, node, holds)
        if attrs is None:
            return None
        try:
            t = bb.emit(node.op, [handles[i] for i in node.inputs], attrs, name=node.name, meta=node.meta)
        except ContractError:  # the one-element attributes do not fit: the loop stays whole
            return None
        if any(i in holds for i in node.inputs):
            if not node.type.shape or node.type.shape[0] != b or t.type.shape != (1, *node.type.shape[1:]):
                return None
            holds.add(node.name)
        elif t.type != node.type:
            return None
        handles[node.name] = t
    if any(o.value not in holds for o in body.outputs):
        return None
    for o in body.outputs:
        bb.output(o.name, handles[o.value])
    return bb.build()


def _one_element_attrs(body: Graph, node: Node, holds: set[str]) -> dict[str, Any] | None:
    """The attributes of ``node`` on one element, or None where it mixes the batch; a node
    reading no batched value keeps its attributes."""
    if not any(i in holds for i in node.inputs):
        return dict(node.attrs)
    op = node.opdef
    shapes = tuple(body.types[i].shape for i in node.inputs)
    if op.kind == "elementwise":
        rank = len(node.type.shape)
        for i, shape in zip(node.inputs, shapes, strict=True):
            broadcasts = len(shape) < rank or (len(shape) == rank and shape[0] == 1)
            if (i in holds and len(shape) != rank) or (i not in holds and not broadcasts):
                return None
        return dict(node.attrs)
    if op.batch_attrs is None or node.inputs[0] not in holds or any(i not in holds for i in node.inputs[1:]):
        return None
    return op.batch_attrs(op.parse_attrs(node.attrs, f"node {node.name!r}"), shapes, node.type.shape)


def _split(graph: Graph, k: int, min_elements: int, max_batch: int) -> tuple[Graph, int] | None:
    """``graph`` with its node ``k`` split, and the position after the nodes that replace it."""
    node = graph.nodes[k]
    a: ScanAttrs = node.opdef.parse_attrs(node.attrs, f"node {node.name!r}")  # type: ignore[assignment]
    b = _batch(graph, node, a, min_elements, max_batch)
    if b is None:
        return None
    batched = _batched_inputs(graph, node, a, b)
    body = one_element_body(a.body, {body_input(a, j) for j, yes in enumerate(batched) if yes}, b)
    if body is None:
        return None
    builder, handles = GraphBuilder.from_graph(graph)
    first = builder.node_count
    attrs = a.model_dump(mode="json")
    attrs["body"] = body.model_dump(mode="json")
    if a.checkpoint == "auto":
        attrs["memory_budget"] = -(-(a.memory_budget or revolve.DEFAULT_MEMORY_BUDGET) // b)
    meta = dict(node.meta)
    elements = _Elements(graph, handles, meta)
    one = result_types(body, a)  # each loop's results: carries, then ys stacked on axis 0
    pieces: list[list[Tensor]] = [[] for _ in one]
    for e in range(b):
        ins = [elements.get(v, 1 if a.carries <= j < a.carries + a.xs else 0, e) if batched[j] else handles[v]
               for j, v in enumerate(node.inputs)]  # fmt: skip
        packed = builder.emit("scan", ins, attrs, meta=meta)
        at = 0
        for r, t in enumerate(one):
            flat = builder.emit("slice", [packed], {"starts": [at], "stops": [at + t.size], "steps": [1]}, meta=meta)
            pieces[r].append(builder.emit("reshape", [flat], {"shape": list(t.shape)}, meta=meta))
            at += t.size
    joined = [
        builder.emit("concat", parts, {"axis": 0 if r < a.carries else 1}, meta=meta) for r, parts in enumerate(pieces)
    ]
    flats = [builder.emit("reshape", [j], {"shape": [math.prod(j.type.shape)]}, meta=meta) for j in joined]
    # The readers of the packed value: its projections (dp.scan's slice of one result) read
    # that result's join; anything else reads the packed value, joined again.
    subst, dropped = _projections(graph, node, [f.name for f in flats], [b * t.size for t in one])
    if any(c not in dropped for c in graph.consumers[node.name]) or node.name in {o.value for o in graph.outputs}:
        packed = flats[0] if len(flats) == 1 else builder.emit("concat", flats, {"axis": 0}, meta=meta)
        subst[node.name] = packed.name
    added = builder.nodes_since(first)
    kept = [n for n in graph.nodes[k + 1 :] if n.name not in dropped]
    return substitute(graph, subst, [*graph.nodes[:k], *added, *kept]), k + len(added)


def _projections(graph: Graph, node: Node, flats: list[str], sizes: list[int]) -> tuple[dict[str, str], set[str]]:
    """The readers of ``node``'s packed value that take one result whole (a one-axis slice of
    its range, as ``dp.scan`` projects them), each mapped to that result's flat join."""
    ranges, at = {}, 0
    for r, size in enumerate(sizes):
        ranges[((at,), (at + size,), (1,))] = flats[r]
        at += size
    subst: dict[str, str] = {}
    for c in graph.consumers[node.name]:
        reader = graph.node_map[c]
        if reader.op != "slice":  # the packing convention of the scan op (docs/loops.md, IR form)
            continue
        key = tuple(tuple(reader.attrs[f]) for f in ("starts", "stops", "steps"))
        if key in ranges:
            subst[c] = ranges[key]
    return subst, set(subst)


class _Elements:
    """Element ``e`` of a batched value along an axis (kept, extent 1), made where it is cheapest
    to differentiate: an elementwise producer or a broadcast is applied to its operands' elements
    (an operand that broadcasts along the axis is shared), so a gradient reaches each operand as
    one element's, not as a batch-sized array that is zero but at ``e`` (the slice's adjoint);
    anything else is sliced. Bounded: at most `DEPTH` producers deep."""

    DEPTH = 16

    def __init__(self, graph: Graph, handles: dict[str, Tensor], meta: dict[str, Any]) -> None:
        self.graph, self.handles, self.meta = graph, handles, meta
        self.memo: dict[tuple[str, int, int], Tensor] = {}

    def get(self, value: str, axis: int, e: int) -> Tensor:
        # An explicit stack of pending (value, depth) pairs: no recursion on graph size.
        stack = [(value, 0)]
        while stack:
            v, depth = stack[-1]
            if (v, axis, e) in self.memo:
                stack.pop()
                continue
            operands = self._pushed(v, axis) if depth < self.DEPTH else None
            pending = [o for o in operands or () if o is not None and (o, axis, e) not in self.memo]
            if pending:
                stack.extend((o, depth + 1) for o in pending)
                continue
            stack.pop()
            self.memo[(v, axis, e)] = self._make(v, axis, e, operands)
        return self.memo[(value, axis, e)]

    def _pushed(self, value: str, axis: int) -> list[str | None] | None:
        """Per operand of ``value``'s producer, the operand whose element to take (None: shared,
        it broadcasts along ``axis``); None where the element is sliced instead. An elementwise
        producer takes its aligned operands' elements; a view with a batch rule
        (`OpDef.batch_attrs`) of a shared operand (a broadcast) is applied to one element."""
        node = self.graph.node_map.get(value)
        if node is None or not node.inputs:
            return None
        shape = node.type.shape
        out: list[str | None] = []
        for i in node.inputs:
            s = self.graph.types[i].shape
            lead = len(shape) - len(s)  # operand axes align with the output's trailing ones
            if axis < lead or s[axis - lead] == 1:
                out.append(None)
            elif lead == 0 and s[axis] == shape[axis] and node.opdef.kind == "elementwise":
                out.append(i)
            else:
                return None
        if node.opdef.kind == "elementwise":
            return out if any(o is not None for o in out) else None
        return out if node.opdef.batch_attrs is not None and axis == 0 and len(out) == 1 else None

    def _make(self, value: str, axis: int, e: int, operands: list[str | None] | None) -> Tensor:
        t = self.handles[value]
        shape = t.type.shape
        want = (*shape[:axis], 1, *shape[axis + 1 :])
        node = self.graph.node_map.get(value)
        attrs = None if operands is None or node is None else self._attrs(node)
        if attrs is not None:
            pairs = zip(node.inputs, operands, strict=True)
            ins = [self.handles[i] if o is None else self.memo[(o, axis, e)] for i, o in pairs]
            made = t.builder.emit(node.op, ins, attrs, meta=node.meta)
            if made.type.shape == want:
                return made
        starts = [e if d == axis else 0 for d in range(len(shape))]
        stops = [e + 1 if d == axis else n for d, n in enumerate(shape)]
        steps = [1] * len(shape)
        return t.builder.emit("slice", [t], {"starts": starts, "stops": stops, "steps": steps}, meta=self.meta)

    def _attrs(self, node: Node) -> dict[str, Any] | None:
        """The attributes of ``node``'s one-element copy: an elementwise op's own, a view's from
        its batch rule."""
        if node.opdef.kind == "elementwise":
            return dict(node.attrs)
        shapes = tuple(self.graph.types[i].shape for i in node.inputs)
        parsed = node.opdef.parse_attrs(node.attrs, f"node {node.name!r}")
        return node.opdef.batch_attrs(parsed, shapes, node.type.shape)  # type: ignore[misc]

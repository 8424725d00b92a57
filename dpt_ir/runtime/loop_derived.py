"""Forward mode and second order on a compiled `LoopProgram`: ``jvp``, ``hvp`` and ``gnvp``.

Assumes: the program's graph holds loops; its derived graphs come from
`dpt_ir.api.second_order`, whose loops' derivatives are the op table's (``scan_vjp``'s entry
in `dpt_ir.ops.loop_reverse`: a jvp holds a tangent scan whose body is the body's jvp graph,
an hvp adds that tangent scan's checkpointed reverse).

Guarantees: each derived graph is cut at its loop nodes (`Segments`) and compiled at the first
call of its kind (per residual output for gnvp), like the tape's pieces, in one Warp module
(`compile_pieces`), each distinct body once; a call then runs its stages like
`LoopProgram.run`. The pieces are compiled in the expansions' form (`expand=True`, as every loop
piece). Vectors are checked as `Program`'s (`vector_arrays`: a vector for a non-``wrt`` input,
a wrong shape or a non-real array is a ContractError), and so are ``gnvp``'s output and ``hvp``'s
loss, before anything is compiled or run.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

import numpy as np

from dpt_ir.api.second_order import derived_graph
from dpt_ir.ir import records
from dpt_ir.ir.contracts import check_inputs
from dpt_ir.ir.errors import ContractError
from dpt_ir.reference.interpreter import vector_arrays

if TYPE_CHECKING:
    from dpt_ir.runtime.loop_program import LoopProgram, Segments

Arrays = dict[str, np.ndarray]


def evaluate(program: LoopProgram, kind: str, of: str | None, vectors: Any, inputs: dict[str, Any],
             what: str) -> tuple[Arrays, records.Derived]:  # fmt: skip
    """Every output of the ``kind`` graph for ``inputs`` and the ``vectors`` of the ``wrt``
    inputs, and its `Derived` record (which names them)."""
    if not program.wrt:
        raise ContractError(f"program {program.graph.name!r} was compiled without wrt; {kind} needs wrt=[...]")
    names = [o.name for o in program.graph.outputs]
    if kind == "gnvp" and (not isinstance(of, str) or of not in names):
        raise ContractError(f"gnvp: output={of!r} is not an output of {program.graph.name!r}; outputs are {names}")
    checked = check_inputs(program.graph, inputs)
    vec = vector_arrays(program.graph, program.wrt, vectors, what)
    derive = lambda: derived_graph(program.graph, program.wrt, program.loss, kind, of)  # noqa: E731
    segments: Segments = program.derived_segments(kind, of, derive)
    record = records.derived_record(segments.graph)
    return program.evaluate(segments, {**checked, **{record.vectors[w]: v for w, v in vec.items()}}), record


def jvp(program: LoopProgram, tangents: Any, inputs: dict[str, Any]) -> tuple[Arrays, Arrays]:
    """``(outputs, output_tangents)``: per float output, its Jacobian times ``tangents``."""
    values, record = evaluate(program, "jvp", None, tangents, inputs, "tangent")
    return {o.name: values[o.name] for o in program.graph.outputs}, {o: values[p] for o, p in record.products.items()}


def hvp(program: LoopProgram, vectors: Any, inputs: dict[str, Any]) -> tuple[Arrays, Arrays, Arrays]:
    """``(outputs, grads, hvps)``: the loss's gradient and its Hessian times ``vectors``."""
    values, record = evaluate(program, "hvp", None, vectors, inputs, "vector")
    outs = {o.name: values[o.name] for o in program.graph.outputs}
    return outs, {w: values[g] for w, g in record.gradients.items()}, {w: values[p] for w, p in record.products.items()}


def gnvp(program: LoopProgram, vectors: Any, output: Any, inputs: dict[str, Any]) -> tuple[Arrays, Arrays]:
    """``(outputs, products)``: ``J_rᵀ (J_r v)`` per ``wrt`` input for residual output ``output``."""
    values, record = evaluate(program, "gnvp", output, vectors, inputs, "vector")
    return {o.name: values[o.name] for o in program.graph.outputs}, {w: values[p] for w, p in record.products.items()}

"""`export_cuda`: a program's plans as a bundle a GPU machine runs without warp-lang.

Assumes: a compiled `dp.Program` (any device), or the `LoopProgram` of a graph with loops
(its plans' stages: `dpt_ir.export.stages`). Guarantees: ``DIR`` receives ``kernels.cu``,
``plan.json`` (a `Bundle`) and ``ref.npz`` together, or, on any error (a group the C++
path cannot lower, missing inputs), nothing: the files are written only once everything
is built. The CUDA plans are generated as `dp.compile` would for a GPU, with the program's
``checks``, ``fuse`` and ``recompute`` and the CUDA defaults of the budgets.
"""

from __future__ import annotations

import io
import os
from pathlib import Path
from typing import Any

import numpy as np

from dpt_ir.driver.compile import PLAN_PREFIX
from dpt_ir.export.bundle import BUNDLE_VERSION, Bundle, StatusSpec, Tolerance
from dpt_ir.export.cuda import cuda_pieces, cuda_plans, kernels_cu
from dpt_ir.export.reference import cotangents, input_specs, program_results, raises, store, tape_call
from dpt_ir.export.stages import loop_plan
from dpt_ir.export.tables import constants, plan_spec
from dpt_ir.ir.errors import ContractError
from dpt_ir.reference.interpreter import interpret, interpret_grad
from dpt_ir.version import __version__

TOLERANCE = Tolerance(rtol=2e-4, atol_rel=2e-5)  # tests/backend/harness.py MODERATE_TOLERANCES, float32


def _cuda_options(program: Any) -> dict[str, Any]:
    """The program's switches with the CUDA budgets (`dpt_ir.driver.compile.options_of`)."""
    from dpt_ir.backends.base import target_for
    from dpt_ir.driver.compile import options_of

    opts = program.report.options
    return options_of(target_for("cuda"), **{k: opts[k] for k in ("checks", "fuse", "recompute", "reciprocal")})


def _pipelines(program: Any, plans: list[str]) -> dict[str, Any]:
    """The options of ``plans``, from the table `dp.compile` uses, with the CUDA budgets."""
    from dpt_ir.driver.compile import pipelines

    every = pipelines(program.graph, tuple(program.wrt), program.loss, _cuda_options(program))
    return {name: every[name] for name in plans}


def _chosen(program: Any, plans: list[str] | None) -> list[str]:
    have = [name for name in PLAN_PREFIX if name in _plans_of(program)]
    if plans is None:
        return have
    unknown = [p for p in plans if p not in have]
    if unknown or not plans:
        raise ContractError(f"export of {program.graph.name!r}: plans {unknown or plans} not among {have}")
    return [p for p in have if p in plans]


def _plans_of(program: Any) -> list[str]:
    """The plans a program offers (a loop program: ``run``, ``value_and_grad`` with a loss,
    ``tape`` with ``wrt``, as it compiles them)."""
    if hasattr(program, "plans"):
        return list(program.plans)
    return ["run", *(["value_and_grad"] if program.joint is not None else []), *(["tape"] if program.wrt else [])]


def export_cuda(
    program: Any,
    out_dir: str | os.PathLike[str],
    plans: list[str] | None = None,
    inputs: dict[str, np.ndarray] | None = None,
    seed: int | None = None,
    ranges: dict[str, tuple[float, float]] | None = None,
    reference: str = "interpreter",
) -> Path:
    """Write the bundle of ``program`` to ``out_dir`` (created); returns its path.

    ``plans``: which of the program's plans (default every one: ``run``, ``value_and_grad``,
    ``tape``); a plan with a launch off the C++ path raises ContractError naming it.
    ``inputs``: arrays shipped in ``ref.npz``; or ``seed``: inputs drawn on the device
    (float32 uniform in ``ranges[name]``, default [0.5, 2), cast to the input's dtype), only
    checksums shipped. ``reference``: ``"interpreter"`` (the NumPy oracle) or ``"program"``
    (the compiled CPU program: far less memory and time at GPU sizes) computes ``ref.npz``.
    """
    from dpt_ir.runtime.loop_program import LoopProgram
    from dpt_ir.runtime.program import Program

    if not isinstance(program, Program | LoopProgram):
        graph_name = getattr(getattr(program, "graph", None), "name", None)
        raise ContractError(
            f"export_cuda of {graph_name!r}: expected a dp.Program (or the program of a graph with loops), "
            f"found {type(program).__name__}"
        )
    graph = program.graph
    if reference not in ("interpreter", "program"):
        raise ContractError(f"export of {graph.name!r}: reference {reference!r}; expected 'interpreter' or 'program'")
    names = _chosen(program, plans)
    checks = bool(program.report.options["checks"])
    loops = isinstance(program, LoopProgram)
    cuts = {name: program.segments(name) for name in names} if loops else {}
    if loops:
        pieces = {k: g for cut in cuts.values() for k, g in cut.pieces().items()}
        build = cuda_pieces(graph.name, pieces, _cuda_options(program))
    else:
        build = cuda_plans(graph, _pipelines(program, names), checks)
    specs, arrays = input_specs(graph, inputs, seed, ranges or {})
    status = max(len(build.slots), 1) if checks else 0
    ref: dict[str, np.ndarray] = {}
    for spec in specs:
        if spec.seed is None:
            ref[f"input/{spec.name}"] = arrays[spec.name]
        else:
            ref[f"input/{spec.name}@sum"] = np.float64(arrays[spec.name].sum(dtype=np.float64))
    plan_specs = []
    forward = interpret(graph, **arrays) if reference == "interpreter" else None  # one forward for every plan
    for name in names:
        pg = cuts[name].graph if loops else build.graphs[name]
        outs, grads, call = _reference(program, name, pg, arrays, ref, seed or 0, forward)
        for key, value in [*_keyed("output", outs), *_keyed("gradient", grads)]:
            store(ref, f"{name}/{key}", value)
        raised = call is not None and raises(call)  # program references exist only where nothing raised
        if loops:
            outputs = [o.name for o in graph.outputs]
            plan, consts = loop_plan(name, cuts[name], build, status, tuple(program.wrt), outputs, raised)
        else:
            plan = plan_spec(name, build, status, raised)
            consts = {p: values for p, (_, values) in constants(build.kernels[name]).items()}
        plan_specs.append(plan)
        for p, values in consts.items():
            ref[f"constant/{name}/{p}"] = values
    bundle = Bundle(
        version=BUNDLE_VERSION,
        graph=graph.name,
        dpt_ir=__version__,
        checks=checks,
        inputs=specs,
        status_size=status,
        status=[_slot(k, s) for k, s in enumerate(build.slots)],
        plans=plan_specs,
        tolerance=TOLERANCE,
        reference=reference,
    )
    units = [build.units[k.name] for ks in build.kernels.values() for k in ks]
    buf = io.BytesIO()
    np.savez(buf, **ref)
    out = Path(out_dir)
    out.mkdir(parents=True, exist_ok=True)
    (out / "kernels.cu").write_text(kernels_cu(graph.name, units), encoding="utf-8")
    (out / "plan.json").write_text(bundle.model_dump_json(indent=1), encoding="utf-8")
    (out / "ref.npz").write_bytes(buf.getvalue())
    return out


def _reference(
    program: Any,
    name: str,
    pg: Any,
    arrays: dict[str, np.ndarray],
    ref: dict[str, np.ndarray],
    seed: int,
    forward: dict[str, np.ndarray] | None,
) -> tuple[dict[str, np.ndarray], dict[str, np.ndarray], Any]:
    """The outputs and gradients of plan ``name`` (the interpreter's, whose ``forward`` is
    computed once per program; or, ``forward`` None, the program's), and the program call that
    tells whether the plan raises a NumericalError on these inputs (None for the program's own
    results: they exist only when it did not raise)."""
    graph = program.graph
    if forward is None:
        seeds = cotangents(graph, pg, seed + 1000) if name == "tape" else {}
        for out, value in seeds.items():
            ref[f"tape/cotangent/{out}"] = value
        outs, grads = program_results(program, name, arrays, seeds)
        return outs, grads, None
    if name == "run":
        return forward, {}, lambda: program.run(**arrays)
    if name == "value_and_grad":
        grads = interpret_grad(graph, list(program.wrt), seed={program.loss: 1.0}, **arrays)
        return forward, grads, lambda: program.value_and_grad(**arrays)
    seeds = cotangents(graph, pg, seed + 1000)
    for out, value in seeds.items():
        ref[f"tape/cotangent/{out}"] = value  # uploaded whole: never sampled
    grads = interpret_grad(graph, list(program.wrt), seed=seeds, **arrays)
    return forward, grads, tape_call(program, arrays, seeds)


def _keyed(kind: str, values: dict[str, np.ndarray]) -> list[tuple[str, np.ndarray]]:
    return [(f"{kind}/{k}", v) for k, v in values.items()]


def _slot(index: int, slot: Any) -> StatusSpec:
    from dpt_ir.runtime.program import describe_slot

    return StatusSpec(
        index=index, kernel=slot.kernel, node=slot.node, op=slot.op, kind=slot.kind, message=describe_slot(slot)
    )

"""`dp.compile`: run the pass pipelines, generate a Warp module per pipeline, cache everything.

A program compiles up to three pipelines of the same graph: ``run`` (forward only),
``value_and_grad`` (the loss seeded with 1 at compile time: forward and backward fuse) and
``tape`` (cotangent inputs for every float output). ``dp.compile`` runs the passes and
generates every pipeline's module source (so every `ContractError` is raised before it
returns); each module's Warp build (Warp's codegen and clang, or its cached binary) is
deferred to the first call of its plan (`dpt_ir.runtime.modules.GeneratedModule`;
`Program.build_all` forces them). Loop programs' pieces (`compile_pieces`) are one module,
built at compile. Caches:

- in-process: the same graph, wrt, loss, options and device return the same `Program`
  without recompiling;
- on disk (``DPT_IR_CACHE``, default ``~/.cache/dpt_ir``): the scheduled plans and the
  generated modules, keyed by a hash of the graph, the options and the dpt_ir and Warp
  versions; a new process skips the passes and Warp reuses its compiled binary. Entries
  carry checksums; a damaged one is logged once, recompiled and replaced
  (`dpt_ir.runtime.modules`).

Compiles are serialised per process (one lock). Messages go to the ``dpt_ir`` logger
(nothing is printed by default); ``DPT_IR_LOG=info`` or ``debug`` sends them to stderr.
"""

from __future__ import annotations

import functools
import json
import logging
import os
import sys
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic
import warp as wp

from dpt_ir.api.autodiff import check_wrt, default_loss
from dpt_ir.backends.base import Target
from dpt_ir.backends.launches import KernelSource
from dpt_ir.backends.warp import codegen
from dpt_ir.backends.warp.quiet import init_quietly
from dpt_ir.driver.cache import Built, load_or_build
from dpt_ir.driver.second_order import DerivedPlanBuilder
from dpt_ir.ir import records
from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes import dumps
from dpt_ir.passes.dumps import resolve_dump_dir
from dpt_ir.runtime.modules import BUILD_LOCK, content_key, source_fingerprint
from dpt_ir.runtime.plan import ExecutionPlan
from dpt_ir.runtime.program import Program
from dpt_ir.runtime.report import BuildRow, CacheState, PlanRow, ProgramReport

if TYPE_CHECKING:
    from dpt_ir.passes.manager import PipelineResult
from dpt_ir.version import __version__

_PROGRAMS: dict[str, Program] = {}
_COMPILE_LOCK = BUILD_LOCK  # one compile or module build at a time per process: caches, sys.modules, Warp's loader
log = logging.getLogger("dpt_ir.compile")


LOG_LEVELS = {"debug": logging.DEBUG, "info": logging.INFO, "warning": logging.WARNING, "error": logging.ERROR}


def configure_logging() -> None:
    """``DPT_IR_LOG=debug|info|warning|error``: the ``dpt_ir`` logger's level, and a stderr
    handler when the application configured none. Unset: logging's defaults (warnings
    reach stderr, nothing else)."""
    name = os.environ.get("DPT_IR_LOG", "").strip().lower()
    if not name:
        return
    logger = logging.getLogger("dpt_ir")
    if name not in LOG_LEVELS:
        logger.warning("DPT_IR_LOG=%r is not one of %s; ignored", name, sorted(LOG_LEVELS))
        return
    logger.setLevel(LOG_LEVELS[name])
    if not logger.handlers and not logging.getLogger().handlers:
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(name)s: %(message)s"))
        logger.addHandler(handler)


configure_logging()


def resolve_device(device: str | None) -> str:
    """``None``: ``cuda:0`` when a GPU is present, else ``cpu``."""
    init_quietly()
    if device is None:
        return "cuda:0" if wp.get_cuda_device_count() > 0 else "cpu"
    if not isinstance(device, str) or not (device == "cpu" or device.startswith("cuda")):
        raise ContractError(f"compile: device must be 'cpu' or 'cuda:N', found {device!r}")
    if device.startswith("cuda"):
        name = device if ":" in device else "cuda:0"
        index = name.split(":", 1)[1]
        if not index.isdigit() or int(index) >= wp.get_cuda_device_count():
            raise ContractError(
                f"compile: device {device!r} is not available ({wp.get_cuda_device_count()} CUDA device(s))"
            )
        return name
    return device


def options_of(
    target: Target,
    checks: bool = True,
    fuse: bool = True,
    recompute: bool = True,
    reciprocal: bool = True,
    denormals: str = "keep",
    epilogues: bool | None = None,
) -> dict[str, Any]:
    """The compile options every pipeline of a program shares (and the cache keys): the
    switches, and the budgets and device facts of ``target`` that the passes plan with."""
    return {
        "checks": checks,
        "denormals": denormals,
        "fuse": fuse,
        "recompute": recompute,
        "reciprocal": reciprocal,
        "product_epilogues": target.product_epilogues if epilogues is None else None if epilogues else 0,
        "halo_budget": target.halo_budget,
        "recompute_budget": target.recompute_budget,
        "row_budget": target.row_budget,
        "expand": target.expand,
    }


def cache_key(graph: str, options: str, target: Target) -> str:
    """The disk-cache key of a build: the graph's and the options' JSON, every fact of
    ``target`` that shapes plans and code (`Target.fingerprint`), the dpt_ir and Warp versions
    and dpt_ir's own source (`source_fingerprint`)."""
    return content_key(graph, options, target.fingerprint(), __version__, wp.config.version, source_fingerprint())


PLAN_PREFIX = {"run": "run", "value_and_grad": "vg", "tape": "tp"}  # plan name -> the prefix of its kernels' names


def pipelines(graph: Graph, wrt: tuple[str, ...], loss: str | None, base: dict[str, Any]) -> dict[str, Any]:
    """The pass options of each plan a program compiles (plan name -> `CompileOptions`):
    ``run``; with ``wrt``, ``tape``, and ``value_and_grad`` when ``loss`` is set. ``base``:
    `options_of`. `dpt_ir.export` plans its CUDA build with the same table. ``run``
    differentiates nothing: the backward nodes it meets (a loop program's pieces) come from
    `dpt_ir.api.autodiff.joint_graph` called without the options, in the expansions' form, so it
    expands them whatever ``base["expand"]`` says."""
    from dpt_ir.passes.options import CompileOptions

    plans: dict[str, CompileOptions] = {"run": CompileOptions(**{**base, "expand": True})}
    if wrt:
        if loss is not None:
            plans["value_and_grad"] = CompileOptions(wrt=wrt, seeds=(loss,), seed_values={loss: 1.0}, loss=loss, **base)
        plans["tape"] = CompileOptions(wrt=wrt, **base)
    return plans


def compile(  # noqa: A001  (the public name is fixed by the design)
    graph: Graph,
    wrt: list[str] | tuple[str, ...] | str | None = None,
    device: str | None = None,
    dump_dir: str | os.PathLike[str] | None = None,
    loss: str | None = None,
    checks: bool = True,
    fuse: bool = True,
    recompute: bool = True,
    halo_budget: int | None = None,
    recompute_budget: int | None = None,
    threads: int | None = None,
    reciprocal: bool = True,
    denormals: str = "keep",
    epilogues: bool | None = None,
) -> Program:
    """Compile ``graph`` for ``device``; differentiate wrt the inputs named in ``wrt``.

    ``loss`` names the output `Program.value_and_grad` differentiates (default: the only
    scalar float output). ``checks`` compiles the status word in; ``fuse`` and
    ``recompute`` switch fusion and backward recomputation off (for comparison);
    ``reciprocal=False`` keeps every division a division (the `reciprocal` pass turns a
    division by a per-row scale into a multiplication by its reciprocal, which may differ
    by about one ulp; docs/passes.md); ``epilogues`` runs the pointwise consumers of a matrix
    product on its finished tiles, inside its kernel (True), or in kernels of their own (False);
    the same bits either way (default None: by device and size, `Target.product_epilogues`:
    CUDA always, the CPU up to 64² outputs);
    ``halo_budget`` sets how much work a stencil may spend recomputing its producers
    (default: by device); ``recompute_budget`` how much work the backward may spend
    recomputing one forward value before saving it instead (default: by device; CUDA has
    no limit, a large number lifts it on the CPU). All options are part of the cache key.
    ``threads``: CPU threads per launch (None: the machine's cores; results are the same for
    any count, see `CompileOptions`); it keys the in-process cache only.
    ``denormals``: ``"keep"`` (IEEE: denormal values are computed as such) or ``"flush"``
    (the CPU kernels flush denormal results to zero and read denormal inputs as zero, as XLA
    does on the CPU; a time-stepped field whose wavefront decays through denormals runs
    faster; CUDA kernels and exported bundles keep them; docs/backend.md).
    """
    start = time.perf_counter()
    if not isinstance(graph, Graph):
        raise ContractError(f"compile: expected a dp.Graph, found {type(graph).__name__}")
    wrt_names = check_wrt(graph, [] if wrt is None else [wrt] if isinstance(wrt, str) else list(wrt))
    if loss is not None:
        graph.output_value(loss)
    elif wrt_names:
        try:
            loss = default_loss(graph)
        except ContractError:
            loss = None  # value_and_grad then needs loss=...; tape passes still work
    dev = resolve_device(device)
    from dpt_ir.passes.options import CompileOptions

    try:
        n_threads = CompileOptions(threads=threads).resolved_threads()
    except pydantic.ValidationError:
        raise ContractError(f"compile: threads must be None or an integer >= 1, found {threads!r}") from None
    if denormals not in ("keep", "flush"):
        raise ContractError(f"compile: denormals must be 'keep' or 'flush', found {denormals!r}")
    target = Target.for_device(
        dev,
        n_threads,
        None if halo_budget is None else int(halo_budget),
        None if recompute_budget is None else int(recompute_budget),
    )
    switches = {"checks": checks, "fuse": fuse, "recompute": recompute, "reciprocal": reciprocal}
    epilogue = None if epilogues is None else bool(epilogues)
    base = options_of(target, **{k: bool(v) for k, v in switches.items()}, denormals=denormals, epilogues=epilogue)
    if any(n.opdef.kind == "loop" for n in graph.nodes):  # a trait: loop ops compile their bodies once
        from dpt_ir.runtime.loop_program import LoopProgram

        loop_dump = resolve_dump_dir(dump_dir)
        pieces = functools.partial(compile_pieces, threads=n_threads)  # every piece's plans split on them
        if target.loop_batches:  # one loop per batch element where a loop's carries hold a batch
            from dpt_ir.passes import loop_batches

            graph = loop_batches.run(graph)
        options = {"device": dev, **base}
        return LoopProgram(graph, wrt_names, loss, options, pieces, loop_dump, n_threads)  # type: ignore[return-value]
    key = cache_key(graph.model_dump_json(), json.dumps([wrt_names, loss, base], sort_keys=True), target)
    out_dir = resolve_dump_dir(dump_dir)
    with _COMPILE_LOCK:
        cached = _PROGRAMS.get(f"{key}:{dev}:{n_threads}")
        if cached is not None and out_dir is None:
            cached.served_from_memory(time.perf_counter() - start)
            return cached
        log.info("compiling %r for %s (cache entry %s)", graph.name, dev, key)
        program = _build(graph, wrt_names, loss, dev, base, key, out_dir, start, target)
        _PROGRAMS[f"{key}:{dev}:{n_threads}"] = program
        return program


def _build(
    graph: Graph,
    wrt: tuple[str, ...],
    loss: str | None,
    dev: str,
    base: dict[str, Any],
    key: str,
    out_dir: Path | None,
    start: float,
    target: Target,
) -> Program:
    """The passes and code generation of every pipeline (or their disk-cache record), run
    now, for ``target`` (whose budgets ``base`` holds); each pipeline's Warp module is built
    on its plan's first use (`GeneratedModule`)."""
    stem = f"dpt_ir_gen_{key}"

    def build() -> tuple[dict[str, PipelineResult], Built]:
        from dpt_ir.passes.manager import run_pipeline

        options = pipelines(graph, wrt, loss, base)
        results = {name: run_pipeline(graph, opts) for name, opts in options.items()}
        log.debug("compile %r: passes done in %.2f s", graph.name, time.perf_counter() - start)
        sources = {  # one module per pipeline, so that a call builds only the module it launches
            f"{stem}_{PLAN_PREFIX[n]}": codegen.generate(
                {PLAN_PREFIX[n]: r.graph}, graph.name, _header(base), base["checks"], target, base["denormals"]
            )
            for n, r in results.items()
        }
        built = Built(
            {name: r.graph for name, r in results.items()},
            [k for source in sources.values() for k in source.kernels],
            {name: source.slots for name, source in sources.items()},
            {name: source.text for name, source in sources.items()},
        )
        return results, built

    cached = load_or_build(key, stem, out_dir is not None, build)
    built = cached.built
    plans = {}
    for name, g in built.graphs.items():
        module = cached.module(f"{stem}_{PLAN_PREFIX[name]}", dev)
        mine = [k for k in built.kernels if k.name.startswith(PLAN_PREFIX[name] + "_")]
        slots, checks, tape = built.slots[module.name], base["checks"], name == "tape"
        plans[name] = ExecutionPlan(g, mine, module, dev, slots, checks, grad_outputs=tape, threads=target.threads)
    report = _report(graph, plans, built.kernels, cached.cache, time.perf_counter() - start, dev, stem, base)
    derive = DerivedPlanBuilder(graph, wrt, loss, dev, base, target, key, _header(base), out_dir)
    program = Program(graph, wrt, loss, dev, plans, base["checks"], report, stem, derive)
    log.info("compiled %r on %s in %.2f s (cache %s)", graph.name, dev, report.compile_seconds, cached.cache)
    if out_dir is not None:
        _dump(out_dir, cached.results, plans, built.texts, report)
    return program


def _header(base: dict[str, Any]) -> str:
    """The generated modules' version line: what made them, with which options."""
    return f"dpt_ir {__version__}, warp {wp.config.version}, options {json.dumps(base, sort_keys=True)}"


_PIECES: dict[str, dict[str, Program]] = {}


def compile_pieces(
    title: str, pieces: dict[str, Graph], dev: str, base: dict[str, Any], out_dir: Path | None, threads: int = 1
) -> dict[str, Program]:
    """Forward-only programs of several graphs (``run`` plans), built as **one** Warp module:
    the pieces of a loop program (its segments, loop bodies and body vjps), so that a loop
    program costs one module build, not one per piece. ``threads``: the CPU threads each
    plan's launches split over (the program's; results are the same for any count). Cached
    like `compile`: in process by content and thread count, and on disk (the scheduled plans
    and the module, shared by every thread count; a new process skips the passes and Warp
    reuses its binary)."""
    target = Target.for_device(dev, threads)
    key = cache_key(
        json.dumps({k: g.model_dump_json() for k, g in sorted(pieces.items())}),
        json.dumps(base, sort_keys=True),
        target,
    )
    with _COMPILE_LOCK:
        hit = _PIECES.get(f"{key}:{dev}:{target.threads}")
        if hit is not None and out_dir is None:
            return hit
        start = time.perf_counter()
        module_name = f"dpt_ir_gen_{key}"
        prefixes = {name: f"p{k}" for k, name in enumerate(pieces)}

        def build() -> tuple[dict[str, PipelineResult], Built]:
            from dpt_ir.passes.manager import run_pipeline

            results = {name: run_pipeline(g, pipelines(g, (), None, base)["run"]) for name, g in pieces.items()}
            graphs = {name: r.graph for name, r in results.items()}
            source = codegen.generate(
                {prefixes[n]: g for n, g in graphs.items()}, title, _header(base), base["checks"], target,
                base["denormals"],
            )  # fmt: skip
            return results, Built(graphs, source.kernels, {module_name: source.slots}, {module_name: source.text})

        label = f"{title} ({len(pieces)} loop-program pieces)"
        cached = load_or_build(key, module_name, out_dir is not None, build, title=label)
        built = cached.built
        module = cached.module(module_name, dev)
        module.built()  # loop programs stay one module, built now
        programs = {}
        for name, g in built.graphs.items():
            mine = [k for k in built.kernels if k.name.startswith(prefixes[name] + "_")]
            plan = ExecutionPlan(g, mine, module, dev, built.slots[module_name], base["checks"], threads=target.threads)
            plan.ready()  # binds the kernels: loop replays record the launches' commands directly
            report = _report(
                pieces[name], {"run": plan}, mine, cached.cache, time.perf_counter() - start, dev, module_name, base
            )
            programs[name] = Program(pieces[name], (), None, dev, {"run": plan}, base["checks"], report, module_name)
            if out_dir is not None:
                shared = [dumps.SharedKernel(function=k.function, launch=k.name) for k in mine]
                dumps.write_all(cached.results[name], out_dir / name, shared)
        if out_dir is not None:
            (out_dir / "kernels").mkdir(parents=True, exist_ok=True)
            (out_dir / "kernels" / f"{module_name}.py").write_text(built.texts[module_name])
        _PIECES[f"{key}:{dev}:{target.threads}"] = programs
        log.info("compiled %d loop-program pieces of %r as one module in %.2f s (cache %s)", len(pieces), title,
                 time.perf_counter() - start, cached.cache)  # fmt: skip
        return programs


def _report(
    graph: Graph,
    plans: dict[str, ExecutionPlan],
    kernels: list[KernelSource],
    cache: CacheState,
    seconds: float,
    dev: str,
    module: str,
    options: dict[str, Any],
) -> ProgramReport:
    return ProgramReport(
        graph=graph.name,
        device=dev,
        options=dict(options),
        module=module,
        cache=cache,
        compile_seconds=seconds,
        launches=len(kernels),
        distinct_kernels=len({k.function for k in kernels}),  # @wp.kernel definitions in the modules
        # per plan, its module's name, whether it is built and its build seconds: `Program.report` reads them live
        builds={name: BuildRow.model_validate(p.module.info) for name, p in plans.items()},
        plans={
            name: PlanRow(
                kernels=len(p.launches),
                distinct_kernels=len({k.function for k in p.kernels}),
                forward_launches=len(p.launches_of("forward")),
                backward_launches=len(p.launches_of("backward")),
                saved_bytes=records.saved_bytes(p.graph),
                workspace_bytes=plan_of(p.graph).scheduled().workspace_bytes,
            )
            for name, p in plans.items()
        },
    )


def _dump(
    out_dir: Path,
    results: dict[str, PipelineResult],
    plans: dict[str, ExecutionPlan],
    texts: dict[str, str],
    report: ProgramReport,
) -> None:
    """The main pipeline (tape when differentiating, else run) at the top level, the
    others in sub-folders, the generated modules (one per pipeline) under ``kernels/``.
    ``fusion.txt`` ends with the pipeline's distinct kernels and the launches that share
    each one. ``report.json`` says which modules are built at compile time: none, they are
    built on first use."""
    main = "tape" if "tape" in results else "run"
    for name, result in results.items():
        shared = [dumps.SharedKernel(function=k.function, launch=k.name) for k in plans[name].kernels]
        dumps.write_all(result, out_dir if name == main else out_dir / name, shared)
    (out_dir / "kernels").mkdir(parents=True, exist_ok=True)
    for name, text in texts.items():
        (out_dir / "kernels" / f"{name}.py").write_text(text)
    full = {**dumps.report(results[main]), "program": report.model_dump(mode="json")}
    (out_dir / "report.json").write_text(json.dumps(full, indent=2, sort_keys=True))

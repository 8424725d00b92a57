"""`dp.compile`: run the pass pipelines, generate one Warp module, cache everything.

A program compiles up to three pipelines of the same graph into one module: ``run``
(forward only), ``value_and_grad`` (the loss seeded with 1 at compile time: forward and
backward fuse) and ``tape`` (cotangent inputs for every float output). Caches:

- in-process: the same graph, wrt, loss, options and device return the same `Program`
  without recompiling;
- on disk (``DPT_IR_CACHE``, default ``~/.cache/dpt_ir``): the scheduled plans and the
  generated module, keyed by a hash of the graph, the options and the dpt_ir and Warp
  versions; a new process skips the passes and Warp reuses its compiled binary. Entries
  carry checksums; a damaged one is logged once, recompiled and replaced
  (`dpt_ir.backends.warp.module`).

Compiles are serialised per process (one lock). Messages go to the ``dpt_ir`` logger
(nothing is printed by default); ``DPT_IR_LOG=info`` or ``debug`` sends them to stderr.
"""

from __future__ import annotations

import dataclasses
import json
import logging
import os
import sys
import threading
import time
from pathlib import Path
from typing import TYPE_CHECKING, Any

import pydantic
import warp as wp

from dpt_ir.autodiff import check_wrt, default_loss
from dpt_ir.backends.warp import codegen, launches
from dpt_ir.backends.warp.launches import KernelSource, StatusSlot
from dpt_ir.backends.warp.module import (
    CacheRecord,
    cache_root,
    content_key,
    import_source,
    load,
    new_record,
    read_entry,
    source_fingerprint,
    warn_once,
    write_entry,
)
from dpt_ir.backends.warp.plan import ExecutionPlan
from dpt_ir.backends.warp.quiet import init_quietly
from dpt_ir.errors import ContractError
from dpt_ir.graph import Graph
from dpt_ir.passes import dumps
from dpt_ir.passes.dumps import resolve_dump_dir
from dpt_ir.runtime import Program

if TYPE_CHECKING:
    from dpt_ir.passes.manager import PipelineResult
from dpt_ir.version import __version__

_PROGRAMS: dict[str, Program] = {}
_COMPILE_LOCK = threading.RLock()  # one compile at a time per process: caches, sys.modules, Warp's loader
log = logging.getLogger("dpt_ir.compile")
# Work per element a stencil may spend recomputing its producers rather than reading them
# from memory (see CompileOptions.halo_budget): the CPU backend runs one thread and is
# compute bound; a GPU is bandwidth bound, so recomputing over the halo pays longer.
CPU_HALO_BUDGET = 48
CUDA_HALO_BUDGET = 160
# Work per element the backward may spend recomputing one forward value before it is saved
# instead (see CompileOptions.recompute_budget). On the one-thread CPU backend a long
# chain of transcendental ops costs more to recompute than to save and read back; on a GPU
# memory traffic is the cost, so CUDA has no limit (saved bytes alone decide).
CPU_RECOMPUTE_BUDGET = 16
CUDA_RECOMPUTE_BUDGET = None


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


def _pipelines(graph: Graph, wrt: tuple[str, ...], loss: str | None, base: dict[str, Any]) -> dict[str, Any]:
    from dpt_ir.passes.options import CompileOptions

    plans: dict[str, CompileOptions] = {"run": CompileOptions(**base)}
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
) -> Program:
    """Compile ``graph`` for ``device``; differentiate wrt the inputs named in ``wrt``.

    ``loss`` names the output `Program.value_and_grad` differentiates (default: the only
    scalar float output). ``checks`` compiles the status word in; ``fuse`` and
    ``recompute`` switch fusion and backward recomputation off (for comparison);
    ``halo_budget`` sets how much work a stencil may spend recomputing its producers
    (default: by device); ``recompute_budget`` how much work the backward may spend
    recomputing one forward value before saving it instead (default: by device; CUDA has
    no limit, a large number lifts it on the CPU). All options are part of the cache key.
    ``threads``: CPU threads per launch (None: the machine's cores; results are the same for
    any count, see `CompileOptions`); it keys the in-process cache only.
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
    if halo_budget is None:
        halo_budget = CPU_HALO_BUDGET if dev == "cpu" else CUDA_HALO_BUDGET
    if recompute_budget is None:
        recompute_budget = CPU_RECOMPUTE_BUDGET if dev == "cpu" else CUDA_RECOMPUTE_BUDGET
    base = {
        "checks": bool(checks),
        "fuse": bool(fuse),
        "recompute": bool(recompute),
        "halo_budget": int(halo_budget),
        "recompute_budget": None if recompute_budget is None else int(recompute_budget),
    }
    if any(n.opdef.kind == "loop" for n in graph.nodes):  # a trait: loop ops compile their bodies once
        from dpt_ir.backends.warp.loop_program import LoopProgram

        loop_dump = resolve_dump_dir(dump_dir)
        return LoopProgram(graph, wrt_names, loss, {"device": dev, **base}, loop_dump)  # type: ignore[return-value]
    key = content_key(
        graph.model_dump_json(),
        json.dumps([wrt_names, loss, base], sort_keys=True),
        "cpu" if dev == "cpu" else "cuda",
        __version__,
        wp.config.version,
        source_fingerprint(),
    )
    out_dir = resolve_dump_dir(dump_dir)
    with _COMPILE_LOCK:
        cached = _PROGRAMS.get(f"{key}:{dev}:{n_threads}")
        if cached is not None and out_dir is None:
            cached.report = {**cached.report, "cache": "memory", "compile_seconds": time.perf_counter() - start}
            return cached
        log.info("compiling %r for %s (cache entry %s)", graph.name, dev, key)
        program = _build(graph, wrt_names, loss, dev, base, key, out_dir, start, n_threads)
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
    threads: int = 1,
) -> Program:
    entry = cache_root() / key
    module_name = f"dpt_ir_gen_{key}"
    results: dict[str, PipelineResult] = {}
    record, text, problem = read_entry(entry, key, module_name)
    if problem is not None:
        warn_once(key, f"cache entry {entry}: {problem}; recompiling and replacing it")
    if record is not None and text is not None and out_dir is None:
        cache = "disk"
        graphs, kernels, slots = _unpack(record)
    else:
        cache = "miss"
        from dpt_ir.passes.manager import run_pipeline

        options = _pipelines(graph, wrt, loss, base)
        results = {name: run_pipeline(graph, opts) for name, opts in options.items()}
        log.debug("compile %r: passes done in %.2f s", graph.name, time.perf_counter() - start)
        graphs = {name: r.graph for name, r in results.items()}
        header = f"dpt_ir {__version__}, warp {wp.config.version}, options {json.dumps(base, sort_keys=True)}"
        source = codegen.generate(
            {_PREFIX[k]: g for k, g in graphs.items()},
            graph.name,
            header,
            base["checks"],
            "cpu" if dev == "cpu" else "cuda",
        )
        kernels, slots, text = source.kernels, source.slots, source.text
    module = import_source(text, entry, module_name)
    loaded_at = time.perf_counter()
    expected = record.warp_files if record is not None else None
    warp_sums = load(module, dev, key, expected, purge=problem is not None)
    log.debug("compile %r: Warp module %s loaded in %.2f s", graph.name, module_name, time.perf_counter() - loaded_at)
    if "tape" in graphs:  # the kernel a tape pass composed with a caller's tape launches
        from dpt_ir.backends.warp import static_kernels

        load(static_kernels, dev, "static_kernels", None, purge=False)
    _store(entry, key, None if cache == "miss" else record, (graphs, kernels, slots), text, warp_sums)
    status_size = max(len(slots), 1) if base["checks"] else 0
    plans = {}
    for name, g in graphs.items():
        mine = [k for k in kernels if k.name.startswith(_PREFIX[name] + "_")]
        plans[name] = ExecutionPlan(g, mine, module, dev, status_size, grad_outputs=name == "tape", threads=threads)
    report = _report(graph, plans, kernels, cache, time.perf_counter() - start, dev, module_name, base)
    program = Program(graph, wrt, loss, dev, plans, slots, base["checks"], report, module_name)
    log.info("compiled %r on %s in %.2f s (cache %s)", graph.name, dev, report["compile_seconds"], cache)
    if out_dir is not None:
        _dump(out_dir, results, plans, text, module_name, report)
    return program


Built = tuple[dict[str, Graph], list[KernelSource], list[StatusSlot]]  # scheduled plans, launches, status slots


def _unpack(record: CacheRecord) -> Built:
    """The plans, launches and status slots a cache record holds."""
    saved = json.loads(record.payload)
    graphs = {k: Graph.model_validate_json(v) for k, v in saved["graphs"].items()}
    return graphs, launches.kernels_from_record(saved["kernels"]), [StatusSlot(**s) for s in saved["slots"]]


def _store(
    entry: Path, key: str, record: CacheRecord | None, built: Built, text: str, warp_sums: dict[str, str]
) -> None:
    """Write the cache entry of a fresh build (``record`` None), or of a loaded record whose
    Warp files changed (they were rebuilt): the payload is serialised only for a new build."""
    if record is None:
        graphs, kernels, slots = built
        payload = json.dumps(
            {
                "graphs": {k: g.model_dump_json() for k, g in graphs.items()},
                "kernels": launches.kernels_record(kernels),
                "slots": [dataclasses.asdict(s) for s in slots],
            }
        )
        record = new_record(key, payload, text)
    if record.warp_files != warp_sums:
        write_entry(entry, CacheRecord.model_validate({**record.model_dump(), "warp_files": warp_sums}))


_PREFIX = {"run": "run", "value_and_grad": "vg", "tape": "tp"}
_PIECES: dict[str, dict[str, Program]] = {}


def compile_pieces(
    title: str, pieces: dict[str, Graph], dev: str, base: dict[str, Any], out_dir: Path | None
) -> dict[str, Program]:
    """Forward-only programs of several graphs (``run`` plans), built as **one** Warp module:
    the pieces of a loop program (its segments, loop bodies and body vjps), so that a loop
    program costs one module build, not one per piece. Cached like `compile`: in process
    by content, and on disk (the scheduled plans and the module; a new process skips the
    passes and Warp reuses its binary)."""
    key = content_key(
        json.dumps({k: g.model_dump_json() for k, g in sorted(pieces.items())}),
        json.dumps(base, sort_keys=True),
        "cpu" if dev == "cpu" else "cuda",
        __version__,
        wp.config.version,
        source_fingerprint(),
    )
    with _COMPILE_LOCK:
        cached = _PIECES.get(f"{key}:{dev}")
        if cached is not None and out_dir is None:
            return cached
        start = time.perf_counter()
        entry, module_name = cache_root() / key, f"dpt_ir_gen_{key}"
        prefixes = {name: f"p{k}" for k, name in enumerate(pieces)}
        record, text, problem = read_entry(entry, key, module_name)
        if problem is not None:
            warn_once(key, f"cache entry {entry}: {problem}; recompiling and replacing it")
        results: dict[str, PipelineResult] = {}
        if record is not None and text is not None and out_dir is None:
            cache = "disk"
            graphs, kernels, slots = _unpack(record)
        else:
            from dpt_ir.passes.manager import run_pipeline

            cache = "miss"
            results = {name: run_pipeline(g, _pipelines(g, (), None, base)["run"]) for name, g in pieces.items()}
            graphs = {name: r.graph for name, r in results.items()}
            header = f"dpt_ir {__version__}, warp {wp.config.version}, options {json.dumps(base, sort_keys=True)}"
            target = "cpu" if dev == "cpu" else "cuda"
            source = codegen.generate(
                {prefixes[n]: g for n, g in graphs.items()}, title, header, base["checks"], target
            )
            kernels, slots, text = source.kernels, source.slots, source.text
        module = import_source(text, entry, module_name)
        warp_sums = load(module, dev, key, record.warp_files if record is not None else None, purge=problem is not None)
        _store(entry, key, None if cache == "miss" else record, (graphs, kernels, slots), text, warp_sums)
        status_size = max(len(slots), 1) if base["checks"] else 0
        programs = {}
        for name, g in graphs.items():
            mine = [k for k in kernels if k.name.startswith(prefixes[name] + "_")]
            plan = ExecutionPlan(g, mine, module, dev, status_size)
            report = _report(
                pieces[name], {"run": plan}, mine, cache, time.perf_counter() - start, dev, module_name, base
            )
            programs[name] = Program(pieces[name], (), None, dev, {"run": plan}, slots, base["checks"], report,
                                     module_name)  # fmt: skip
            if out_dir is not None:
                shared = [dumps.SharedKernel(function=k.function, launch=k.name) for k in mine]
                dumps.write_all(results[name], out_dir / name, shared)
        if out_dir is not None:
            (out_dir / "kernels").mkdir(parents=True, exist_ok=True)
            (out_dir / "kernels" / f"{module_name}.py").write_text(text)
        _PIECES[f"{key}:{dev}"] = programs
        log.info("compiled %d loop-program pieces of %r as one module in %.2f s (cache %s)", len(pieces), title,
                 time.perf_counter() - start, cache)  # fmt: skip
        return programs


def _report(
    graph: Graph,
    plans: dict[str, ExecutionPlan],
    kernels: list[KernelSource],
    cache: str,
    seconds: float,
    dev: str,
    module: str,
    options: dict[str, Any],
) -> dict[str, Any]:
    return {
        "graph": graph.name,
        "device": dev,
        "options": dict(options),
        "module": module,
        "cache": cache,
        "compile_seconds": seconds,
        "launches": len(kernels),
        "distinct_kernels": len({k.function for k in kernels}),  # @wp.kernel definitions in the module
        "plans": {
            name: {
                "kernels": len(p.launches),
                "distinct_kernels": len({k.function for k in p.kernels}),
                "forward_launches": len(p.launches_of("forward")),
                "backward_launches": len(p.launches_of("backward")),
                "saved_bytes": p.graph.meta.get("saved_bytes", 0),
                "workspace_bytes": p.graph.meta["schedule"]["workspace_bytes"],
            }
            for name, p in plans.items()
        },
    }


def _dump(
    out_dir: Path,
    results: dict[str, PipelineResult],
    plans: dict[str, ExecutionPlan],
    text: str,
    module: str,
    report: dict[str, Any],
) -> None:
    """The main pipeline (tape when differentiating, else run) at the top level, the
    others in sub-folders, the generated module under ``kernels/``. ``fusion.txt`` ends
    with the pipeline's distinct kernels and the launches that share each one."""
    main = "tape" if "tape" in results else "run"
    for name, result in results.items():
        shared = [dumps.SharedKernel(function=k.function, launch=k.name) for k in plans[name].kernels]
        dumps.write_all(result, out_dir if name == main else out_dir / name, shared)
    (out_dir / "kernels").mkdir(parents=True, exist_ok=True)
    (out_dir / "kernels" / f"{module}.py").write_text(text)
    full = {**dumps.report(results[main]), "program": report}
    (out_dir / "report.json").write_text(json.dumps(full, indent=2, sort_keys=True))

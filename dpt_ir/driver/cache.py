"""The one disk-cache protocol of the compile driver: what a build made (`Built`), and
`load_or_build`, which both `dp.compile` and the loop programs' `compile_pieces` go through.

Protocol: the entry of ``key`` under `cache_root` is read (`read_entry`); a damaged entry is
logged once, Warp's binaries of its modules are purged and it is rebuilt; a sound entry is
unpacked unless the caller needs the pass results (a dump); otherwise ``build`` runs (the
passes and code generation) and its result is stored (`write_entry`). Warp's checksums of each
module are added to the record as the module is built (`GeneratedModule`).

Assumes: ``key`` hashes everything that shapes the plans and the code (`content_key`).
Guarantees: a hit returns the stored plans, launches, status slots and module texts exactly as
the miss that stored them made them.
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Literal

from dpt_ir.backends import launches
from dpt_ir.backends.launches import KernelSource, StatusSlot
from dpt_ir.ir.graph import Graph
from dpt_ir.runtime.modules import (
    CacheRecord,
    GeneratedModule,
    cache_root,
    new_record,
    purge_warp,
    read_entry,
    warn_once,
    write_entry,
)

if TYPE_CHECKING:
    from dpt_ir.passes.manager import PipelineResult


@dataclasses.dataclass(frozen=True)
class Built:
    """What the passes and code generation made: the scheduled plans, their launches, and
    per generated module its status slots and source (by module name)."""

    graphs: dict[str, Graph]
    kernels: list[KernelSource]
    slots: dict[str, list[StatusSlot]]
    texts: dict[str, str]


@dataclasses.dataclass(frozen=True)
class Cached:
    """A build, from the disk cache (``cache == "disk"``, with the ``record`` read) or made now
    (``"miss"``, with the pass ``results`` for the dumps)."""

    key: str
    entry: Path
    built: Built
    cache: Literal["disk", "miss"]
    record: CacheRecord | None
    results: dict[str, PipelineResult]

    def module(self, name: str, dev: str) -> GeneratedModule:
        """The generated module ``name`` of the entry, not built yet; after a disk hit its Warp
        checksums are checked on the build."""
        expected = self.record.warp_files.get(name) if self.record is not None else None
        return GeneratedModule(name, self.built.texts[name], self.entry, self.key, dev, expected)


Build = Callable[[], "tuple[dict[str, PipelineResult], Built]"]


def load_or_build(key: str, stem: str, need_results: bool, build: Build, title: str | None = None) -> Cached:
    """The build of ``key`` (modules named from ``stem``): read from disk, or made by ``build``
    and stored; ``need_results`` (a dump) always runs ``build``. ``title``: what the entry is
    of, when its graphs are pieces named otherwise (a loop program's; `dpt-ir cache info`
    shows it)."""
    entry = cache_root() / key
    record, texts, problem = read_entry(entry, key)
    if problem is not None:
        warn_once(key, f"cache entry {entry}: {problem}; recompiling and replacing it")
        purge_warp(stem)  # every module's binary: Warp's files of a damaged entry are not trusted either
    if record is not None and texts is not None and not need_results:
        return Cached(key, entry, _unpack(record, texts), "disk", record, {})
    results, built = build()
    _store(entry, key, built, title)
    return Cached(key, entry, built, "miss", None, results)


def _unpack(record: CacheRecord, texts: dict[str, str]) -> Built:
    """The plans, launches and status slots a cache record holds, with its modules' sources."""
    saved = json.loads(record.payload)
    graphs = {k: Graph.model_validate_json(v) for k, v in saved["graphs"].items()}
    slots = {m: [StatusSlot(**s) for s in module_slots] for m, module_slots in saved["slots"].items()}
    return Built(graphs, launches.kernels_from_record(saved["kernels"]), slots, texts)


def _store(entry: Path, key: str, built: Built, title: str | None) -> None:
    """Write the cache entry of a fresh build: the modules' sources, then the record (Warp's
    checksums are added as each module is built)."""
    payload = json.dumps(
        {
            **({} if title is None else {"title": title}),
            "graphs": {k: g.model_dump_json() for k, g in built.graphs.items()},
            "kernels": launches.kernels_record(built.kernels),
            "slots": {m: [dataclasses.asdict(s) for s in module_slots] for m, module_slots in built.slots.items()},
        }
    )
    write_entry(entry, new_record(key, payload, built.texts), built.texts)

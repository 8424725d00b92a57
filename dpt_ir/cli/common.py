"""What the ``dpt-ir`` subcommands share: reading graph documents and input archives, name
lists, progress lines and the compile call (`dpt_ir.cli.commands` and
`dpt_ir.cli.export_cuda` both build on it). Errors are `ContractError`s naming the file."""

from __future__ import annotations

import json
import sys
import zipfile
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.graph import Graph

EXIT_USAGE = 2
EXIT_NUMERICAL = 1


def load_graph(path: str) -> Graph:
    """Read and validate the graph document at ``path``: JSON (``Graph.model_dump_json()``),
    or the textual IR (``Graph.to_text()``, the ``.ir`` files of a dump) when the file
    ends in ``.ir`` or does not start with ``{``.

    Raises ContractError naming the file when it cannot be read, is not JSON, or is not
    a valid graph; the message of a graph error is prefixed with the file name.
    """
    try:
        doc = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        reason = exc.strerror if isinstance(exc, OSError) and exc.strerror else str(exc)
        raise ContractError(f"{path}: cannot read graph file ({reason})") from None
    if path.endswith(".ir") or not doc.lstrip().startswith("{"):
        try:
            return Graph.from_text(doc)
        except ContractError as exc:
            raise ContractError(f"{path}: expected a graph JSON document or textual IR; as textual IR: {exc}") from None
    try:
        json.loads(doc)
    except json.JSONDecodeError as exc:
        raise ContractError(f"{path}: expected a graph JSON document, found invalid JSON ({exc})") from None
    try:
        return Graph.model_validate_json(doc)
    except ContractError as exc:
        raise ContractError(f"{path}: {exc}") from None


def names_of(values: Sequence[str] | None) -> list[str]:
    """Repeated ``--wrt x --wrt y`` and comma lists ``--wrt x,y`` as one list of names."""
    return [n for v in values or () for n in v.split(",") if n]


def progress(message: str) -> None:
    """A progress line on stderr (stdout stays the command's result)."""
    print(message, file=sys.stderr, flush=True)


def compile_graph(graph: Graph, path: str, wrt: list[str], loss: str | None, **kwargs: Any) -> Any:
    """`dp.compile` with a progress line first (the first compile in a process is slow)."""
    from dpt_ir.api.autodiff import check_wrt
    from dpt_ir.driver.compile import compile as dp_compile

    check_wrt(graph, wrt)  # a bad name fails before the slow part
    what = f"{graph.name!r} from {path}" + (f" wrt {wrt}" if wrt else "")
    progress(f"compiling {what} (first compile in a process takes several seconds) ...")
    return dp_compile(graph, wrt=wrt or None, loss=loss, **kwargs)


def load_inputs(path: str) -> dict[str, np.ndarray]:
    """The arrays of the ``.npz`` file at ``path``; ContractError naming the file otherwise."""
    try:
        loaded = np.load(path, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ContractError(f"{path}: expected an .npz archive (np.savez), found a single .npy array")
        with loaded as npz:
            return {name: npz[name] for name in npz.files}
    except ContractError:
        raise
    except OSError as exc:
        reason = exc.strerror if exc.strerror else str(exc)
        raise ContractError(f"{path}: cannot read inputs file ({reason})") from None
    except (ValueError, zipfile.BadZipFile, EOFError) as exc:
        # np.load takes a file without the zip or .npy magic for a pickle, which it refuses.
        detail = "" if "pickle" in str(exc) else f" ({exc})"
        raise ContractError(f"{path}: not an .npz archive of arrays written by np.savez{detail}") from None

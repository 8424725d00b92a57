"""Launch records: what one generated kernel launch binds (`KernelSource`), the flags of
the status word (`StatusSlot`), and their JSON form in the disk cache.

Shared by the C++ path's launch writers (`dpt_ir.backends.cxx`, `codegen`), the
execution plans and the compiler's cache. Guarantees: `kernels_from_record` inverts
`kernels_record`; launch constants are flat NumPy arrays of their Warp type, and a cache
record stores each distinct one once.
"""

from __future__ import annotations

import base64
import hashlib
import re
from dataclasses import dataclass, field, fields
from typing import Any

import numpy as np

STATUS = "$status"
STATUS_BASE = "$status_base"  # scalar kernel argument: the launch's first slot in the status word


@dataclass(frozen=True)
class StatusSlot:
    """One flag of the status word: which kernel and node raise it, and why."""

    kernel: str
    node: str
    op: str
    kind: str  # "domain" or "nonfinite"
    detail: str = ""  # the op's own explanation (e.g. a guard's message)
    origin: str = ""  # the user-level function the node comes from (`dpt_ir.ir.records.origin_of`)


@dataclass
class KernelSource:
    """One launch of a generated kernel: the launch's name (unique, ``<pipeline>_<group>``
    or ``..._final``), the ``@wp.kernel`` it launches (``function``, shared by every launch
    whose kernel text is identical; `generate`), that kernel's source, the buffers this
    launch binds to its parameters in order (value names, `STATUS`, `STATUS_BASE`,
    ``$partial:<value>:<acc>`` scratch buffers, ``$weights:<node>`` constants), its launch
    size and its first slot in the status word."""

    name: str
    text: str
    params: list[str]
    dim: int
    group: str
    partials: dict[str, tuple[str, int]] = field(default_factory=dict)  # param -> (wp type, size)
    constants: dict[str, tuple[str, np.ndarray]] = field(default_factory=dict)  # param -> (wp type, values)
    function: str = ""  # the @wp.kernel launched: the launch's own name, until `_share` points it at an equal one
    status_base: int = 0


_CONSTANT_DTYPES = {"int32": np.int32, "float32": np.float32, "float64": np.float64}


def constant_array(dtype: str, values: Any) -> np.ndarray:
    """A launch constant (stencil weights, index tables, sparse rows) as a flat NumPy array
    of its dtype: built once, bound as a ``wp.array`` without a per-element copy."""
    return np.ascontiguousarray(np.asarray(values).reshape(-1), dtype=_CONSTANT_DTYPES[dtype])


def kernels_record(kernels: list[KernelSource]) -> dict[str, Any]:
    """``kernels`` as JSON-shaped data for the disk cache. Constants are stored once per
    distinct content (the three pipelines of a program bind the same sparse maps and
    weights), as base64 of their little-endian bytes: one string, not a list of numbers,
    since a projector's map has millions of entries."""
    table: dict[str, list[str]] = {}
    launches = []
    for k in kernels:
        record = {f.name: getattr(k, f.name) for f in fields(k)}
        refs = {}
        for p, (t, v) in k.constants.items():
            raw = v.astype(v.dtype.newbyteorder("<"), copy=False).tobytes()
            digest = hashlib.sha256(t.encode() + raw).hexdigest()
            table.setdefault(digest, [t, base64.b64encode(raw).decode("ascii")])
            refs[p] = digest
        record["constants"] = refs
        launches.append(record)
    return {"constants": table, "launches": launches}


def kernels_from_record(data: dict[str, Any]) -> list[KernelSource]:
    """The inverse of `kernels_record`; launches that bound equal constants share one array."""
    arrays = {}
    for digest, (t, text) in data["constants"].items():
        raw = np.frombuffer(base64.b64decode(text), dtype=np.dtype(_CONSTANT_DTYPES[t]).newbyteorder("<"))
        arrays[digest] = (t, raw.astype(_CONSTANT_DTYPES[t]))
    out = []
    for record in data["launches"]:
        constants = {p: arrays[digest] for p, digest in record["constants"].items()}
        partials = {p: (t, int(n)) for p, (t, n) in record["partials"].items()}
        out.append(KernelSource(**{**record, "constants": constants, "partials": partials}))
    return out


def param_name(value: str) -> str:
    return "a_" + re.sub(r"[^A-Za-z0-9_]", "_", value)

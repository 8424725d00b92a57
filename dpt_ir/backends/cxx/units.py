"""The launch unit of a C++ function set: its parameter types, native stub and Warp kernel.

Assumes: parameters are graph values (typed by their dtype) or partials and launch
constants (typed by the dtype they record); the C++ text names its functions with `TOKEN`.
Guarantees: `hashed` names a text by its content; `Unit` writes the signature, the
``func_native`` stub and the kernel that calls it (spelt by the Warp glue,
`dpt_ir.backends.warp.spelling`); `launch` makes the `KernelSource`.
"""

from __future__ import annotations

import hashlib
from collections.abc import Callable
from typing import Any

from dpt_ir.backends.cxx.common import STATE_TYPES, TOKEN
from dpt_ir.backends.warp.spelling import launch_kernel, native_stub
from dpt_ir.ir.graph import Graph
from dpt_ir.ir.records import origin_of

TASK0 = "$task0"  # scalar kernel argument: the launch's first task


def hashed(cxx: str) -> tuple[str, str]:
    """The kernel name of C++ text ``cxx`` (``dpk_`` and 16 hex digits of its SHA-256) and
    the text with every `TOKEN` replaced by it: one text, one name."""
    name = "dpk_" + hashlib.sha256(cxx.encode()).hexdigest()[:16]
    return name, cxx.replace(TOKEN, name)


def _dtype(graph: Graph, p: str, typed: dict[str, tuple[str, Any]]) -> str:
    """The dtype of parameter ``p``: a partial's or constant's own, else its graph value's."""
    return typed[p][0] if p in typed else graph.types[p].dtype


class Unit:
    """One C++ function set and its launch: parameters (values, partials), which are written."""

    def __init__(
        self,
        graph: Graph,
        params: list[str],
        written: set[str],
        partials: dict[str, tuple[str, int]],
        constants: dict[str, tuple[str, Any]] | None = None,
    ):
        self.graph, self.params, self.written = graph, params, written
        # Launch constants (sparse rows, scatter tables), typed as partials are (param -> (dtype, ...)).
        self.constants = constants or {}
        self.typed: dict[str, tuple[str, Any]] = {**partials, **self.constants}

    def _pointer(self, p: str) -> str:
        """The C++ pointer type of parameter ``p`` (const unless the launch writes it)."""
        const = "" if p in self.written else "const "
        return f"{const}{STATE_TYPES[_dtype(self.graph, p, self.typed)]}*"

    def sig(self) -> str:
        return ", ".join(f"{self._pointer(p)} a{k}" for k, p in enumerate(self.params))

    def args(self) -> str:
        return ", ".join(f"a{k}" for k in range(len(self.params)))

    def casts(self) -> str:
        return ", ".join(f"({self._pointer(p)})a{k}.data" for k, p in enumerate(self.params))

    def stub(self, fn: str, cpu: str, cuda: str, checks: bool) -> str:
        """The native stub ``n_<fn>`` calling entry points ``cpu`` and ``cuda`` (Warp glue)."""
        return native_stub(fn, cpu, cuda, self._named(), self.casts(), checks)

    def kernel(self, name: str, fn: str, checks: bool) -> str:
        """The launch kernel ``name`` calling the stub ``n_<fn>`` (Warp glue)."""
        return launch_kernel(name, fn, self._named(), checks)

    def launch_params(self, checks: bool) -> list[str]:
        from dpt_ir.backends.launches import STATUS, STATUS_BASE

        return [*self.params, *([STATUS, STATUS_BASE] if checks else []), TASK0]

    def _named(self) -> list[tuple[str, str, int]]:
        """(argument name, dtype, elements) of each parameter."""
        return [(f"a{k}", _dtype(self.graph, p, self.typed), self._size(p)) for k, p in enumerate(self.params)]

    def _size(self, p: str) -> int:
        """The elements of parameter ``p``: a partial's count, a constant's values, a value's size."""
        if p in self.constants:
            return len(self.constants[p][1])
        return self.typed[p][1] if p in self.typed else self.graph.types[p].size


def launch(
    name: str,
    unit: Unit,
    fn: str,
    checks: bool,
    dim: int,
    group: str,
    partials: dict[str, tuple[str, int]],
    slot_base: int,
) -> Any:
    """The `KernelSource` of a C++ launch: its kernel calls the stub ``n_<fn>``."""
    from dpt_ir.backends.launches import KernelSource, constant_array

    text, params = unit.kernel(name, fn, checks), unit.launch_params(checks)
    constants = {p: (t, constant_array(t, v)) for p, (t, v) in unit.constants.items()}
    return KernelSource(name, text, params, dim, group, partials, constants, name, slot_base)


def status_flag(checks: bool) -> list[str]:
    """The statements ending a driver that ORs non-finite results into ``bad``: the status word
    at ``sb`` when it checks, else nothing read."""
    return ["if (bad) st[sb] = 1;"] if checks else ["(void)bad; (void)st; (void)sb;"]


def single_launch(
    unit: Unit,
    root: str,
    name: str,
    slots: list[Any],
    checks: bool,
    dim: int,
    group: str,
    drivers: Callable[[str], str],
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The one launch of a group lowered as one C++ unit (a contraction, a recurrence) that writes
    ``root`` and reports non-finite results in one status slot: ``drivers(sig)`` gives the unit's
    C++ (named with `TOKEN`, entry points ``_cpu`` and ``_cuda``); the launch and its native
    definition (stub name -> C++ and stub text), as `kernels.group_kernels` gives them."""
    slot_base = root_slot(unit.graph, root, name, slots, checks)
    return unit_launch(unit, name, checks, dim, group, drivers, slot_base)


def root_slot(graph: Graph, root: str, name: str, slots: list[Any], checks: bool) -> int:
    """Where launch ``name``'s status slots start; with ``checks``, its first is ``root``'s
    non-finite result."""
    from dpt_ir.backends.launches import StatusSlot

    slot_base = len(slots)
    if checks:
        op = graph.node_map[root].opdef.name
        slots.append(StatusSlot(name, root, op, "nonfinite", "", origin_of(graph, root)))
    return slot_base


def unit_launch(
    unit: Unit, name: str, checks: bool, dim: int, group: str, drivers: Callable[[str], str], slot_base: int
) -> tuple[list[Any], dict[str, tuple[str, str]]]:
    """The one launch of ``unit`` (C++ from ``drivers(sig)``, status slots from ``slot_base``)
    and its native definition, as `single_launch` gives them."""
    fn, cxx = hashed(drivers(f"{unit.sig()}, int* st, int sb, int t"))
    natives = {fn: (cxx, unit.stub(fn, f"{fn}_cpu", f"{fn}_cuda", checks))}
    return [launch(name, unit, fn, checks, dim, group, {}, slot_base)], natives

"""The launch unit of a C++ function set: its parameter types, native stub and Warp kernel.

Assumes: parameters are graph values (typed by their dtype) or partials and launch
constants (typed by their Warp type); the C++ text names its functions with `TOKEN`.
Guarantees: `hashed` names a text by its content; `Unit` writes the signature, the
``func_native`` stub and the kernel that calls it; `launch` makes the `KernelSource`.
"""

from __future__ import annotations

import hashlib
from typing import Any

from dpt_ir.backends.cxx.common import C_TYPES, TOKEN, WP_TYPES
from dpt_ir.ir.graph import Graph

TASK0 = "$task0"  # scalar kernel argument: the launch's first task
WP_STATE = {"double": "wp.float64", "float": "wp.float32", "int": "wp.int32", "unsigned": "wp.uint32"}
WP_STATE.update({"unsigned char": "wp.uint8", "bool": "wp.bool"})


def hashed(cxx: str) -> tuple[str, str]:
    """The kernel name of C++ text ``cxx`` (``dpk_`` and 16 hex digits of its SHA-256) and
    the text with every `TOKEN` replaced by it: one text, one name."""
    name = "dpk_" + hashlib.sha256(cxx.encode()).hexdigest()[:16]
    return name, cxx.replace(TOKEN, name)


def _ctype(graph: Graph, p: str, partials: dict[str, tuple[str, Any]]) -> str:
    if p in partials:
        return next(c for c, w in WP_STATE.items() if w == partials[p][0])
    return C_TYPES[graph.types[p].dtype]


def _wp_type(graph: Graph, p: str, partials: dict[str, tuple[str, Any]]) -> str:
    return partials[p][0] if p in partials else WP_TYPES[graph.types[p].dtype]


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
        # Launch constants (sparse rows, scatter tables), typed as partials are (param -> (Warp type, ...)).
        self.constants = constants or {}
        self.typed: dict[str, tuple[str, Any]] = {**partials, **self.constants}

    def _pointer(self, p: str) -> str:
        """The C++ pointer type of parameter ``p`` (const unless the launch writes it)."""
        const = "" if p in self.written else "const "
        return f"{const}{_ctype(self.graph, p, self.typed)}*"

    def sig(self) -> str:
        return ", ".join(f"{self._pointer(p)} a{k}" for k, p in enumerate(self.params))

    def args(self) -> str:
        return ", ".join(f"a{k}" for k in range(len(self.params)))

    def casts(self) -> str:
        return ", ".join(f"({self._pointer(p)})a{k}.data" for k, p in enumerate(self.params))

    def stub(self, fn: str, cpu: str, cuda: str, checks: bool) -> str:
        status = "(int*)st.data, sb" if checks else "(int*)0, 0"
        args = ", ".join(f"{a}: wp.array(dtype={_wp_type(self.graph, p, self.typed)})" for a, p in self._named())
        extra = ", st: wp.array(dtype=wp.int32), sb: int" if checks else ""
        call = f"({self.casts()}, {status}, t);"
        return "\n".join(
            [
                "@wp.func_native('''",
                "#if defined(DP_CUDA)",
                f"    {cuda}{call}",
                "#else",
                f"    {cpu}{call}",
                "#endif",
                "''')",
                f"def n_{fn}({args}{extra}, t: int): ...",
            ]
        )

    def kernel(self, name: str, fn: str, checks: bool) -> str:
        arrays = [f"{a}: wp.array(dtype={_wp_type(self.graph, p, self.typed)})" for a, p in self._named()]
        call = [a for a, _ in self._named()]
        if checks:
            arrays += ["a__status: wp.array(dtype=wp.int32)", "a__status_base: wp.int32"]
            call += ["a__status", "a__status_base"]
        sig = ", ".join([*arrays, "a__task0: wp.int32"])
        return f"@wp.kernel\ndef {name}({sig}):\n    n_{fn}({', '.join([*call, 'wp.tid() + a__task0'])})\n"

    def launch_params(self, checks: bool) -> list[str]:
        from dpt_ir.backends.launches import STATUS, STATUS_BASE

        return [*self.params, *([STATUS, STATUS_BASE] if checks else []), TASK0]

    def _named(self) -> list[tuple[str, str]]:
        return [(f"a{k}", p) for k, p in enumerate(self.params)]


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

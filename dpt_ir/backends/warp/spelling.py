"""How a C++ launch is spelt in Warp Python: the glue between the C++ backend's function sets
and the Warp module that builds and launches them.

The C++ backend (`dpt_ir.backends.cxx`) describes a launch in neutral terms: its parameters
with their dpt_ir dtypes (``float32``, ``int32``, …) and C pointer types, its entry points and
whether it writes the status word. This module, the only one that spells Warp for it, writes
the ``@wp.func_native`` stub that calls the C++ and the ``@wp.kernel`` that calls the stub.

Assumes: dtype names Warp has (``wp.<dtype>``). Guarantees: the text is the text the C++
backend wrote itself before this module existed (`tests/backend/test_generated_hashes.py`).
It imports nothing of the package, so the C++ backend's modules may import it.
"""

from __future__ import annotations

from collections.abc import Sequence


def warp_type(dtype: str) -> str:
    """The Warp scalar type of dpt_ir dtype ``dtype`` (``float64`` -> ``wp.float64``)."""
    return f"wp.{dtype}"


def _arrays(params: Sequence[tuple[str, str]]) -> list[str]:
    return [f"{name}: wp.array(dtype={warp_type(dtype)})" for name, dtype in params]


def native_stub(fn: str, cpu: str, cuda: str, params: Sequence[tuple[str, str]], casts: str, checks: bool) -> str:
    """The ``func_native`` stub ``n_<fn>``: it passes ``params`` (argument name, dtype), cast as
    ``casts`` says, the status word and the task to the ``cuda`` or ``cpu`` entry point."""
    status = "(int*)st.data, sb" if checks else "(int*)0, 0"
    extra = ", st: wp.array(dtype=wp.int32), sb: int" if checks else ""
    call = f"({casts}, {status}, t);"
    return "\n".join(
        [
            "@wp.func_native('''",
            "#if defined(DP_CUDA)",
            f"    {cuda}{call}",
            "#else",
            f"    {cpu}{call}",
            "#endif",
            "''')",
            f"def n_{fn}({', '.join(_arrays(params))}{extra}, t: int): ...",
        ]
    )


def launch_kernel(name: str, fn: str, params: Sequence[tuple[str, str]], checks: bool) -> str:
    """The ``@wp.kernel`` ``name``: one thread per task, offset by ``a__task0``, calling the stub
    ``n_<fn>`` with ``params`` (argument name, dtype) and, with ``checks``, the status word."""
    arrays = _arrays(params)
    call = [name_ for name_, _ in params]
    if checks:
        arrays += ["a__status: wp.array(dtype=wp.int32)", "a__status_base: wp.int32"]
        call += ["a__status", "a__status_base"]
    sig = ", ".join([*arrays, "a__task0: wp.int32"])
    return f"@wp.kernel\ndef {name}({sig}):\n    n_{fn}({', '.join([*call, 'wp.tid() + a__task0'])})\n"

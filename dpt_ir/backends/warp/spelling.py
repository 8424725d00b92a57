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

AXIS_LIMIT = 2**31 - 1  # the most elements an axis of a Warp array holds
# A buffer of more than `AXIS_LIMIT` elements is bound as a 2-D array of rows of this many
# elements (`array_shape`); the C++ reads only its data pointer, so the rows are invisible to it.
WIDE_ROW = 2**20


def array_shape(size: int) -> tuple[int, ...]:
    """The shape of the Warp array that holds a flat buffer of ``size`` elements: ``(size,)``,
    or past `AXIS_LIMIT` rows of `WIDE_ROW` (the last padded: allocate at least this much)."""
    return (size,) if size <= AXIS_LIMIT else (-(-size // WIDE_ROW), WIDE_ROW)


def warp_type(dtype: str) -> str:
    """The Warp scalar type of dpt_ir dtype ``dtype`` (``float64`` -> ``wp.float64``)."""
    return f"wp.{dtype}"


def _arrays(params: Sequence[tuple[str, str, int]]) -> list[str]:
    """Annotations of (argument name, dtype, elements): a buffer past `AXIS_LIMIT` elements is
    a 2-D array (`array_shape`)."""
    return [
        f"{name}: wp.array{'' if size <= AXIS_LIMIT else '2d'}(dtype={warp_type(dtype)})"
        for name, dtype, size in params
    ]


def native_stub(fn: str, cpu: str, cuda: str, params: Sequence[tuple[str, str, int]], casts: str, checks: bool) -> str:
    """The ``func_native`` stub ``n_<fn>``: it passes ``params`` (argument name, dtype, elements), cast as
    ``casts`` says, the status word and the task to the ``cuda`` or ``cpu`` entry point."""
    status = "(int*)st.data, sb" if checks else "(int*)0, 0"
    extra = ", st: wp.array(dtype=wp.int32), sb: int" if checks else ""
    call = f"({casts}, {status}, t);"
    return "\n".join(
        [
            "@wp.func_native('''",
            "#if defined(DP_CUDA)",
            f"    {cuda}{call}",
            "#else",  # the CPU's floating-point mode for the call (`dp_fp_enter`: denormals)
            f"    {{ const unsigned dp_fp = dp_fp_enter(); {cpu}{call} dp_fp_leave(dp_fp); }}",
            "#endif",
            "''')",
            f"def n_{fn}({', '.join(_arrays(params))}{extra}, t: int): ...",
        ]
    )


def launch_kernel(name: str, fn: str, params: Sequence[tuple[str, str, int]], checks: bool) -> str:
    """The ``@wp.kernel`` ``name``: one thread per task, offset by ``a__task0``, calling the stub
    ``n_<fn>`` with ``params`` (argument name, dtype, elements) and, with ``checks``, the status word."""
    arrays = _arrays(params)
    call = [name_ for name_, _, _ in params]
    if checks:
        arrays += ["a__status: wp.array(dtype=wp.int32)", "a__status_base: wp.int32"]
        call += ["a__status", "a__status_base"]
    sig = ", ".join([*arrays, "a__task0: wp.int32"])
    return f"@wp.kernel\ndef {name}({sig}):\n    n_{fn}({', '.join([*call, 'wp.tid() + a__task0'])})\n"

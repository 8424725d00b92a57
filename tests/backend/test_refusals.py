"""The C++ backend's refusal names the user's problem (issue 27): the ``dp.*`` function, the
tensor and what is unsupported, never an internal function of the package.

Before: every refusal read ``found a combination of ops and reads that
`dpt_ir.backends.cxx.nest.cover` refuses``, for a zero-size axis and for a tensor past 2**31
elements alike. Zero-size axes no longer reach the backend; a tensor past the 32-bit index
range takes 64-bit indices (`tests/backend/test_wide_index.py`) where the kernel's parts
have them, and is named with its size and the limit where they do not (a gather) or where
no Warp array binds it. No other graph is known that `cover` refuses, so the last message
is checked on a group the backend is made to refuse.
"""

from __future__ import annotations

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.base import Target
from dpt_ir.backends.cxx import nest
from dpt_ir.backends.warp import codegen
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions


def _internal_free(message: str) -> None:
    assert "dpt_ir." not in message and "nest.cover" not in message, message


def test_a_tensor_past_the_64_bit_binding_is_named_with_its_size_and_the_limit() -> None:
    """Compiling allocates nothing (the input is never made): the refusal is raised by
    `dp.compile`, naming the input, its element count and the limit (a buffer is bound as at
    most 2**31 - 1 Warp rows of 2**20 elements)."""
    g = dp.GraphBuilder("past_binding")
    x = g.input("x", (2**31, 2**21), "uint8")
    g.output("total", dp.sum(x))
    with pytest.raises(dp.ContractError) as info:
        dp.compile(g.build(), device="cpu")
    message = str(info.value)
    assert "input 'x' of shape [2147483648, 2097152], 4503599627370496 elements" in message
    assert f"at most {nest.WIDE_LIMIT} elements" in message
    _internal_free(message)


def test_a_gather_from_a_tensor_past_the_32_bit_range_is_named_with_its_size_and_the_limit() -> None:
    """A gather's positions stay 32-bit: a group taking from a tensor past the 32-bit range is
    refused, naming the function, the input, its element count and the limit (it used to be
    covered: its space is small)."""
    g = dp.GraphBuilder("take_past_int32")
    x = g.input("x", (2**31 + 8,), "float32")
    i = g.input("i", (4,), "int32", requires_grad=False)
    g.output("y", dp.sum(dp.take(x, i)))
    with pytest.raises(dp.ContractError) as info:
        dp.compile(g.build(), device="cpu")
    message = str(info.value)
    assert message.startswith("dp.take: ") and "input 'x' of shape [2147483656], 2147483656 elements" in message
    assert "past the 2146435072 (2**31 - 2**20) elements of 32-bit indexing, in a group of dp.take" in message
    _internal_free(message)


def _scheduled(graph: dp.Graph) -> dp.Graph:
    return run_pipeline(graph, CompileOptions(expand=True)).graph


def test_a_refused_combination_names_the_user_functions(monkeypatch: pytest.MonkeyPatch) -> None:
    """A composite's group refused (the backend made to refuse every group): the message
    starts with the ``dp.*`` function and says what the backend does not lower."""
    g = dp.GraphBuilder("refused")
    x = g.input("x", (4, 5), "float32")
    obs = g.input("obs", (4, 5), "float32", requires_grad=False)
    g.output("loss", dp.poisson_deviance(dp.exp(x), obs))
    graph = _scheduled(g.build())
    group = plan_of(graph).groups[0]
    reason = nest.missing_lowering(graph, group)
    assert reason.startswith("dp.poisson_deviance over a ") and "does not lower" in reason
    _internal_free(reason)
    monkeypatch.setattr(codegen.cxx_kernels, "group_kernels", lambda *args, **kwargs: None)
    monkeypatch.setattr(codegen.cxx_rows, "starting_at", lambda *args, **kwargs: None)
    with pytest.raises(dp.ContractError) as info:
        codegen.generate({"run": graph}, graph.name, "", True, Target.for_device("cpu", 1, None, None))
    message = str(info.value)
    assert message.startswith("dp.poisson_deviance: kernel group ")
    assert "expected a group the C++ backend lowers, found dp.poisson_deviance over a " in message
    _internal_free(message)


def test_primitive_ops_are_named_by_op() -> None:
    """Nodes without a recorded origin (the one-op ``dp.*`` functions) are named by op."""
    g = dp.GraphBuilder("primitive")
    x = g.input("x", (3, 4), "float32")
    g.output("y", dp.sum(dp.exp(x), axis=1))
    graph = _scheduled(g.build())
    reason = nest.missing_lowering(graph, plan_of(graph).groups[0])
    assert reason.startswith("op 'exp', op 'sum' over a reduction space of shape [3, 4]")
    np.testing.assert_equal(nest.INDEX_LIMIT, 2**31 - 2**20)

"""64-bit indexing for tensors past the 32-bit range (issue 27), chosen per kernel.

Before: a tensor of more than `nest.INDEX_LIMIT` (2**31 - 2**20) elements was refused at
compile. Now a kernel whose space or any tensor it reads or writes is past it indexes with
``long long`` (`Nest.index`), and a buffer past Warp's per-axis limit is bound as a 2-D
Warp array of `spelling.WIDE_ROW`-element rows (the C++ reads only its pointer). Every other
kernel keeps ``int`` and its text (`test_generated_hashes`). Runs that need the memory of
such a tensor skip, saying why, when the machine lacks it.
"""

from __future__ import annotations

import os
import re

import numpy as np
import pytest
import warp as wp

import dpt_ir as dp
from dpt_ir.backends.cxx import nest

N = 2**31 + 8  # past both 32-bit indexing and Warp's 2**31 - 1 elements per axis
GIB = 2**30


def _available() -> int:
    """Bytes of memory available to this process's machine (MemAvailable), 0 if unknown."""
    try:
        with open("/proc/meminfo") as f:
            found = re.search(r"MemAvailable:\s+(\d+) kB", f.read())
    except OSError:
        return 0
    return int(found.group(1)) * 1024 if found else 0


@pytest.fixture
def optimised(monkeypatch: pytest.MonkeyPatch) -> None:
    """The tests build at -O0 (`tests/conftest.py`); a pass over 2**31 elements built so takes
    10 s or more, built at -O2 under a second."""
    monkeypatch.setattr(wp.config, "optimization_level", 2)


def _needs(nbytes: int) -> None:
    if _available() < nbytes:
        pytest.skip(f"needs {nbytes / GIB:.1f} GiB of free memory for a tensor past 2**31 elements; "
                    f"{_available() / GIB:.1f} GiB available")  # fmt: skip


def _kernels(program: dp.Program) -> dict[str, str]:
    """Element function (``dpk_<hash>``) -> its index type, over every plan's module."""
    out = {}
    for plan in program.plans.values():
        text = plan.module.text
        for fn in re.findall(r"DP_FN void (dpk_\w+)_elem\(([^)]*)\)", text):
            out[fn[0]] = "long long" if "long long i" in fn[1] else "int"
    return out


def _byte_sum() -> dp.Graph:
    g = dp.GraphBuilder("bytes_past_int32")
    x = g.input("x", (N,), "uint8")
    g.output("total", dp.sum(x))
    return g.build()


def _scaled_sum() -> dp.Graph:
    """``sum(s * x)`` over bytes past 2**31: its gradient wrt ``s`` is a 64-bit reduction too."""
    g = dp.GraphBuilder("scaled_past_int32")
    x = g.input("x", (N,), "uint8", requires_grad=False)
    s = g.input("s", (), "float32")
    small = g.input("small", (5, 7), "float32")
    g.output("loss", dp.sum(s * dp.astype(x, "float32")) + dp.sum(dp.exp(small)))
    return g.build()


MARKS = {0: 1, 2**30: 11, 2**31 - 1: 3, 2**31: 5, N - 1: 7}  # either side of 2**31, and the last element


def _bytes() -> np.ndarray:
    """Zeros but at `MARKS`: untouched pages cost neither time nor resident memory (a page
    written costs a fault: a stride of marks over the whole input took 17 s here)."""
    a = np.zeros(N, np.uint8)
    for at, v in MARKS.items():
        a[at] = v
    return a


EXPECTED = sum(MARKS.values())


def test_the_index_type_is_chosen_per_kernel() -> None:
    """Compiling allocates nothing: the big kernels index with long long, the small ones
    (the partials' fold, a small input's sum) with int, in the same module."""
    program = dp.compile(_scaled_sum(), wrt=["s", "small"], device="cpu")
    types = set(_kernels(program).values())
    assert types == {"int", "long long"}, types
    text = program.plans["run"].module.text
    assert ": wp.array2d(dtype=wp.uint8)" in text  # bound as rows: 2**31 + 8 elements on one axis
    assert "const int o = t;" in text  # the ordered fold of the partials stays 32-bit


def test_a_slice_of_a_tensor_past_the_limit_takes_64_bit_offsets() -> None:
    """A small kernel reading a huge input (a slice of it: offsets past 2**31) used to be
    refused; its offsets are now 64-bit."""
    g = dp.GraphBuilder("slice_past_int32")
    x = g.input("x", (3, 2**30), "float32")
    g.output("y", dp.exp(x[2, -4:]))
    program = dp.compile(g.build(), device="cpu")
    assert set(_kernels(program).values()) == {"long long"}


def test_bytes_past_2_31_sum_right(optimised: None) -> None:
    """A ``(2**31 + 8,)`` uint8 input: the sum (int32, the dtype rule) counts the elements
    past 2**31 too. About 2 GiB, mostly zero pages."""
    _needs(3 * GIB)
    program = dp.compile(_byte_sum(), device="cpu")
    np.testing.assert_equal(program.run(x=_bytes())["total"], EXPECTED)


def test_the_gradient_of_a_sum_past_2_31_is_right(optimised: None) -> None:
    _needs(3 * GIB)
    program = dp.compile(_scaled_sum(), wrt=["s", "small"], device="cpu")
    small = np.linspace(-1, 1, 35, dtype=np.float32).reshape(5, 7)
    out, grads = program.value_and_grad(x=_bytes(), s=np.float32(2.0), small=small)
    np.testing.assert_allclose(out["loss"], 2 * EXPECTED + np.exp(small.astype(np.float64)).sum(), rtol=1e-6)
    np.testing.assert_equal(grads["s"], np.float32(EXPECTED))
    np.testing.assert_allclose(grads["small"], np.exp(small), rtol=1e-6)


def test_a_float32_field_past_2_31_sums_right_along_every_axis(optimised: None) -> None:
    """A ``(40000, 60000)`` float32 input (2.4e9 elements, 9.6 GB of zero pages: almost
    none resident): the whole sum (partials of one 64-bit row), column sums (a 64-bit column
    nest) and row maxima (rows at 64-bit offsets: row 39999 starts past 2**31)."""
    _needs(2 * GIB)
    g = dp.GraphBuilder("field_forward_past_int32")
    x = g.input("x", (40000, 60000), "float32", requires_grad=False)
    g.output("total", dp.sum(x))
    g.output("cols", dp.sum(x, axis=0))
    g.output("rows", dp.max(x, axis=1))
    program = dp.compile(g.build(), device="cpu")
    assert set(_kernels(program).values()) == {"long long"}
    field = np.zeros((40000, 60000), np.float32)
    marks = {(0, 0): 1.0, (20000, 5): 2.0, (35791, 23456): 4.0, (39999, 59999): 8.0}
    for at, v in marks.items():
        field[at] = v
    out = program.run(x=field)
    np.testing.assert_equal(out["total"], np.float32(15))
    np.testing.assert_equal(out["cols"][[0, 5, 23456, 59999]], [1, 2, 4, 8])
    np.testing.assert_equal(out["rows"][[0, 20000, 35791, 39999]], [1, 2, 4, 8])
    np.testing.assert_equal([out["cols"].sum(), out["rows"].sum()], [15, 15])


BIG = os.environ.get("DPT_IR_BIG_MEMORY") == "1"


@pytest.mark.skipif(not BIG, reason="a (40000, 60000) float32 input, its gradient and the workspace's gradient "
                    "buffer take 27 GiB: set DPT_IR_BIG_MEMORY=1 on a machine with 32 GiB free")  # fmt: skip
def test_a_float32_field_past_2_31_has_the_right_sum_and_gradient(optimised: None) -> None:
    _needs(28 * GIB)
    g = dp.GraphBuilder("field_past_int32")
    x = g.input("x", (40000, 60000), "float32")
    g.output("loss", dp.sum(x))
    program = dp.compile(g.build(), wrt=["x"], device="cpu")
    x_np = np.ones((40000, 60000), np.float32)
    x_np[-1, -1] = 2.0**31  # the last element, past 2**31
    out, grads = program.value_and_grad(x=x_np)
    np.testing.assert_allclose(out["loss"], 2.4e9 - 1 + 2.0**31, rtol=1e-6)
    assert grads["x"].shape == (40000, 60000)
    np.testing.assert_equal(grads["x"][::4000, ::6000], 1)
    np.testing.assert_equal(grads["x"][-1, -8:], 1)


@pytest.mark.skipif(not BIG, reason="writes a (2**31 + 8,) uint8 output twice (the workspace's, the copy returned): "
                    "4.3 GiB resident, 18 s where a fresh page costs a fault; set DPT_IR_BIG_MEMORY=1")  # fmt: skip
def test_an_output_past_the_per_axis_limit_is_returned_whole(optimised: None) -> None:
    """An output of more than 2**31 - 1 elements on one axis has no Warp array in its shape:
    the workspace's flat buffer (rows of 2**20) is returned through a NumPy view."""
    _needs(6 * GIB)
    g = dp.GraphBuilder("bytes_out_past_int32")
    x = g.input("x", (N,), "uint8")
    g.output("y", x * 2)
    y = dp.compile(g.build(), device="cpu").run(x=_bytes())["y"]
    assert y.shape == (N,) and y.dtype == np.uint8
    np.testing.assert_equal([y[at] for at in MARKS], [2 * v for v in MARKS.values()])
    np.testing.assert_equal([y[12345], y[2**31 + 4]], [0, 0])


def test_the_limits_are_the_documented_ones() -> None:
    np.testing.assert_equal(nest.INDEX_LIMIT, 2**31 - 2**20)
    np.testing.assert_equal(nest.WIDE_LIMIT, (2**31 - 1) * 2**20)


def _forced(graph: dp.Graph) -> dp.Graph:
    """``graph`` renamed: its programs compiled with a lowered limit are cached apart."""
    return graph.model_copy(update={"name": f"wide_{graph.name}"})


def _kinds() -> dp.Graph:
    """A pointwise store, row reductions, one long row split into partials (300000 elements:
    5 CPU tasks) and a normalisation over rows."""
    g = dp.GraphBuilder("kinds")
    x = g.input("x", (6, 50000), "float32")
    y = dp.exp(-0.5 * x)
    g.output("y", y)
    g.output("rows", dp.logsumexp(x, axis=1))
    g.output("soft", dp.exp(x - dp.max(x, axis=1, keepdims=True)) / dp.sum(dp.exp(x), axis=1, keepdims=True))
    g.output("loss", dp.sum(dp.square(y)) + dp.sum(dp.max(x, axis=1)))
    return g.build()


def test_64_bit_kernels_give_the_bits_of_32_bit_ones(monkeypatch: pytest.MonkeyPatch) -> None:
    """Every driver kind's 64-bit text (the limit lowered so that these small kernels take it),
    with column reductions (`test_cxx_columns`' graph), computes the same bits as its 32-bit
    text: same partition, same fold orders."""
    from .test_cxx_columns import columns_graph, feed

    cases = [(_kinds(), "loss", {"x": np.random.default_rng(3).uniform(-2, 2, (6, 50000)).astype(np.float32)}),
             (columns_graph(), "loss", feed(1))]  # fmt: skip
    plain = [dp.compile(g, wrt=["x"], loss=loss, device="cpu").value_and_grad(**ins) for g, loss, ins in cases]
    monkeypatch.setattr(nest, "INDEX_LIMIT", 16)
    for (g, loss, ins), (want_out, want_grads) in zip(cases, plain, strict=True):
        program = dp.compile(_forced(g), wrt=["x"], loss=loss, device="cpu")
        assert "long long" in _kernels(program).values(), g.name  # (kernels of at most 16 elements keep int)
        out, grads = program.value_and_grad(**ins)
        for name, v in want_out.items():
            np.testing.assert_array_equal(out[name], v, err_msg=f"{g.name}: {name}")
        np.testing.assert_array_equal(grads["x"], want_grads["x"], err_msg=g.name)

"""`dp.matmul` and ``@`` (`dpt_ir.api.linalg`, the ``matmul`` op) against ``np.matmul``: values
for 2-D, batched (broadcast), 1-D and odd-sized operands, interpreter gradients against
central finite differences (float64) and the analytic ``gy @ b.T`` / ``a.T @ gy``, compiled
(the C++ path's CPU drivers) against interpreted (one program for every shape, float64 and
float32), float32 products bit for bit in the documented summation order, the CPU micro
kernel vectorised (an object-file census), one contraction kernel per product (forward,
and one per gradient) on the C++ path, bit-identical runs and thread counts with no
atomics, and the ContractErrors of bad shapes. The CUDA driver is checked in
tests/backend/test_matmul_cuda.py."""

from __future__ import annotations

import os
import re
import subprocess
from fractions import Fraction
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from dpt_ir.backends.cxx.contraction import KB, contraction_of, cpu_blocking
from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.passes.options import CompileOptions
from tests.backend.harness import off_cxx
from tests.backend.test_vectorised import OBJDUMP, build, generated

SHAPES = [
    ((3, 4), (4, 5)),
    ((2, 3, 4), (4, 2)),
    ((2, 1, 3, 4), (5, 4, 2)),
    ((4,), (4, 5)),
    ((3, 4), (4,)),
    ((4,), (4,)),
    ((2, 3, 4), (4,)),
    ((33, 17), (17, 65)),  # odd sizes: not multiples of any tile or row block
    ((9, 300), (300, 70)),  # k past one float32 k block (KB = 256): sums cross from float32 to float64
    ((37, 40), (40, 64)),  # B read in place (`Blocking.b_pitch`), with edge rows
    ((2, 9, 16), (2, 16, 32)),  # B read in place, one matrix per batch
]
# The float32 products compiled (2-D, batch broadcast, odd, k past a block): float32 reaches the
# kernels' blocked accumulation; the other shapes' indexing is dtype-independent (float64 has them
# all), and each distinct product costs the C++ compiler about a second.
FLOAT32_SHAPES = (0, 2, 7, 8, 9, 10)
RNG = np.random.default_rng(5)


def _shapes(dtype: str) -> list[int]:
    return list(FLOAT32_SHAPES) if dtype == "float32" else list(range(len(SHAPES)))


def _graph(*dtypes: str) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    """The shape pairs of each dtype (`_shapes`) in one graph: outputs ``o<k>``
    (``<dtype>_o<k>`` when several dtypes) and a loss summing ``sum(o * s)`` over all of them."""
    g = dp.GraphBuilder("matmul")
    feed: dict[str, np.ndarray] = {}
    rng = np.random.default_rng(7)
    loss = None
    for dtype in dtypes:
        pre = f"{dtype}_" if len(dtypes) > 1 else ""
        for k in _shapes(dtype):
            sa, sb = SHAPES[k]
            a, b = g.input(f"{pre}a{k}", sa, dtype), g.input(f"{pre}b{k}", sb, dtype)
            out = a @ b if k % 2 else dp.matmul(a, b)
            s = g.input(f"{pre}s{k}", out.shape, dtype, requires_grad=False)
            g.output(f"{pre}o{k}", out)
            term = dp.cast(dp.sum(out * s), "float64")
            loss = term if loss is None else loss + term
            for name, shape in ((f"{pre}a{k}", sa), (f"{pre}b{k}", sb), (f"{pre}s{k}", out.shape)):
                feed[name] = rng.standard_normal(shape).astype(dtype)
    assert loss is not None
    g.output("loss", loss)
    return g.build(), feed


WRT = [f"{x}{k}" for k in range(len(SHAPES)) for x in "ab"]


def test_values_equal_numpy() -> None:
    graph, feed = _graph("float64")
    out = dp.interpret(graph, **feed)
    for k in range(len(SHAPES)):
        expected = np.matmul(feed[f"a{k}"], feed[f"b{k}"])
        assert out[f"o{k}"].shape == expected.shape, k
        np.testing.assert_allclose(out[f"o{k}"], expected, rtol=1e-13, atol=1e-14)


def test_integers_and_rmatmul() -> None:
    g = dp.GraphBuilder("ints")
    a, b = g.input("a", (2, 3), "int32"), g.input("b", (3, 2), "int32")
    g.output("p", b.__rmatmul__(a))
    x, y = np.arange(6, dtype=np.int32).reshape(2, 3), np.arange(6, dtype=np.int32).reshape(3, 2) - 2
    out = dp.interpret(g.build(), a=x, b=y)["p"]
    assert out.dtype == np.int32
    np.testing.assert_array_equal(out, x @ y)


def test_gradients_match_finite_differences_and_transposes() -> None:
    graph, feed = _graph("float64")
    grads = dp.interpret_grad(graph, WRT, seed={"loss": 1.0}, **feed)
    a, b, s = feed["a0"], feed["b0"], feed["s0"]
    np.testing.assert_allclose(grads["a0"], s @ b.T, rtol=1e-13)
    np.testing.assert_allclose(grads["b0"], a.T @ s, rtol=1e-13)
    h = 1e-6
    for name in ("a2", "b2", "a3", "b4", "a5", "b6"):  # batched broadcast and 1-D operands
        x = feed[name]
        fd = np.zeros_like(x)
        for i in np.ndindex(x.shape):
            up, down = x.copy(), x.copy()
            up[i] += h
            down[i] -= h
            hi = dp.interpret(graph, **{**feed, name: up})["loss"]
            lo = dp.interpret(graph, **{**feed, name: down})["loss"]
            fd[i] = (hi - lo) / (2 * h)
        np.testing.assert_allclose(grads[name], fd, rtol=1e-6, atol=1e-8, err_msg=name)


@pytest.fixture(scope="module")
def compiled() -> tuple[dp.Graph, dict[str, np.ndarray], list[str], dp.Program]:
    """Every shape in float64 and `FLOAT32_SHAPES` in float32, one program."""
    graph, feed = _graph("float64", "float32")
    wrt = [f"{d}_{x}{k}" for d in ("float64", "float32") for k in _shapes(d) for x in "ab"]
    return graph, feed, wrt, dp.compile(graph, wrt=wrt, loss="loss", device="cpu")


def test_compiled_equals_interpreter(compiled: tuple[dp.Graph, dict[str, np.ndarray], list[str], dp.Program]) -> None:
    graph, feed, wrt, program = compiled
    out, grads = program.value_and_grad(**feed)
    expected = dp.interpret(graph, **feed)
    expected_grads = dp.interpret_grad(graph, wrt, seed={"loss": 1.0}, **feed)
    # The interpreter sums in float64 and rounds once; the kernels sum float32 in float32 within a
    # k block: each float32 product is within the documented bound of the exact one
    # (`_within_bound`), and the float64 loss over them and the float32 gradients within 1e-5.
    rtol = {"float64": 1e-12, "float32": 1e-5}
    for k in FLOAT32_SHAPES:
        _within_bound(out[f"float32_o{k}"], feed[f"float32_a{k}"], feed[f"float32_b{k}"])
    for got, want in ((out, expected), (grads, expected_grads)):
        for name, value in want.items():
            if name.startswith("float32_o"):
                continue  # checked against the bound above
            tol = rtol["float32" if "float32" in name or name == "loss" else str(value.dtype)]
            np.testing.assert_allclose(got[name], value, rtol=tol, atol=tol, err_msg=name)
    for k in range(len(SHAPES)):
        a, b = feed[f"float64_a{k}"], feed[f"float64_b{k}"]
        np.testing.assert_allclose(out[f"float64_o{k}"], np.matmul(a, b), rtol=1e-12, atol=1e-12, err_msg=str(k))


def test_each_product_is_one_contraction_kernel(
    compiled: tuple[dp.Graph, dict[str, np.ndarray], list[str], dp.Program],
) -> None:
    """A product, forward or gradient, is one ``matmul`` node in a contraction group of its
    own; gradients read the operands through transpose flags, not transposed copies."""
    program = compiled[3]
    n = len(SHAPES) + len(FLOAT32_SHAPES)
    for plan, products in (("run", n), ("value_and_grad", 3 * n)):
        run = program.plans[plan].graph
        groups = [g for g in plan_of(run).groups if g.kind == "contraction"]
        assert len(groups) == products, plan
        assert all(len(g.nodes) == 1 and run.node_map[g.nodes[0]].op == "matmul" for g in groups), plan
        assert not any(node.op == "transpose" for node in run.nodes), plan
    # The gradients' computed operand (the cotangent) is written first, and fusion.txt says why.
    reasons = [b.reason for b in plan_of(program.plans["value_and_grad"].graph).boundaries]
    assert any("an operand of the contraction" in r for r in reasons), reasons


def _within_bound(got: np.ndarray, a: np.ndarray, b: np.ndarray) -> None:
    """The documented error bound of a float32 product (docs/backend.md): ``|C - A B| <=
    (KB u + u) |A| |B|`` elementwise (``u = 2**-24``: each k block's float32 sum errs by at most
    ``KB u`` of its terms' magnitudes, the float64 sum of the blocks adds nothing at this scale, and
    the final rounding ``u |C|``)."""
    a64, b64 = a.astype(np.float64), b.astype(np.float64)
    exact, size = np.matmul(a64, b64), np.matmul(np.abs(a64), np.abs(b64))
    u = 2.0**-24
    assert np.all(np.abs(got - exact) <= (KB * u + u) * size + 1e-30), np.max(np.abs(got - exact) / size)


def _round_f32(x: Fraction) -> float:
    """``x`` rounded once to float32 (to nearest, ties to even): what a float32 FMA returns."""
    if x == 0:
        return 0.0
    sign, x = (-1.0 if x < 0 else 1.0), abs(x)
    e = x.numerator.bit_length() - x.denominator.bit_length()  # 2**e <= x < 2**(e + 2)
    e = e if Fraction(2) ** e <= x else e - 1
    e = max(e, -126)  # subnormals keep the smallest exponent
    scaled = x / Fraction(2) ** (e - 23)  # 24 significant bits before the point
    q, r = divmod(scaled.numerator, scaled.denominator)
    if 2 * r > scaled.denominator or (2 * r == scaled.denominator and q % 2):
        q += 1
    return sign * float(Fraction(q) * Fraction(2) ** (e - 23))


def _in_order(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """``np.matmul`` of float32 operands in the kernels' documented order, exactly: per element,
    ``p`` ascending in blocks of `KB` steps; within a block a float32 sum from 0 advanced by one
    float32 FMA per step (rounded once, exact arithmetic here); the block sums added in float64
    in block order (exact: a float32 sum is exact in float64 and the running sum's rounding is
    float64's own); the total rounded once to float32."""
    x = a[None, :] if a.ndim == 1 else a
    y = b[:, None] if b.ndim == 1 else b
    shape = np.broadcast_shapes(x.shape[:-2], y.shape[:-2])
    x, y = np.broadcast_to(x, shape + x.shape[-2:]), np.broadcast_to(y, shape + y.shape[-2:])
    out = np.zeros(shape + (x.shape[-2], y.shape[-1]), dtype=np.float32)
    k = x.shape[-1]
    for idx in np.ndindex(out.shape):
        row, col = x[idx[:-2] + (idx[-2],)], y[idx[:-2] + (slice(None), idx[-1])]
        total = 0.0
        for p0 in range(0, k, KB):
            s = 0.0
            for p in range(p0, min(p0 + KB, k)):
                s = _round_f32(Fraction(float(row[p])) * Fraction(float(col[p])) + Fraction(s))
            total += s
        out[idx] = np.float32(total)
    out = out[..., 0, :] if a.ndim == 1 else out
    return out[..., 0] if b.ndim == 1 else out


def test_float32_products_are_the_documented_order_bit_for_bit(
    compiled: tuple[dp.Graph, dict[str, np.ndarray], list[str], dp.Program],
) -> None:
    _, feed, _, program = compiled
    out, grads = program.value_and_grad(**feed)  # the products of the forward (`run` would build another module)
    for k in FLOAT32_SHAPES:
        want = _in_order(feed[f"float32_a{k}"], feed[f"float32_b{k}"])
        assert np.array_equal(out[f"float32_o{k}"], want), k
    # The gradients of the 2-D products: ``s Bᵀ`` (B read through a transpose flag, packed along
    # its columns) and ``Aᵀ s`` (A read in place through one), the cotangent being ``s`` exactly.
    for k in (0, 7, 8, 9):
        a, b, s = (feed[f"float32_{x}{k}"] for x in "abs")
        assert np.array_equal(grads[f"float32_a{k}"], _in_order(s, b.T)), k
        assert np.array_equal(grads[f"float32_b{k}"], _in_order(a.T, s)), k


def _in_order64(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """A 2-D float64 product in the kernels' documented order, exactly: per element ``s = 0``,
    then ``s = fma(a_p, b_p, s)`` for ``p`` ascending (one rounding per step: the exact value
    rounded by ``float(Fraction)``, which rounds to nearest)."""
    out = np.zeros((a.shape[0], b.shape[1]))
    for i, j in np.ndindex(out.shape):
        s = 0.0
        for p in range(a.shape[1]):
            s = float(Fraction(float(a[i, p])) * Fraction(float(b[p, j])) + Fraction(s))
        out[i, j] = s
    return out


def test_float64_products_are_the_documented_order_bit_for_bit(
    compiled: tuple[dp.Graph, dict[str, np.ndarray], list[str], dp.Program],
) -> None:
    """Odd sizes in one k chunk (edge tiles stored from the last chunk's registers) and a k of 300
    that crosses a chunk (sums carried in the task's double buffer): the reference order's bits."""
    _, feed, _, program = compiled
    out, _ = program.value_and_grad(**feed)
    for k in (7, 8, 9):
        want = _in_order64(feed[f"float64_a{k}"], feed[f"float64_b{k}"])
        assert np.array_equal(out[f"float64_o{k}"], want), k


@pytest.mark.parametrize(
    "dtype, k, at, value",
    [
        ("float32", 9, (0, 0), np.inf),  # a whole tile, stored from the registers (`_whole_tile`)
        ("float32", 9, (36, 0), np.nan),  # an edge tile's row, stored element by element
        ("float32", 8, (0, 0), -np.inf),  # float32 sums crossing k blocks
        ("float64", 9, (0, 0), np.nan),  # a whole float64 tile
        ("float64", 7, (32, 16), np.inf),  # an odd-sized edge tile
    ],
)
def test_a_non_finite_product_raises_the_products_flag(
    compiled: tuple[dp.Graph, dict[str, np.ndarray], list[str], dp.Program],
    dtype: str,
    k: int,
    at: tuple[int, int],
    value: float,
) -> None:
    _, feed, _, program = compiled
    bad = dict(feed)
    bad[f"{dtype}_a{k}"] = feed[f"{dtype}_a{k}"].copy()
    bad[f"{dtype}_a{k}"][at] = value
    with pytest.raises(dp.NumericalError) as err:
        program.value_and_grad(**bad)
    assert "non-finite value" in str(err.value) and "op matmul" in str(err.value), str(err.value)
    program.value_and_grad(**feed)  # the flags were cleared: a finite call passes


def test_a_transposed_float32_b_is_packed_by_register_transposes(
    compiled: tuple[dp.Graph, dict[str, np.ndarray], list[str], dp.Program],
) -> None:
    """The gradients' ``s Bᵀ`` packs whole 16 x 16 blocks of B through `contraction.transpose16`
    (the bits are checked by the bit-for-bit tests above: shapes 7 and 9 have whole and partial
    blocks)."""
    text = compiled[3].plans["value_and_grad"].module.text
    assert "_tr16(a1 + bb + p0 + q" in text and "__builtin_shufflevector" in text


def test_small_row_major_b_is_read_in_place() -> None:
    """B is read in place, not packed, where its task block is whole micro tiles of one k chunk,
    row-major and at most `contraction.B_IN_PLACE` bytes; otherwise it is packed (``b_pitch`` 0)."""
    g = dp.GraphBuilder("matmul_in_place")
    cases = {  # (A, B) -> pitch; a B read through a transpose flag is packed (`b_col` != 1)
        ((37, 40), (40, 64)): 64,
        ((2, 9, 16), (2, 16, 32)): 32,
        ((64, 64), (64, 64)): 64,
        ((33, 17), (17, 65)): 0,  # columns past a whole micro tile
        ((9, 300), (300, 64)): 0,  # more than one k chunk
        ((64, 256), (256, 64)): 0,  # 64 KiB of B
    }
    for k, (sa, sb) in enumerate(cases):
        a, b = g.input(f"a{k}", sa, "float32"), g.input(f"b{k}", sb, "float32")
        g.output(f"o{k}", a @ b)
    graph = g.build()
    products = [n.name for n in graph.nodes if n.op == "matmul"]
    pitches = [cpu_blocking(contraction_of(graph, name), "float").b_pitch for name in products]
    assert pitches == list(cases.values()), pitches
    float64 = [cpu_blocking(contraction_of(graph, name), "double").b_pitch for name in products]
    assert float64 == list(cases.values()), float64  # 64² doubles: 32 KiB of B, in place too


THIN = [((1, 300), (300, 70)), ((2, 5), (5, 120)), ((3, 20), (20, 128)), ((300,), (300, 120))]


def test_thin_products_take_thin_tiles_and_keep_the_order() -> None:
    """Products of 1 to 4 rows run on the thin micro tiles (`contraction.TILES`: 1 x 128, 2 x 128,
    4 x 64 float32) and give the reference order's bits (k past a block, edge columns)."""
    g = dp.GraphBuilder("matmul_thin")
    feed = {}
    for k, (sa, sb) in enumerate(THIN):
        a, b = g.input(f"a{k}", sa, "float32"), g.input(f"b{k}", sb, "float32")
        g.output(f"o{k}", a @ b)
        feed[f"a{k}"], feed[f"b{k}"] = (RNG.standard_normal(x).astype(np.float32) for x in (sa, sb))
    graph = g.build()
    rows = [cpu_blocking(contraction_of(graph, n.name), "float").mr for n in graph.nodes if n.op == "matmul"]
    assert rows == [1, 2, 4, 1], rows
    out = dp.compile(graph, device="cpu").run(**feed)
    for k in range(len(THIN)):
        assert np.array_equal(out[f"o{k}"], _in_order(feed[f"a{k}"], feed[f"b{k}"])), k


def test_every_product_takes_the_cxx_path(
    compiled: tuple[dp.Graph, dict[str, np.ndarray], list[str], dp.Program],
) -> None:
    program = compiled[3]
    for name, plan in program.plans.items():
        groups = {g.id for g in plan_of(plan.graph).groups if g.kind == "contraction"}
        mine = [k for k in plan.kernels if k.group in groups]
        assert mine and not off_cxx(mine, plan.module.text), (name, off_cxx(mine, plan.module.text))


def test_bit_identical_runs_and_thread_counts(
    compiled: tuple[dp.Graph, dict[str, np.ndarray], list[str], dp.Program],
) -> None:
    graph, feed, wrt, program = compiled
    assert program.plans["value_and_grad"].threads > 1 or (os.cpu_count() or 1) == 1  # default: every core
    first = program.value_and_grad(**feed)
    again = program.value_and_grad(**feed)
    one_thread = dp.compile(graph, wrt=wrt, loss="loss", device="cpu", threads=1).value_and_grad(**feed)
    for other in (again, one_thread):
        for got, want in zip(other, first, strict=True):
            for name, value in want.items():
                assert np.array_equal(got[name], value), name
    for module in program.modules.values():  # one generated module per plan
        assert "atomic" not in module.text, module.name


@pytest.mark.skipif(OBJDUMP is None, reason="needs objdump or llvm-objdump for the census")
@pytest.mark.parametrize("level", [2, 3])
@pytest.mark.parametrize("dtype, packed", [("float32", "ps"), ("float64", "pd")])
def test_cpu_micro_kernel_is_vectorised(dtype: str, packed: str, level: int) -> None:
    """The CPU driver's micro kernel, built at the shipped -O2 and at -O3 (a user's
    ``wp.config.optimization_level = 3``), keeps its accumulators in ymm (zmm on an AVX-512 host:
    its module prefers 512-bit vectors, which clang's -march=native does not on every AVX-512 core)
    registers: packed FMAs of the operands' precision (float32: the 8 x 32 float tile of a k block;
    float64: the 4 x 32 double tile), and no gathers or scatters. A scalar micro kernel would have
    no such FMAs; its earlier form, plain loops over scalar sums, had the FMAs at -O2 but at -O3 was
    vectorised across the tile's rows, gathering and scattering the sums (float32 512²: 30x the
    time; `contraction._vector_steps`)."""
    g = dp.GraphBuilder(f"matmul_census_{dtype}")
    a, b = g.input("a", (64, 64), dtype), g.input("b", (64, 64), dtype)
    g.output("c", a @ b)
    obj = build(generated(g.build(), CompileOptions()), f"matmul_{dtype}_O{level}", level)
    out = subprocess.run([str(OBJDUMP), "-d", "--no-show-raw-insn", str(obj)], capture_output=True, text=True)
    cpu = Path("/proc/cpuinfo")
    width = "zmm" if cpu.exists() and "avx512f" in cpu.read_text() else "[yz]mm"
    fmas = len(re.findall(rf"vfmadd\d+{packed}\s+(?:\S+\{{1to\d+\}}, )?%{width}", out.stdout))
    assert fmas >= 32, fmas
    moves = re.findall(r"\b(vgather\w+|vscatter\w+)", out.stdout)
    assert not moves, f"{len(moves)} gathers and scatters ({sorted(set(moves))}): the sums left the registers"


BAD = [
    (((3, 4), (5, 2)), ["op 'matmul' on %a, %b", "shapes [3, 4] and [5, 2] do not fit", "(4)", "(5)"]),
    (((4,), (3,)), ["shapes [4] and [3] do not fit", "only axis"]),
    (((2, 3, 4), (3, 4, 2)), ["op 'matmul' on %a, %b", "shapes [2] and [3] do not broadcast"]),
    (((), (3,)), ["rank >= 1", "%a"]),
]


@pytest.mark.parametrize("shapes, words", BAD, ids=["inner", "vectors", "batch", "rank0"])
def test_bad_shapes_are_contract_errors(shapes: tuple[tuple[int, ...], ...], words: list[str]) -> None:
    g = dp.GraphBuilder("bad")
    a, b = g.input("a", shapes[0], "float64"), g.input("b", shapes[1], "float64")
    with pytest.raises(dp.ContractError) as err:
        a @ b
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_numpy_operand_is_refused() -> None:
    g = dp.GraphBuilder("np")
    t = g.input("t", (3, 2), "float64")
    with pytest.raises(dp.ContractError, match="expected dp tensors, found ndarray"):
        np.ones((2, 3)) @ t
    with pytest.raises(dp.ContractError, match="bool"):
        dp.matmul(g.input("m", (2, 3), "bool"), g.input("n", (3, 2), "bool"))


def test_inside_a_loop_body_with_a_captured_matrix() -> None:
    """``w @ h`` in a ``dp.scan`` step, ``w`` a tensor of the enclosing graph (the body
    captures it): compiled values and gradients equal the interpreter's."""
    g = dp.GraphBuilder("rnn")
    h0, w, xs = g.input("h0", (4,), "float64"), g.input("w", (4, 4), "float64"), g.input("xs", (5, 4), "float64")

    def step(h: dp.Tensor, x: dp.Tensor) -> tuple[dp.Tensor, dp.Tensor]:
        new = dp.tanh(w @ h + x)
        return new, new

    _, ys = dp.scan(step, h0, xs)
    g.output("loss", dp.sum(ys * ys))
    graph = g.build()
    feed = {"h0": RNG.standard_normal(4), "w": 0.5 * RNG.standard_normal((4, 4)), "xs": RNG.standard_normal((5, 4))}
    out, grads = dp.compile(graph, wrt=["w", "h0"], device="cpu").value_and_grad(**feed)
    np.testing.assert_allclose(out["loss"], dp.interpret(graph, **feed)["loss"], rtol=1e-12)
    for name, want in dp.interpret_grad(graph, ["w", "h0"], **feed).items():
        np.testing.assert_allclose(grads[name], want, rtol=1e-12, err_msg=name)


# Thin products (`dpt_ir.backends.cxx.thin`): matrix x vector (A row-major: transposed runs; A
# read through a transpose flag: contiguous lanes), vector x matrix (B's rows contiguous, and B
# through a transpose flag), a batched matrix x vector, a few columns, a short k (outer products),
# k past one float32 block; sizes off every tile and run.
THIN_DIRECT = [
    ((70, 300), (300,), False, False),
    ((300, 70), (300,), True, False),
    ((300,), (300, 90), False, False),
    ((300,), (90, 300), False, True),
    ((3, 37, 40), (3, 40, 1), False, False),
    ((45, 530), (530, 3), False, False),
    ((100, 5), (5, 130), False, False),
    ((90, 1), (1, 40), False, False),
    ((19, 7), (7,), False, False),
]


def _thin_graph(dtype: str) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    g = dp.GraphBuilder(f"matmul_direct_{dtype}")
    feed = {}
    for k, (sa, sb, ta, tb) in enumerate(THIN_DIRECT):
        a, b = g.input(f"a{k}", sa, dtype), g.input(f"b{k}", sb, dtype)
        g.output(f"o{k}", g.emit("matmul", [a, b], {"transpose_a": ta, "transpose_b": tb}))
        feed[f"a{k}"], feed[f"b{k}"] = (RNG.standard_normal(x).astype(dtype) for x in (sa, sb))
    return g.build(), feed


def _offset(x: np.ndarray, shift: int) -> np.ndarray:
    """``x`` copied into a contiguous array starting ``shift`` elements past a 64-byte boundary
    (the direct kernel's runs start on a cache line of its first lane: every head length)."""
    buf = np.empty(x.size + 64, x.dtype)
    start = (-(buf.ctypes.data % 64) // x.itemsize + shift) % (64 // x.itemsize)
    out = buf[start : start + x.size].reshape(x.shape)
    out[...] = x
    return out


@pytest.mark.parametrize("dtype", ["float32", "float64"])
def test_direct_kernel_equals_packed_kernel_bit_for_bit(dtype: str, monkeypatch: pytest.MonkeyPatch) -> None:
    """Each thin product runs on the direct kernel (`contraction.choose`) and gives the packed
    kernel's bits (that kernel forced), for operands at every offset from a cache line; float32
    values equal the documented order exactly where it is cheap to compute, and all are within
    the documented bound (float64: 1e-12 of NumPy)."""
    from dpt_ir.backends.cxx import contraction

    graph, feed = _thin_graph(dtype)
    c_type = "float" if dtype == "float32" else "double"
    chosen = [contraction.choose(contraction_of(graph, n.name), c_type) for n in graph.nodes if n.op == "matmul"]
    assert all(t is not None for t in chosen), chosen
    assert {t.transposed for t in chosen} == {True, False}
    direct = dp.compile(graph, device="cpu")
    monkeypatch.setattr(contraction, "choose", lambda ct, c: None)
    packed = dp.compile(graph, device="cpu")
    for shift in range(0, 64 // np.dtype(dtype).itemsize, 3):
        shifted = {name: _offset(x, shift) for name, x in feed.items()}
        got, want = direct.run(**shifted), packed.run(**shifted)
        for k in range(len(THIN_DIRECT)):
            assert np.array_equal(got[f"o{k}"], want[f"o{k}"]), (shift, k)
    for k, (_, _, ta, tb) in enumerate(THIN_DIRECT):
        a = feed[f"a{k}"].T if ta else feed[f"a{k}"]
        b = feed[f"b{k}"].T if tb else feed[f"b{k}"]
        if dtype == "float32":
            _within_bound(got[f"o{k}"], a, b)
            if a.size * (b.shape[-1] if b.ndim > 1 else 1) <= 30000:
                assert np.array_equal(got[f"o{k}"], _in_order(a, b)), k
        else:
            np.testing.assert_allclose(got[f"o{k}"], np.matmul(a, b), rtol=1e-12, atol=1e-12, err_msg=str(k))


def test_direct_kernel_bits_for_any_thread_count() -> None:
    graph, feed = _thin_graph("float32")
    first = dp.compile(graph, device="cpu").run(**feed)
    one = dp.compile(graph, device="cpu", threads=1).run(**feed)
    for name, value in first.items():
        assert np.array_equal(one[name], value), name


def test_matrix_vector_gradients_take_the_direct_kernel(monkeypatch: pytest.MonkeyPatch) -> None:
    """``value_and_grad`` of ``sum(s * (A x)) + sum(t * (y B))``: the backward's vector products
    (``dx = Aᵀ s``, a transposed matrix x vector; ``dy = B t``) run on the direct kernel like
    the forward's, and its k = 1 outer products (``dA = s xᵀ``, ``dB = y tᵀ``) where the count
    says; the gradients equal the packed kernel's bits, the analytic ones (float64, 1e-12) and
    finite differences of the compiled loss."""
    from dpt_ir.backends.cxx import contraction

    g = dp.GraphBuilder("matvec_grad")
    a, x = g.input("a", (40, 70), "float64"), g.input("x", (70,), "float64")
    y, b = g.input("y", (40,), "float64"), g.input("b", (40, 50), "float64")
    s, t = g.input("s", (40,), "float64", requires_grad=False), g.input("t", (50,), "float64", requires_grad=False)
    g.output("loss", dp.sum(s * (a @ x)) + dp.sum(t * (y @ b)))
    graph = g.build()
    feed = {n: RNG.standard_normal(v.shape) for n, v in (("a", a), ("x", x), ("y", y), ("b", b), ("s", s), ("t", t))}
    wrt = ["a", "x", "y", "b"]
    program = dp.compile(graph, wrt=wrt, device="cpu")
    run = program.plans["value_and_grad"].graph
    layouts = [contraction_of(run, n.name) for n in run.nodes if n.op == "matmul"]
    vectors = [ct for ct in layouts if 1 in (ct.m, ct.n)]
    assert len(layouts) == 6 and len(vectors) == 4 and all(contraction.choose(ct, "double") for ct in vectors)
    assert any(contraction.choose(ct, "double") for ct in layouts if ct.k == 1)
    out, grads = program.value_and_grad(**feed)
    want = {
        "a": np.outer(feed["s"], feed["x"]),
        "x": feed["a"].T @ feed["s"],
        "y": feed["b"] @ feed["t"],
        "b": np.outer(feed["y"], feed["t"]),
    }
    for name, value in want.items():
        np.testing.assert_allclose(grads[name], value, rtol=1e-12, atol=1e-12, err_msg=name)
    h = 1e-6
    for name, i in (("a", (3, 5)), ("x", (11,)), ("y", (7,)), ("b", (2, 9))):
        up, down = feed[name].copy(), feed[name].copy()
        up[i] += h
        down[i] -= h
        fd = (program.run(**{**feed, name: up})["loss"] - program.run(**{**feed, name: down})["loss"]) / (2 * h)
        np.testing.assert_allclose(grads[name][i], fd, rtol=1e-6, err_msg=name)
    monkeypatch.setattr(contraction, "choose", lambda ct, c: None)
    _, packed = dp.compile(graph, wrt=wrt, device="cpu").value_and_grad(**feed)
    for name in wrt:
        assert np.array_equal(grads[name], packed[name]), name

"""Gather and scatter (`dpt_ir.ops.gather`, `dpt_ir.api.gather`, the scatter kernels of
`dpt_ir.backends.cxx.scatter`) beyond the table-driven op cases (`tests/op_cases.py`,
which check values against NumPy, gradients against finite differences and compiled
against interpreted for every op):

- NumPy's indexing semantics on more index shapes, and the ContractErrors of bad input;
- dot tests ``<A x, y> = <x, A^T y>`` (A = take, A^T = add_at) to 1e-11 in float64,
  interpreted and compiled, in every mode and along an axis;
- one compiled program (module fixture): the gradient of a take with 200,000 colliding
  positions into 97 bins (float32), by data positions (a counting sort per evaluation)
  and by constant positions (a transpose built at compile time), bit-identical over 3
  runs and in a second process, and equal to the interpreter bit for bit; fusion.txt
  says which form each scatter took; the module holds no float atomic and its CUDA
  variant compiles for sm_90 with NVRTC; an out-of-range runtime position under
  ``mode="raise"`` is a NumericalError and the program stays usable.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import pytest
import warp as wp
from backend.harness import float_atomics

import dpt_ir as dp
from dpt_ir.backends.base import target_for
from dpt_ir.backends.warp import codegen
from dpt_ir.passes.manager import run_pipeline
from dpt_ir.passes.options import CompileOptions
from dpt_ir.runtime.modules import cache_root, content_key, import_source

BINS, HITS = 97, 200_000
RNG = np.random.default_rng(10)
POSITIONS = RNG.integers(-BINS, BINS, HITS).astype(np.int32)  # negatives count from the end
WEIGHTS = RNG.standard_normal(HITS).astype(np.float32)
DOT_SHAPE, DOT_POSITIONS = (6, 7), (40,)


# -- NumPy semantics and bad input (interpreter) -------------------------------------------
def _interpret_one(shape: tuple[int, ...], fn: object, x: np.ndarray) -> np.ndarray:
    g = dp.GraphBuilder("one")
    g.output("out", fn(g.input("x", shape, "float64")))  # type: ignore[operator]
    return dp.interpret(g.build(), x=x)["out"]


INDEXING = [
    ("scalar_position", (5,), lambda t: dp.take(t, 3), lambda a: np.take(a, 3)),
    ("negative_flat", (2, 3), lambda t: dp.take(t, [-1, -6]), lambda a: np.take(a, [-1, -6])),
    ("axis_minus_one", (2, 3), lambda t: dp.take(t, [[2], [0]], axis=-1), lambda a: np.take(a, [[2], [0]], axis=-1)),
    ("ellipsis", (2, 3, 4), lambda t: t[..., [3, 0]], lambda a: a[..., [3, 0]]),
    ("adjacent_int", (2, 3, 4), lambda t: t[:, 1, [3, 0]], lambda a: a[:, 1, [3, 0]]),
    ("split_int", (2, 3, 4), lambda t: t[1, :, [[3], [0]]], lambda a: a[1, :, [[3], [0]]]),
    ("first_axis", (4, 2), lambda t: t[np.array([3, 3, 0])], lambda a: a[np.array([3, 3, 0])]),
    ("along_none", (2, 3), lambda t: dp.take_along_axis(t, np.array([5, 0]), None), lambda a: a.ravel()[[5, 0]]),
    ("two_arrays_split", (3, 4, 5), lambda t: t[[0, 2], :, [[4], [-1]]], lambda a: a[[0, 2], :, [[4], [-1]]]),
    ("two_arrays_adjacent", (3, 4, 5), lambda t: t[:, [3, 0], [1, 1]], lambda a: a[:, [3, 0], [1, 1]]),
    ("three_arrays_int", (2, 3, 4, 5), lambda t: t[1, [2], [0, 3], [4, 0]], lambda a: a[1, [2], [0, 3], [4, 0]]),
    ("add_at_scalar", (4,), lambda t: dp.add_at(t, [1, 1, 3], 2.0), lambda a: _np_add_at(a, [1, 1, 3], 2.0)),
]


def _np_add_at(a: np.ndarray, index: object, values: object) -> np.ndarray:
    out = a.copy()
    np.add.at(out, index, values)
    return out


@pytest.mark.parametrize("shape, fn, expect", [c[1:] for c in INDEXING], ids=[c[0] for c in INDEXING])
def test_values_equal_numpy(shape: tuple[int, ...], fn: object, expect: object) -> None:
    x = RNG.standard_normal(shape)
    np.testing.assert_array_equal(_interpret_one(shape, fn, x), expect(x))  # type: ignore[operator]


BAD = [
    (lambda a, i: dp.take(a, np.array([0.5, 1.0])), ["op 'take' on %a", "must be integers", "float64 array"]),
    (lambda a, i: dp.take(a, dp.cast(i, "float32"), axis=0), ["op 'take' on %a, %cast", "int32", "found float32"]),
    (lambda a, i: a[np.array([True, False, True, True])], ["indexing %a", "boolean mask"]),
    (lambda a, i: dp.take(a, [4], axis=0), ["op 'take' on %a", "index 4 is out of bounds", "size 4"]),
    (lambda a, i: dp.take(a, i, mode="nearest"), ["op 'take' on %a", "unknown mode 'nearest'", "'wrap'"]),
    (lambda a, i: a[i, None], ["indexing %a", "None (a new axis) cannot be mixed"]),
    (lambda a, i: a[[5], [0]], ["indexing %a", "index 5 is out of bounds", "size 4"]),
    (lambda a, i: dp.add_at(a, i, np.ones(3)), ["op 'add_at' on %a", "expected a dp tensor or a Python scalar"]),
    (lambda a, i: dp.take_along_axis(a, i, axis=0), ["op 'take' on %a", "rank 2", "found rank 1"]),
]


@pytest.mark.parametrize("build, words", BAD, ids=[f"bad{k}" for k in range(len(BAD))])
def test_bad_input_is_a_contract_error(build: object, words: list[str]) -> None:
    g = dp.GraphBuilder("bad")
    a, i = g.input("a", (4, 5), "float64"), g.input("i", (3,), "int32", requires_grad=False)
    with pytest.raises(dp.ContractError) as err:
        build(a, i)  # type: ignore[operator]
    for w in words:
        assert w in str(err.value), (w, str(err.value))


def test_out_of_range_runtime_position_interpreted() -> None:
    g = dp.GraphBuilder("oob")
    a, i = g.input("a", (4,), "float64"), g.input("i", (2,), "int32", requires_grad=False)
    g.output("out", dp.take(a, i))
    with pytest.raises(dp.NumericalError, match=r"node 'take_\d+'.*index 4 is out of range .* size 4"):
        dp.interpret(g.build(), a=np.zeros(4), i=np.array([1, 4], np.int32))


# -- dot tests ---------------------------------------------------------------------------
DOT_CASES = {  # label -> (attrs of take/add_at, positions' shape); positions collide
    "raise": ({"axis": 1, "mode": "raise"}, DOT_POSITIONS),
    "wrap": ({"axis": 0, "mode": "wrap"}, DOT_POSITIONS),
    "clip": ({"axis": 1, "mode": "clip"}, (5, 8)),
    "along": ({"axis": 1, "mode": "raise", "along": True}, (6, 9)),
}


def add_dot_cases(g: dp.GraphBuilder) -> dict[str, np.ndarray]:
    """For each case: outputs ``Ax`` = take(x, i) and ``ATy`` = add_at(0, i, y) (float64)
    in ``g``; returns their inputs (the same every call)."""
    rng = np.random.default_rng(11)
    feed: dict[str, np.ndarray] = {}
    for label, (attrs, shape) in DOT_CASES.items():
        size = DOT_SHAPE[attrs["axis"]]
        x = g.input(f"{label}_x", DOT_SHAPE, "float64")
        i = g.input(f"{label}_i", shape, "int32", requires_grad=False)
        ax = g.emit("take", [x, i], attrs)
        y = g.input(f"{label}_y", ax.shape, "float64")
        zeros = g.constant(0.0, "float64", DOT_SHAPE)
        g.output(f"{label}_Ax", ax)
        g.output(f"{label}_ATy", g.emit("add_at", [zeros, i, y], attrs))
        reach = size if attrs["mode"] == "raise" else 3 * size
        feed[f"{label}_i"] = rng.integers(-reach, reach, shape).astype(np.int32)
        feed[f"{label}_x"] = rng.standard_normal(DOT_SHAPE)
        feed[f"{label}_y"] = rng.standard_normal(ax.shape)
    return feed


def dot_graph() -> tuple[dp.Graph, dict[str, np.ndarray]]:
    g = dp.GraphBuilder("dot")
    feed = add_dot_cases(g)
    return g.build(), feed


def check_dot(out: dict[str, np.ndarray], feed: dict[str, np.ndarray]) -> None:
    for label in DOT_CASES:
        lhs = float(np.vdot(out[f"{label}_Ax"], feed[f"{label}_y"]))
        rhs = float(np.vdot(feed[f"{label}_x"], out[f"{label}_ATy"]))
        assert abs(lhs - rhs) <= 1e-11 * max(abs(lhs), abs(rhs)), (label, lhs, rhs)


def test_dot_interpreted() -> None:
    graph, feed = dot_graph()
    check_dot(dp.interpret(graph, **feed), feed)


# -- one compiled program ------------------------------------------------------------------
def collision_graph() -> dp.Graph:
    """The 200,000-hit take by data positions (``x``) and by constant ones (``xc``), the
    dot-test cases, and a take under mode='raise' whose positions are program data."""
    g = dp.GraphBuilder("gather_collisions")
    x, xc = g.input("x", (BINS,), "float32"), g.input("xc", (BINS,), "float32")
    i = g.input("i", (HITS,), "int32", requires_grad=False)
    w = g.input("w", (HITS,), "float32", requires_grad=False)
    g.output("loss", dp.sum(dp.take(x, i) * w) + dp.sum(dp.take(xc, POSITIONS) * w))
    a, j = g.input("a", (5,), "float32", requires_grad=False), g.input("j", (3,), "int32", requires_grad=False)
    g.output("picked", dp.take(a, j))
    add_dot_cases(g)
    return g.build()


def collision_feed() -> dict[str, np.ndarray]:
    dot_feed = add_dot_cases(dp.GraphBuilder("feed"))
    return {
        "x": np.zeros(BINS, np.float32),
        "xc": np.zeros(BINS, np.float32),
        "i": POSITIONS,
        "w": WEIGHTS,
        "a": np.arange(5, dtype=np.float32),
        "j": np.array([0, -1, 4], np.int32),
        **dot_feed,
    }


@pytest.fixture(scope="module")
def compiled(tmp_path_factory: pytest.TempPathFactory) -> tuple[dp.Program, Path]:
    dump = tmp_path_factory.mktemp("gather_dump")
    return dp.compile(collision_graph(), wrt=["x", "xc"], loss="loss", device="cpu", dump_dir=dump), dump


def _digest(a: np.ndarray) -> str:
    return hashlib.sha256(np.ascontiguousarray(a).tobytes()).hexdigest()


def test_collision_gradient_is_exact_and_bit_identical(compiled: tuple[dp.Program, Path]) -> None:
    program, _ = compiled
    feed = collision_feed()
    runs = [program.value_and_grad(**feed)[1] for _ in range(3)]
    for grads in runs[1:]:
        assert _digest(grads["x"]) == _digest(runs[0]["x"]) and _digest(grads["xc"]) == _digest(runs[0]["xc"])
    # Both forms sum float32 in float64 in position order, as the interpreter does, and
    # equal the float64 histogram rounded once.
    expected = np.bincount(POSITIONS % BINS, weights=WEIGHTS.astype(np.float64), minlength=BINS).astype(np.float32)
    interpreted = dp.interpret_grad(collision_graph(), ["x", "xc"], seed={"loss": 1.0}, **feed)
    for name in ("x", "xc"):
        np.testing.assert_array_equal(runs[0][name], interpreted[name])
        np.testing.assert_array_equal(runs[0][name], expected)


CHILD = r"""
import hashlib, sys
import numpy as np
sys.path.insert(0, sys.argv[1])
import dpt_ir as dp
graph = dp.Graph.model_validate_json(open(sys.argv[2]).read())
feed = dict(np.load(sys.argv[3]))
_, grads = dp.compile(graph, wrt=["x", "xc"], loss="loss", device="cpu").value_and_grad(**feed)
print("DIGESTS", *(hashlib.sha256(np.ascontiguousarray(grads[k]).tobytes()).hexdigest() for k in ("x", "xc")))
"""


def test_collision_gradient_identical_in_another_process(compiled: tuple[dp.Program, Path], tmp_path: Path) -> None:
    program, _ = compiled
    feed = collision_feed()
    _, grads = program.value_and_grad(**feed)
    (tmp_path / "graph.json").write_text(program.graph.model_dump_json())
    np.savez(tmp_path / "feed.npz", **feed)
    root = Path(__file__).resolve().parents[2]
    args = [str(root), str(tmp_path / "graph.json"), str(tmp_path / "feed.npz")]
    child = subprocess.run(
        [sys.executable, "-c", CHILD, *args], capture_output=True, text=True, env=dict(os.environ), timeout=600
    )
    assert child.returncode == 0, child.stderr[-4000:]
    line = next(ln for ln in child.stdout.splitlines() if ln.startswith("DIGESTS "))
    assert line.split()[1:] == [_digest(grads["x"]), _digest(grads["xc"])]


def test_fusion_txt_names_each_scatter_form(compiled: tuple[dp.Program, Path]) -> None:
    _, dump = compiled
    text = (dump / "value_and_grad" / "fusion.txt").read_text()
    forms = [ln for ln in text.splitlines() if ln.startswith("  scatter: ")]
    assert any(": sort: positions i depend on program input i" in ln for ln in forms), forms
    assert any(": transpose: positions index_array" in ln and "compile-time constant" in ln for ln in forms), forms


def test_dot_compiled(compiled: tuple[dp.Program, Path]) -> None:
    program, _ = compiled
    feed = collision_feed()
    out = program.run(**feed)
    check_dot(out, feed)
    graph, dot_feed = dot_graph()
    for name, value in dp.interpret(graph, **dot_feed).items():
        np.testing.assert_allclose(out[name], value, rtol=1e-13, atol=1e-13)


def test_out_of_range_runtime_position_is_a_numerical_error(compiled: tuple[dp.Program, Path]) -> None:
    program, _ = compiled
    feed = collision_feed()
    with pytest.raises(dp.NumericalError, match=r"out-of-domain input at node 'take_\d+'.*outside \[-5, 5\)"):
        program.run(**{**feed, "j": np.array([0, 5, 1], np.int32)})
    out = program.run(**feed)  # the program stays usable
    np.testing.assert_array_equal(out["picked"], np.array([0.0, 4.0, 4.0], np.float32))


def _module_source(program: dp.Program) -> str:
    """Every pipeline's generated module, as one text."""
    return "\n".join(m.path.read_text() for m in program.modules.values())


def test_no_float_atomics(compiled: tuple[dp.Program, Path]) -> None:
    program, dump = compiled
    source = _module_source(program)
    assert "_count(" in source and "_place(" in source, "the data positions should be sorted per evaluation"
    assert not float_atomics(source)
    kernels = "\n".join(p.read_text() for p in (dump / "value_and_grad" / "kernels").glob("*.py"))
    assert "atomic" not in kernels


def _cuda_variant(graph: dp.Graph) -> ModuleType:
    """The module dp.compile would generate for a GPU (its value_and_grad pipeline)."""
    options = CompileOptions(wrt=("x", "xc"), seeds=("loss",), seed_values={"loss": 1.0}, loss="loss")
    plans = {"vg": run_pipeline(graph, options).graph}
    source = codegen.generate(plans, graph.name, "CUDA variant for the AOT test", True, target_for("cuda"))
    return import_source(source.text, cache_root() / "cuda_variants", f"dpt_ir_cuda_{content_key(source.text)}")


def test_cuda_variant_compiles_for_sm90() -> None:
    module = _cuda_variant(collision_graph())
    source = Path(module.__file__ or "").read_text()
    assert not float_atomics(source)
    out_dir = Path(os.environ.get("WARP_CACHE_PATH") or cache_root()) / "aot_sm90"
    out_dir.mkdir(parents=True, exist_ok=True)
    wp.init()
    paths = [Path(p) for p in wp.compile_aot_module(module, arch=90, module_dir=out_dir)]
    assert paths and all(p.stat().st_size > 0 for p in paths)

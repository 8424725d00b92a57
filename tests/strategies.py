"""Hypothesis strategies for random *valid* graphs, built through `dp.GraphBuilder` and
the ``dp.*`` functions, and for inputs that keep them numerically well-behaved.

Exports:

- `graphs(min_ops=1, max_ops=12, smooth=False, dtypes=FLOATS, edges=False, zero_size=False)`:
  a `dp.Graph` with 1-3 float inputs (of ``dtypes``, which casts stay within; rank <= 3,
  small dims including broadcasting 1s, some ``requires_grad=False``), a DAG of
  ``min_ops``..``max_ops`` op applications, a scalar float output named `LOSS` (the sum of
  every value no op consumed, so every value reaches it) and 0-2 extra outputs (any dtype,
  never an input). ``edges``: one axis may be as wide as the lane and block widths and
  their neighbours (`WIDTHS`: 7, 8, 9, 63, 64, 65, 511, 513), up to `EDGE_MAX_SIZE`
  elements; ``zero_size``: axes of length 0 too (broadcasting against 1s), where the max,
  min and arg reductions (which NumPy refuses on an empty axis) and means are left out.
- `graph_and_inputs(...)`: the same graph and a dict of NumPy inputs (`inputs_for`).
- `wrt_for(graph)`: a non-empty list of differentiable inputs; `differentiable_inputs`.
- `inputs_for(graph, seed)`: inputs uniform in [0.5, 1.5] in magnitude with random signs.
- `decorated_graphs()`: graphs plus random node/graph meta and constants with exotic
  values (NaN, infinities, -0.0, ints, bools), for serialisation round trips.
- `json_values`, `metas`: JSON-shaped values and meta dicts.

Domain safety: every value carries a bound on its magnitude for inputs in [-1.5, 1.5];
an operand whose bound exceeds `BOUND_LIMIT` is rescaled first, and ops with a
restricted domain get a positive argument (``log(square(x) + 0.5)``, ``a / (square(b) +
0.5)``, ``pow(square(a) + 0.5, b)``), so values and gradients stay finite and smooth
there. ``smooth=True`` leaves out ops with kinks or jumps (abs, relu, sign, floor, ceil,
maximum, minimum, clamp, where, max/min reductions) for finite-difference checks. The
draws are deterministic given Hypothesis's seed and use no other randomness.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Callable
from dataclasses import dataclass, field

import numpy as np
from hypothesis import strategies as st

import dpt_ir as dp
from dpt_ir.ir.types import broadcast_shapes

LOSS = "loss"
MAX_SIZE = 64
EDGE_MAX_SIZE = 1100  # one axis of 513 with another of 2
WIDTHS = (7, 8, 9, 63, 64, 65, 511, 513)
BOUND_LIMIT = 4.0
INPUT_NAMES = ("x", "y.w", "obs_2")
EXTRA_NAMES = ("aux", "aux.1")
SCALARS = (0.5, -0.75, 1.25, 2.0, 3)
FLOATS = ("float32", "float64")

Draw = Callable[[st.SearchStrategy], object]


@dataclass
class _Val:
    """A float tensor (or a Python scalar operand) and a bound on its magnitude."""

    t: dp.Tensor | float
    bound: float


@dataclass
class _State:
    b: dp.GraphBuilder
    smooth: bool
    dtypes: tuple[str, ...]
    floats: list[_Val]
    bools: list[dp.Tensor] = field(default_factory=list)
    others: list[dp.Tensor] = field(default_factory=list)  # int results: extra outputs only
    max_size: int = MAX_SIZE


# -- inputs ------------------------------------------------------------------------------
@st.composite
def _input_shapes(draw: Draw, edges: bool = False, zero_size: bool = False) -> list[tuple[int, ...]]:
    """1-3 shapes that broadcast together: suffixes of one base shape, some dims set to 1
    (``edges``: one dim may be one of `WIDTHS`; ``zero_size``: dims may be 0)."""
    wide = edges or zero_size  # the first input then has the base's full rank (its wide or empty axis)
    base = draw(st.lists(st.integers(0 if zero_size else 1, 4), min_size=1 if wide else 0, max_size=3))
    if edges and draw(st.integers(0, 3)) > 0:
        base[draw(st.integers(0, len(base) - 1))] = draw(st.sampled_from(WIDTHS))
        while math.prod(base) > EDGE_MAX_SIZE:
            base[base.index(max(d for d in base if d not in WIDTHS))] = 1
    n = draw(st.integers(1, 3))
    shapes = []
    for k in range(n):
        rank = len(base) if wide and k == 0 else draw(st.integers(0, len(base)))
        dims = base[len(base) - rank :]
        shapes.append(tuple(1 if draw(st.booleans()) else d for d in dims) if dims else ())
    return shapes


def _declare_inputs(
    draw: Draw, b: dp.GraphBuilder, dtypes: tuple[str, ...], edges: bool = False, zero_size: bool = False
) -> list[_Val]:
    vals = []
    for k, shape in enumerate(draw(_input_shapes(edges, zero_size))):
        dtype = draw(st.sampled_from(dtypes))
        requires_grad = k == 0 or draw(st.booleans())
        vals.append(_Val(b.input(INPUT_NAMES[k], shape, dtype, requires_grad=requires_grad), 1.5))
    return vals


# -- operands ----------------------------------------------------------------------------
def _pick(draw: Draw, pool: list) -> object:
    return pool[draw(st.integers(0, len(pool) - 1))]


def _tame(v: _Val, limit: float = BOUND_LIMIT) -> _Val:
    """``v`` rescaled to a bound of at most ``limit`` (``v`` itself when it already is)."""
    if v.bound <= limit:
        return v
    return _Val(v.t * (limit / v.bound), limit)


def _positive(v: _Val) -> _Val:
    """square(v) + 0.5: at least 0.5, smooth."""
    v = _tame(v)
    return _Val(dp.square(v.t) + 0.5, v.bound**2 + 0.5)


def _fits(s: _State, *shapes: tuple[int, ...]) -> bool:
    try:
        return math.prod(broadcast_shapes(*shapes)) <= s.max_size
    except dp.ContractError:
        return False


def _partner(draw: Draw, s: _State, shape: tuple[int, ...], allow_scalar: bool = True) -> _Val:
    """A float operand that broadcasts with ``shape``: a pool value or a Python scalar."""
    candidates = [u for u in s.floats if _fits(s, shape, u.t.shape)]
    if allow_scalar and (not candidates or draw(st.integers(0, 3)) == 0):
        c = draw(st.sampled_from(SCALARS))
        return _Val(c, abs(c))
    return _tame(_pick(draw, candidates))  # type: ignore[arg-type]


# -- op families: each emits one op application (plus domain guards) or returns None ---------
def _unary(draw: Draw, s: _State, v: _Val) -> _Val | None:
    ops: dict[str, Callable[[_Val], _Val]] = {
        "sin": lambda a: _Val(dp.sin(a.t), 1.0),
        "neg": lambda a: _Val(-a.t, a.bound),
        "cos": lambda a: _Val(dp.cos(a.t), 1.0),
        "tanh": lambda a: _Val(dp.tanh(a.t), 1.0),
        "sigmoid": lambda a: _Val(dp.sigmoid(a.t), 1.0),
        "erf": lambda a: _Val(dp.erf(a.t), 1.0),
        "softplus": lambda a: _Val(dp.softplus(a.t), a.bound + 0.7),
        "square": lambda a: _Val(dp.square(a.t), a.bound**2),
        "exp": lambda a: _Val(dp.exp(a.t), math.exp(a.bound)),
        "expm1": lambda a: _Val(dp.expm1(a.t), math.exp(a.bound)),
        "log": lambda a: _log(_positive(a)),
        "log1p": lambda a: _Val(dp.log1p(dp.square(a.t)), math.log1p(a.bound**2)),
        "sqrt": lambda a: _sqrt(_positive(a)),
        "rsqrt": lambda a: _Val(dp.rsqrt(_positive(a).t), 1.5),
        "reciprocal": lambda a: _Val(dp.reciprocal(_positive(a).t), 2.0),
    }
    if not s.smooth:
        ops |= {
            "abs": lambda a: _Val(dp.abs(a.t), a.bound),
            "relu": lambda a: _Val(dp.relu(a.t), a.bound),
            "sign": lambda a: _Val(dp.sign(a.t), 1.0),
            "floor": lambda a: _Val(dp.floor(a.t), a.bound + 1.0),
            "ceil": lambda a: _Val(dp.ceil(a.t), a.bound + 1.0),
        }
    return ops[draw(st.sampled_from(sorted(ops)))](_tame(v))


def _log(p: _Val) -> _Val:
    return _Val(dp.log(p.t), max(math.log(2.0), math.log(p.bound)))


def _sqrt(p: _Val) -> _Val:
    return _Val(dp.sqrt(p.t), math.sqrt(p.bound))


def _binary(draw: Draw, s: _State, v: _Val) -> _Val | None:
    a, other = _tame(v), _partner(draw, s, v.t.shape)
    names = ["add", "sub", "mul", "div", "pow", "atan2", "radd", "rsub", "rdiv"]
    if not s.smooth:
        names += ["maximum", "minimum"]
    name = draw(st.sampled_from(names))
    o = other.t
    if name == "add":
        return _Val(a.t + o, a.bound + other.bound)
    if name == "sub":
        return _Val(a.t - o, a.bound + other.bound)
    if name == "mul":
        return _Val(a.t * o, a.bound * other.bound)
    if name == "div":  # the scalars are at least 0.5 in magnitude
        return _Val(a.t / (_positive(other).t if isinstance(o, dp.Tensor) else o), 2 * a.bound)
    if name == "pow":
        base = _positive(a)
        e = _tame(other, 1.0) if isinstance(o, dp.Tensor) else other
        return _Val(dp.power(base.t, e.t), max(base.bound, 2.0) ** max(1.0, e.bound))
    if name == "atan2":
        return _Val(dp.arctan2(a.t, _positive(other).t if isinstance(o, dp.Tensor) else abs(o)), 2.0)
    if name in ("radd", "rsub"):  # the partner on the left (a Python scalar exercises __radd__)
        return _Val(o + a.t if name == "radd" else o - a.t, a.bound + other.bound)
    if name == "rdiv":
        return _Val(o / _positive(a).t, 2 * other.bound)
    fn = dp.maximum if name == "maximum" else dp.minimum
    return _Val(fn(a.t, o), max(a.bound, other.bound))


_COMPARISONS = (dp.less, dp.less_equal, dp.greater, dp.greater_equal, dp.equal, dp.not_equal)


def _condition(draw: Draw, s: _State, shape: tuple[int, ...]) -> dp.Tensor:
    """A bool tensor broadcasting with ``shape``: a comparison, maybe combined with a
    previous condition through logical ops."""
    a = _partner(draw, s, shape, allow_scalar=False)
    other = _partner(draw, s, a.t.shape)
    cmp = draw(st.sampled_from(_COMPARISONS))
    cond = cmp(a.t, other.t)
    fitting = [c for c in s.bools if _fits(s, cond.shape, c.shape, shape)]
    how = draw(st.sampled_from(["plain", "not", "and", "or"]))
    if how == "not":
        cond = dp.logical_not(cond)
    elif fitting and how in ("and", "or"):
        prev = _pick(draw, fitting)
        cond = dp.logical_and(cond, prev) if how == "and" else cond | prev  # type: ignore[operator]
    s.bools.append(cond)
    return cond


def _where(draw: Draw, s: _State, v: _Val) -> _Val | None:
    if s.smooth:
        return None
    cond = _condition(draw, s, v.t.shape)
    if not _fits(s, cond.shape, v.t.shape):
        return None
    other = _partner(draw, s, broadcast_shapes(cond.shape, v.t.shape))
    a = _tame(v)
    if draw(st.booleans()):
        return _Val(dp.where(cond, a.t, other.t), max(a.bound, other.bound))
    return _Val(dp.where(cond, other.t, a.t), max(a.bound, other.bound))


def _clamp(draw: Draw, s: _State, v: _Val) -> _Val | None:
    if s.smooth:
        return None
    lo = draw(st.sampled_from([None, -1.0, -0.25, 0.5]))
    hi = None if lo is not None and draw(st.booleans()) else draw(st.sampled_from([0.75, 1.0, 2.0]))
    return _Val(dp.clamp(v.t, lo, hi), max(v.bound, abs(lo or 0.0), abs(hi or 0.0)))


def _cast(draw: Draw, s: _State, v: _Val) -> _Val | None:
    others = [d for d in s.dtypes if d != v.t.dtype]
    return _Val(dp.cast(v.t, others[0]), v.bound) if others else None


def _axes(draw: Draw, ndim: int) -> object:
    """A NumPy ``axis=`` argument: None, an int or a tuple, negative axes included."""
    if ndim == 0 or draw(st.integers(0, 3)) == 0:
        return None
    axes = draw(st.lists(st.integers(0, ndim - 1), min_size=1, max_size=ndim, unique=True))
    axes = [a - ndim if draw(st.booleans()) else a for a in axes]
    return axes[0] if len(axes) == 1 and draw(st.booleans()) else tuple(axes)


def _reduction(draw: Draw, s: _State, v: _Val) -> _Val | None:
    names = ["sum", "mean", "logsumexp"] + ([] if s.smooth else ["max", "min", "argmax", "argmin"])
    if v.t.size == 0:
        names = ["sum", "logsumexp"]  # NumPy refuses max, min and arg over nothing; a mean is NaN
    name = draw(st.sampled_from(names))
    keepdims = draw(st.booleans())
    if name in ("argmax", "argmin"):
        axis = None if v.t.ndim == 0 or draw(st.booleans()) else draw(st.integers(-v.t.ndim, v.t.ndim - 1))
        s.others.append(getattr(dp, name)(v.t, axis=axis, keepdims=keepdims))
        return None
    axis = _axes(draw, v.t.ndim)
    out = getattr(dp, name)(v.t, axis=axis, keepdims=keepdims)
    count = max(1, v.t.size // max(1, out.size))
    bound = {"sum": v.bound * count, "mean": v.bound, "logsumexp": v.bound + math.log(count)}
    return _Val(out, bound.get(name, v.bound))


def _factorings(n: int) -> list[tuple[int, ...]]:
    """Every shape of rank 1-3 with ``n`` elements (and () when n == 1), in lexicographic
    order; for n == 0, the shapes of rank 1-3 with a 0 and dims up to 2."""
    out: list[tuple[int, ...]] = [()] if n == 1 else []
    divisors = [d for d in range(1, n + 1) if n % d == 0] if n else [0, 1, 2]
    for rank in (1, 2, 3):
        for dims in itertools.product(divisors, repeat=rank):
            if math.prod(dims) == n:
                out.append(dims)
    return out


def _reshape(draw: Draw, s: _State, v: _Val) -> _Val | None:
    shapes = [f for f in _factorings(v.t.size) if f != v.t.shape]
    if not shapes:
        return None
    target = list(draw(st.sampled_from(shapes)))
    if target and v.t.size and draw(st.booleans()):  # -1 is ambiguous for 0 elements
        target[draw(st.integers(0, len(target) - 1))] = -1
    return _Val(dp.reshape(v.t, target), v.bound)


def _transpose(draw: Draw, s: _State, v: _Val) -> _Val | None:
    if v.t.ndim < 2:
        return None
    if draw(st.booleans()):
        return _Val(v.t.T, v.bound)
    perm = draw(st.permutations(range(v.t.ndim)))
    return _Val(dp.transpose(v.t, perm), v.bound)


def _expand_dims(draw: Draw, s: _State, v: _Val) -> _Val | None:
    if v.t.ndim >= 3:
        return None
    return _Val(dp.expand_dims(v.t, draw(st.integers(-v.t.ndim - 1, v.t.ndim))), v.bound)


def _squeeze(draw: Draw, s: _State, v: _Val) -> _Val | None:
    ones = [i for i, d in enumerate(v.t.shape) if d == 1]
    if not ones:
        return None
    axis = None if draw(st.booleans()) else _pick(draw, ones)
    return _Val(dp.squeeze(v.t, axis), v.bound)  # type: ignore[arg-type]


def _broadcast_to(draw: Draw, s: _State, v: _Val) -> _Val | None:
    lead = [draw(st.integers(1, 3))] if v.t.ndim < 3 and draw(st.booleans()) else []
    target = tuple(lead + [draw(st.integers(1, 3)) if d == 1 else d for d in v.t.shape])
    if target == v.t.shape or math.prod(target) > s.max_size:
        return None
    return _Val(dp.broadcast_to(v.t, target), v.bound)


def _slice_item(draw: Draw, n: int) -> object:
    """An index for an axis of size ``n``: an int, or a slice (any step) selecting >= 1
    (an empty axis: a slice, selecting nothing)."""
    if n and draw(st.integers(0, 4)) == 0:
        return draw(st.integers(-n, n - 1))
    step = draw(st.sampled_from([None, 1, 2, -1, -2]))
    start = draw(st.none() | st.integers(-n - 1, n + 1))
    stop = draw(st.none() | st.integers(-n - 1, n + 1))
    if not range(*slice(start, stop, step).indices(n)):
        return slice(None, None, step)
    return slice(start, stop, step)


def _slice(draw: Draw, s: _State, v: _Val) -> _Val | None:
    if v.t.ndim == 0:
        return None
    k = draw(st.integers(1, v.t.ndim))  # indexed axes: the first k, or with '...' the last k
    ellipsis = k < v.t.ndim and draw(st.booleans())
    dims = v.t.shape[v.t.ndim - k :] if ellipsis else v.t.shape[:k]
    items = [_slice_item(draw, n) for n in dims]
    if ellipsis:
        items.insert(0, Ellipsis)
    if v.t.ndim < 3 and draw(st.integers(0, 3)) == 0:
        items.insert(draw(st.integers(0, len(items))), None)
    return _Val(v.t[tuple(items)], v.bound)


def _concatenate(draw: Draw, s: _State, v: _Val) -> _Val | None:
    if v.t.ndim == 0:
        return None
    axis = draw(st.integers(-v.t.ndim, v.t.ndim - 1))
    ax = axis % v.t.ndim

    def matches(u: _Val) -> bool:
        shape, ref = list(u.t.shape), list(v.t.shape)
        return len(shape) == len(ref) and shape[:ax] + shape[ax + 1 :] == ref[:ax] + ref[ax + 1 :]

    others = [u for u in s.floats if matches(u)]
    parts = [v] + [_pick(draw, others) for _ in range(draw(st.integers(1, 2)))]
    rest = math.prod(d for a, d in enumerate(v.t.shape) if a != ax)
    if sum(p.t.shape[ax] for p in parts) * rest > s.max_size:
        return None
    order = draw(st.permutations(parts))
    return _Val(dp.concatenate([p.t for p in order], axis=axis), max(p.bound for p in parts))


_FAMILIES: dict[str, Callable[[Draw, _State, _Val], _Val | None]] = {
    "unary": _unary,
    "binary": _binary,
    "reduction": _reduction,
    "reshape": _reshape,
    "transpose": _transpose,
    "expand_dims": _expand_dims,
    "squeeze": _squeeze,
    "broadcast_to": _broadcast_to,
    "slice": _slice,
    "concatenate": _concatenate,
    "where": _where,
    "clamp": _clamp,
    "cast": _cast,
}


# -- graphs ------------------------------------------------------------------------------
def _loss(draw: Draw, s: _State) -> dp.Tensor:
    """The sum (or mean) of every float value no node reads: every value reaches it."""
    used = {i for n in s.b.nodes for i in n.inputs}
    leaves = list({v.t.name: v.t for v in s.floats if v.t.name not in used}.values())
    terms = [dp.sum(t) if t.size == 0 or draw(st.booleans()) else dp.mean(t) for t in leaves]
    total = terms[0]
    for t in terms[1:]:
        total = total + t
    return total


@st.composite
def graphs(
    draw: Draw,
    min_ops: int = 1,
    max_ops: int = 12,
    smooth: bool = False,
    dtypes: tuple[str, ...] = FLOATS,
    edges: bool = False,
    zero_size: bool = False,
) -> dp.Graph:
    """A random valid graph; see the module docstring."""
    b = dp.GraphBuilder(draw(st.sampled_from(["g", "rand.graph", "beer_2"])))
    floats = _declare_inputs(draw, b, dtypes, edges, zero_size)
    limit = EDGE_MAX_SIZE if edges else MAX_SIZE
    s = _State(b=b, smooth=smooth, dtypes=dtypes, floats=floats, max_size=limit)
    inputs = {v.t.name for v in s.floats}
    for _ in range(draw(st.integers(min_ops, max_ops))):
        v = _pick(draw, s.floats)
        family = draw(st.sampled_from(list(_FAMILIES)))
        out = _FAMILIES[family](draw, s, v)  # type: ignore[arg-type]
        if out is None:
            out = _unary(draw, s, v)  # type: ignore[arg-type]
        s.floats.append(out)  # type: ignore[arg-type]
    loss = _loss(draw, s)
    b.output(LOSS, loss)
    # Extra outputs: never an input, never a second scalar float (the loss stays the default).
    candidates = [v.t for v in s.floats if v.t.ndim > 0 and v.t.name not in inputs] + s.bools + s.others
    for name in EXTRA_NAMES[: draw(st.integers(0, len(EXTRA_NAMES)))]:
        if candidates:
            b.output(name, candidates.pop(draw(st.integers(0, len(candidates) - 1))))
    return b.build()


def differentiable_inputs(graph: dp.Graph) -> list[str]:
    """Inputs that may be named in ``wrt``: float and ``requires_grad``."""
    return [i.name for i in graph.inputs if i.requires_grad and i.type.dtype in FLOATS]


def wrt_for(graph: dp.Graph) -> st.SearchStrategy[list[str]]:
    """A non-empty list of differentiable inputs of ``graph``, in declaration order."""
    names = differentiable_inputs(graph)
    return st.lists(st.sampled_from(names), min_size=1, unique=True).map(
        lambda chosen: [n for n in names if n in chosen]
    )


def inputs_for(graph: dp.Graph, seed: int) -> dict[str, np.ndarray]:
    """Inputs of the declared shapes and dtypes, magnitudes uniform in [0.5, 1.5] with
    random signs (a pure function of ``seed``)."""
    rng = np.random.default_rng(seed)
    out = {}
    for inp in graph.inputs:
        shape = inp.type.shape
        values = rng.uniform(0.5, 1.5, shape) * rng.choice([-1.0, 1.0], shape)
        out[inp.name] = np.asarray(values, dtype=inp.type.dtype)
    return out


@st.composite
def graph_and_inputs(
    draw: Draw,
    min_ops: int = 1,
    max_ops: int = 12,
    smooth: bool = False,
    dtypes: tuple[str, ...] = FLOATS,
    edges: bool = False,
    zero_size: bool = False,
) -> tuple[dp.Graph, dict[str, np.ndarray]]:
    """A graph from `graphs` and inputs for it from `inputs_for`."""
    kw = {"min_ops": min_ops, "max_ops": max_ops, "smooth": smooth, "dtypes": dtypes}
    graph = draw(graphs(**kw, edges=edges, zero_size=zero_size))
    return graph, inputs_for(graph, draw(st.integers(0, 2**32 - 1)))  # type: ignore[arg-type]


# -- serialisation stress ------------------------------------------------------------------
_json_scalars = (
    st.none()
    | st.booleans()
    | st.integers(-(2**62), 2**62)
    | st.floats(allow_nan=True, allow_infinity=True)
    | st.sampled_from([0.0, -0.0, 2.0, 1e-310, 1e300])
    | st.text(alphabet=st.sampled_from('ab #}{"\\\n\t%=:é∂'), max_size=6)
)
json_values = st.recursive(
    _json_scalars,
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=4), inner, max_size=3),
    max_leaves=6,
)
metas = st.dictionaries(st.text(alphabet="abc_.#} ", max_size=5), json_values, max_size=3)

_EXOTIC_CONSTANTS = (
    (math.nan, "float32"),
    (math.inf, "float64"),
    (-math.inf, "float32"),
    (-0.0, "float64"),
    (5e-324, "float64"),
    (2, "int32"),
    (2.0, "float32"),
    (True, "bool"),
    (255, "uint8"),
)


@st.composite
def decorated_graphs(draw: Draw) -> dp.Graph:
    """A graph from `graphs` with exotic constants as extra outputs and random meta on up
    to three nodes and on the graph."""
    graph = draw(graphs())
    b, _ = dp.GraphBuilder.from_graph(graph)
    outputs = list(graph.outputs)
    for k, (value, dtype) in enumerate(draw(st.lists(st.sampled_from(_EXOTIC_CONSTANTS), max_size=3))):
        shape = draw(st.sampled_from([(), (2,), (1, 3)]))
        outputs.append(dp.Output(name=f"const.{k}", value=b.constant(value, dtype, shape).name))
    b.set_outputs(outputs)
    nodes = list(b.nodes)
    for k in draw(st.lists(st.integers(0, len(nodes) - 1), max_size=3, unique=True)):
        nodes[k] = nodes[k].model_copy(update={"meta": draw(metas)})
    return b.build().replace(nodes=tuple(nodes), meta=draw(metas))

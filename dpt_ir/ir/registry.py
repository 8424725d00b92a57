"""The op table: every op is one `OpDef`, data that passes and backends query by trait.

An `OpDef` holds everything about an op: its kind, arity, attribute model, type rule,
NumPy reference, C++ lowering (element expression, reduction template or index map) and
derivative entry. Passes never test an op's name;
they ask ``kind``, ``cost``, ``derivative`` and the other fields.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, ValidationError

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import TensorType

if TYPE_CHECKING:
    from dpt_ir.ir.builder import Tensor
    from dpt_ir.ir.fanbeam import FanBeam
    from dpt_ir.ir.indexing import Affine, Coords, ImageMap
    from dpt_ir.ir.projection import ParallelBeam
    from dpt_ir.ir.recurrence import Recurrence

OpKind = Literal[
    "elementwise", "reduction", "shape", "stencil", "scatter", "contraction", "recurrence", "projection", "loop"
]
Cost = Literal["cheap", "expensive"]
AttrValue = Any
CONSTANT_OP = "constant"  # the op the IR uses for literals (Python scalars, folded values)


class NoAttrs(BaseModel):
    """Attribute model of ops that take no attributes."""

    model_config = ConfigDict(frozen=True, extra="forbid")


@dataclass(frozen=True)
class Signature:
    """What a type rule, a derived attribute or a formula may know statically about a node."""

    inputs: tuple[TensorType, ...]
    output: TensorType
    attrs: Any


class GradContext:
    """What a derivative formula sees: the output cotangent and the *declared* saved values.

    Reading an input or the output that the derivative entry does not declare raises,
    so the declared saved set is exactly what formulas read. ``expanded``: the `expand` pass
    will rebuild the node from its `OpDef.expansion` (`CompileOptions.expand`), so the formula
    builds the pieces that expansion rebuilds (cse shares them); else it reads the saved
    values of the op itself.
    """

    def __init__(
        self,
        op: OpDef,
        sig: Signature,
        gy: Tensor,
        inputs: tuple[Tensor, ...],
        output: Tensor,
        index: int = 0,
        expanded: bool = False,
    ) -> None:
        self.op = op
        self.index = index  # the input whose gradient is being built
        self.expanded = expanded
        self.sig = sig
        self.gy = gy
        self.attrs = sig.attrs
        self._inputs = inputs
        self._output = output

    def input(self, i: int) -> Tensor:
        d = self.op.derivative
        assert d is not None
        if not d.saves_input(i):
            raise AssertionError(f"op {self.op.name!r}: formula reads input {i}, not declared saved")
        return self._inputs[i]

    @property
    def out(self) -> Tensor:
        d = self.op.derivative
        assert d is not None
        if not d.saved_output:
            raise AssertionError(f"op {self.op.name!r}: formula reads its output, not declared saved")
        return self._output

    def input_type(self, i: int) -> TensorType:
        return self.sig.inputs[i]

    @property
    def out_type(self) -> TensorType:
        return self.sig.output

    def derived(self, name: str) -> Any:
        d = self.op.derivative
        assert d is not None
        if name not in d.derived:
            raise AssertionError(f"op {self.op.name!r}: formula reads undeclared attribute {name!r}")
        return d.derived[name](self.sig)


Formula = Callable[[GradContext], "Tensor"]
ALL_INPUTS = "*"


@dataclass(frozen=True)
class Derivative:
    """An op's entry in the table of derivative formulas (cf. PyTorch's derivatives.yaml).

    - ``formulas``: per differentiable input index (or ``"*"`` for every input of a
      variadic op), a function building the input's gradient as IR. A formula may return
      a gradient of the output's shape; autodiff then sums it over the broadcast axes.
    - ``saved_inputs`` / ``saved_output``: the tensors the formulas read.
    - ``derived``: static attributes the formulas read instead of a tensor (a shape, an
      element count), each computed from the node's signature.
    - ``nondifferentiable``: input indices that get no gradient (masks, conditions).
    """

    formulas: Mapping[int | str, Formula]
    saved_inputs: tuple[int, ...] | str = ()
    saved_output: bool = False
    derived: Mapping[str, Callable[[Signature], Any]] = field(default_factory=dict)
    nondifferentiable: tuple[int, ...] = ()

    def saves_input(self, i: int) -> bool:
        return self.saved_inputs == ALL_INPUTS or i in self.saved_inputs  # type: ignore[operator]

    def formula_for(self, i: int) -> Formula | None:
        if i in self.nondifferentiable:
            return None
        return self.formulas.get(i) or self.formulas.get(ALL_INPUTS)


@dataclass(frozen=True)
class Linear:
    """Forward mode's entry of an op linear in some of its inputs (`OpDef.linear`).

    ``groups``: sets of input indices in each of which, the other inputs held fixed, the op is
    linear (``op(.., a + b, ..) == op(.., a, ..) + op(.., b, ..)`` over the group's inputs
    together): add and sub ``((0, 1),)``, mul and matmul ``((0,), (1,))``, div ``((0,),)``;
    ``"*"``: every input, one group (a variadic join). The tangent a group contributes is the
    op itself applied to the group's tangents (zeros for members without one) and the other
    inputs' values: the forward's own kernel shape. ``attrs``: the attributes of that linear
    part where they differ from the node's (an affine op's constant dropped: ``cval`` 0), from
    the node's parsed attributes; None: the node's own. Inputs in no group get their tangent
    from the derivative entry (`dpt_ir.api.forward`)."""

    groups: tuple[tuple[int, ...], ...] | str
    attrs: Callable[[Any], dict[str, Any]] | None = None

    def groups_for(self, n_inputs: int) -> tuple[tuple[int, ...], ...]:
        if self.groups == ALL_INPUTS:
            return (tuple(range(n_inputs)),)
        return self.groups  # type: ignore[return-value]


def without_cval(attrs: Any) -> dict[str, Any]:
    """An affine op's linear part: its attributes with the constant ``cval`` set to 0."""
    return {**attrs.model_dump(), "cval": 0.0}


@dataclass(frozen=True)
class SparseRows:
    """A constant sparse linear map in CSR form, sorted by destination: output element
    ``o`` is ``sum(vals[k] * x[cols[k]] for k in range(rowptr[o], rowptr[o + 1])) + bias[o]``,
    summed in that order (an ordered gather: no scatter, no atomics); ``o`` and ``cols`` are
    flat row-major offsets into the output and the input."""

    rowptr: np.ndarray
    cols: np.ndarray
    vals: np.ndarray
    bias: np.ndarray | None = None


@dataclass(frozen=True)
class GatherCoords:
    """Where a gather reads for one output element, as backend-neutral `Affine` coordinate
    forms: integer input ``indices`` at ``indices_at`` holds a position along axis ``axis``
    (of length ``size``) of input ``source``, normalised by ``mode`` (``raise``: -size <= p
    < size, negatives count from the end, others flagged; ``wrap``: p mod size; ``clip``: p
    limited to [0, size - 1]); the source's other axes are read at ``source_at`` (whose
    entry at ``axis`` is a placeholder, replaced by the position)."""

    indices: int
    indices_at: Coords
    source: int
    source_at: Coords
    axis: int
    size: int
    mode: str


@dataclass(frozen=True)
class ScatterLayout:
    """How a scatter (``out = base`` plus values added at positions) maps its elements, for
    kernels that sum each destination's sources in a fixed order (no float atomics).

    Input ``base`` has the output's shape; integer input ``indices`` holds positions along
    axis ``axis`` (length ``size``, normalised by ``mode`` as in `GatherCoords`); each
    position element ``j`` (a multi-index into ``indices``) sends input ``values`` at
    ``source_at(dest, j)`` to the output element ``dest``. ``rows``: how many destination
    rows the positions sort into; ``key_form(j, p)``: the row of position element ``j``
    holding normalised position ``p``, as an `Affine` form over coordinate forms (``j`` one
    form per axis, ``p`` a form; evaluated on NumPy arrays for constant positions:
    `dpt_ir.backends.cxx.csr`); the sources of ``dest`` are the position elements of its
    row, in increasing flat order. ``source_at`` only rearranges its arguments' entries, so
    it takes `Affine` forms.

    The C++ path (`dpt_ir.backends.cxx.scatter`) reads the maps as `Affine` forms, which it
    renders itself: ``key_form`` and ``row_form(dest)``, the row of an output element
    (``dest`` one form per axis); None: no C++ lowering."""

    base: int
    indices: int
    values: int
    axis: int
    size: int
    mode: str
    rows: int
    source_at: Callable[[tuple[str, ...], tuple[str, ...]], tuple[str, ...]]
    key_form: Callable[[Coords, Affine], Affine] | None = None
    row_form: Callable[[Coords], Affine] | None = None


@dataclass(frozen=True)
class Contraction:
    """How a batched matrix product (kind ``contraction``) reads its two row-major operands.

    Output element ``(batch, i, j)``, at flat offset ``(flat(batch) * m + i) * n + j`` (a
    vector operand leaves ``m`` or ``n`` at 1 and its axis out of the output's shape), is
    ``sum(a[dot(batch, a_batch) + i * a_row + p * a_col] * b[dot(batch, b_batch) + p * b_row
    + j * b_col] for p in range(k))``. Strides are in elements; a broadcast batch axis has
    stride 0."""

    batch: tuple[int, ...]
    m: int
    k: int
    n: int
    a_batch: tuple[int, ...]
    a_row: int
    a_col: int
    b_batch: tuple[int, ...]
    b_row: int
    b_col: int


CXX_FLOATS = ("float", "double")  # the C++ floating types of generated kernels (float32, float64)


@dataclass(frozen=True)
class CxxSite:
    """Where a C++ element expression is generated (`dpt_ir.backends.cxx`): the node's
    attributes, operand expressions, C++ scalar types (``float``, ``double``, ``int``,
    ``bool``, ``unsigned char``), its shape, and the C++ integer expression of each of its own
    coordinates in the element being computed (sources such as ``iota`` read them)."""

    attrs: Any
    args: tuple[str, ...]
    out_type: str
    in_types: tuple[str, ...]
    out_shape: tuple[int, ...]
    index: tuple[str, ...]


@dataclass(frozen=True)
class LanePass:
    """One pass of a C++ lane reduction over the reduced elements, in 8 fixed lanes.

    ``lanes``: (name, C++ type, initial expression): each is an 8-element array. ``update``:
    statements folding element ``{x}`` (flat reduced index ``{r}``) into lane slot
    ``{a_<name>}`` of each lane; no statement may read another lane (the loop over the lanes
    vectorises). ``merge``: statements setting state ``{p_<name>}`` from the lane arrays
    ``{l_<name>}`` in a fixed order. Later passes read the state of earlier ones. ``fold``
    (optional): statements folding slot ``{b_<name>}`` of a second set of lanes into
    ``{a_<name>}``, lane by lane, for an update whose order may change that way (a sum; a
    max is left with one set: measured slower with two, and its sign of a zero would move).
    With it the CPU driver updates two sets, 8-element groups alternating between them (two
    independent chains: the loop no longer waits on one accumulator's latency), and folds the
    second into the first at the end of each block: an element's set and lane are fixed by its
    position in the block. ``map`` (optional): an expression of the element ``{x}`` (and the
    states of earlier passes), of the element's type, that ``update`` folds in its place
    (``{x}`` there is the mapped value): the CPU driver computes a block's mapped values in a
    loop of their own, at the full vector width (the lane loop holds 8 lanes: half a float32
    register), and every other lowering inlines it (`inlined`). Each element is mapped by the
    same expression either way: the same bits."""

    lanes: tuple[tuple[str, str, str], ...]
    update: str
    merge: str
    fold: str | None = None
    map: str | None = None

    def inlined(self) -> str:
        """``update`` with ``map`` (parenthesised) in place of ``{x}``: one statement per element."""
        return self.update if self.map is None else self.update.replace("{x}", f"({self.map})")


@dataclass(frozen=True)
class CxxReduce:
    """A deterministic C++ reduction: ``state`` (name, C++ type) is what one partial (a task's
    share, or a whole row) carries; ``passes`` compute it (logsumexp: a max pass, then a
    sum of exponentials); ``combine`` folds a later partial ``{o_<name>}`` into
    ``{p_<name>}`` (partials are combined in order); ``finalize`` is the output expression
    (``{count}``: the reduced element count)."""

    state: tuple[tuple[str, str], ...]
    passes: tuple[LanePass, ...]
    combine: str
    finalize: str


@dataclass(frozen=True)
class OpDef:
    """One op, declared once as data.

    ``infer(sig_inputs, attrs, where)`` returns the output type or raises ContractError;
    ``reference(attrs, *arrays)`` is the NumPy semantics; ``derivative`` is None when the
    output is not differentiable. The lowering is data too, read by the C++ backend
    (`dpt_ir.backends.cxx`; its helpers live in ``dpt_ir/backends/cxx/dp_math.h``):

    - ``cxx``: elementwise ops: the C++ element expression, a template (``{0}``, ``{1}`` …
      operands, ``{T}`` the output's C++ type, ``{T0}`` input 0's) or a function of a
      `CxxSite`. Trig templates read ``P`` (precise lanes) and OR into ``big`` (a huge
      argument was seen: the driver recomputes the block precisely);
    - ``cxx_domain``: a C++ condition, true where the inputs are in the op's domain
      (kernels flag a violation in the status word);
    - ``cxx_reduce``: reductions: a function of (input C++ type, output C++ type) giving a
      `CxxReduce`, or None where that type pair has no C++ lowering;
    - ``view_affine``, ``axis_images``, ``join_axis``: layout views, per-axis views (pads)
      and joins (see the fields' comments); ``weights``: constant-weight correlations;
    - ``sparse_rows``: constant sparse linear maps: a function of (attributes, output shape)
      giving the `SparseRows` (CSR) each output element sums in order;
    - ``gather_affine``, ``scatter``, ``table``: data-dependent reads (`GatherCoords`),
      scatters (`ScatterLayout`) and constant integer tables;
    - ``contraction``: batched matrix products: how they read their operands (`Contraction`);
    - ``recurrence``: linear recurrences along an axis (line filters): their program (`Recurrence`);
    - ``projection``: matrix-free parallel- and fan-beam projections and their transposes: their
      program (`ParallelBeam`, `FanBeam`).

    An op with none of these (`lowered` False) runs under `dp.interpret` only; compiling a
    graph that holds it is a ContractError naming it. The import-time check
    (`check_lowered`) proves every built-in op lowered, but loop ops (kind ``loop``).
    """

    name: str
    kind: OpKind
    arity: int | None  # None: variadic, at least one input
    infer: Callable[[tuple[TensorType, ...], Any, str], TensorType]
    reference: Callable[..., np.ndarray]
    attrs: type[BaseModel] = NoAttrs
    derivative: Derivative | None = None
    # Read by forward mode: the inputs the op is linear in, whose tangent is the op applied to
    # their tangents (`Linear`); None: every tangent comes from ``derivative``.
    linear: Linear | None = None
    # Layout views whose input coordinates are affine in the output's (broadcast_to, reshape,
    # transpose, slice...): from (attrs, input shape, output shape, the output element's
    # `Affine` coordinate forms, the loop space's extents), the input element's forms, or None
    # where they are not affine there.
    view_affine: Callable[[Any, tuple[int, ...], tuple[int, ...], Coords, tuple[int, ...]], Coords | None] | None = None
    # Views that read each axis independently (pad, pad_adjoint): from (attrs, input shape,
    # output shape), the `ImageMap`: per axis, the input indices each output index reads and
    # the interior where that is a plain shift (backends split loops there).
    axis_images: Callable[[Any, tuple[int, ...], tuple[int, ...]], ImageMap] | None = None
    # Variadic views that join their inputs along one axis (concat): the axis, from the
    # attributes; output index k on it reads the input whose range holds it, at k - offset.
    join_axis: Callable[[Any], int] | None = None
    # Constant-weight correlations: the tap weights (input index = output index + tap
    # position); kernels loop over the taps instead of unrolling them.
    weights: Callable[[Any], np.ndarray] | None = None
    # Where the taps of float32 data are summed, from the attributes: "float64" (rounded once)
    # or "dtype" (an ordered float32 fmaf chain); None: "float64".
    tap_accumulation: Callable[[Any], str] | None = None
    # Input reads per output element (stencil taps, folded images), from (attrs, output shape):
    reads_per_element: Callable[[Any, tuple[int, ...]], int] | None = None
    # Copies of an inlined producer's code the lowering emits per element, from (attrs,
    # output shape): one per image a fold reads (pad_adjoint's boundary images; a tap loop
    # is one copy). Fusion bounds the product of nested copies (generated code size).
    code_copies: Callable[[Any, tuple[int, ...]], int] | None = None
    # Reads input 0 at data-dependent positions (take): fusion cannot assume each source
    # element is read once; on average it is read (output elements / source elements) times.
    data_dependent_reads: bool = False
    # Constant sparse linear maps (interpolation, projection, a recursive filter's matrix):
    # the destination-sorted CSR of the node, from its attributes; kernels loop over a row.
    sparse_rows: Callable[[Any, tuple[int, ...]], SparseRows] | None = None
    # Data-dependent reads on the C++ path (take): from (attrs, input shapes, output shape, the
    # output element's `Affine` coordinate forms, the loop space's extents), where it reads
    # (`GatherCoords`); the position itself is loaded per element.
    gather_affine: (
        Callable[[Any, tuple[tuple[int, ...], ...], tuple[int, ...], Coords, tuple[int, ...]], GatherCoords] | None
    ) = None
    # Scatters (kind "scatter", add_at): from (attrs, output shape, indices shape).
    scatter: Callable[[Any, tuple[int, ...], tuple[int, ...]], ScatterLayout] | None = None
    # Batched matrix products (kind "contraction", matmul): from (attrs, input shapes).
    contraction: Callable[[Any, tuple[tuple[int, ...], ...]], Contraction] | None = None
    # Linear recurrences along an axis (kind "recurrence", the spline prefilter): from (attrs,
    # input shape), the line program (`dpt_ir.ir.recurrence.Recurrence`).
    recurrence: Callable[[Any, tuple[int, ...]], Recurrence] | None = None
    # Matrix-free projections (kind "projection": radon, fanbeam and their transposes): from
    # (attrs, input shape), the program (`dpt_ir.ir.projection.ParallelBeam`,
    # `dpt_ir.ir.fanbeam.FanBeam`); no per-problem table.
    projection: Callable[[Any, tuple[int, ...]], ParallelBeam | FanBeam] | None = None
    # Source ops whose elements are a constant table (index_array): the table from the
    # attributes; kernels read it from a constant array.
    table: Callable[[Any], np.ndarray] | None = None
    # Ops whose attributes name a leading batch axis's extent or read along it (views, pads,
    # stencils, reductions, sources): from (attrs, input shapes, output shape), the attributes
    # of the op applied to one element of that axis (its extent 1 in every shape), or None where
    # an output element at batch index b reads inputs at other batch indices. Elementwise ops
    # with inputs need none (their attributes never name a shape); every other op without it
    # is taken to mix the batch (`dpt_ir.passes.loop_batches`).
    batch_attrs: Callable[[Any, tuple[tuple[int, ...], ...], tuple[int, ...]], dict[str, Any] | None] | None = None
    cxx: str | Callable[[CxxSite], str] | None = None
    cxx_domain: str | None = None
    cxx_reduce: Callable[[str, str], CxxReduce | None] | None = None
    cost: Cost = "cheap"
    work: int = 1  # relative cost of one evaluation (arithmetic 1, division 4, transcendental 8)
    doc: str = ""
    # Algebraic traits read by canonicalize (never the op's name):
    preserves_layout: bool = False  # a view whose flat row-major order is its input's (reshape, squeeze)
    identity: float | None = None  # x op identity == x (right identity; both sides if commutative)
    # Ops whose output elements each fold a slice of their input (reductions, contractions):
    # the value of an element whose slice is empty (sum 0, mean NaN, logsumexp -inf, matmul
    # 0). None where there is none (max, min, the arg-reductions: their type rules refuse an
    # empty slice, as NumPy raises). Canonicalize folds such a node over an empty input.
    empty_value: float | None = None
    commutative: bool = False
    involution: bool = False  # op(op(x)) == x
    # Read by canonicalize: per input, the boolean attribute under which the op reads that
    # input with its last two axes swapped (matmul's transpose_a / transpose_b), or None; a
    # layout view that only swaps them (`view_affine`) folds into the flag instead of a copy.
    swap_flags: tuple[str | None, ...] | None = None
    # Read by autodiff: a float output that is constant between jumps (floor, ceil, sign), so
    # its derivative is zero wherever it exists and an op without a derivative entry rightly
    # passes no gradient. Second order (`dpt_ir.api.second_order`) refuses any other op without
    # one that it meets on a differentiated path: its derivative is unknown, not zero.
    piecewise_constant: bool = False
    # Read by autodiff and forward mode, as `piecewise_constant`: the op passes its input's value
    # and no derivative, at every order (stop_gradient): its derivative is zero by definition.
    stops_gradient: bool = False
    constant_value: Callable[[Any], Any] | None = None  # the fill value of a constant op
    # Read by the reciprocal pass: (multiply op, reciprocal op) with a op b == multiply(a, reciprocal(b))
    # up to rounding (div: a * (1 / b), one extra rounding)
    divides_as: tuple[str, str] | None = None
    # Read by the expand pass: (attrs, input tensors) -> the op's value rebuilt from primitives
    # (None: not for these inputs), for an op whose derivative formula builds the same pieces
    # where `GradContext.expanded` (cse then shares them)
    expansion: Callable[[Any, tuple[Any, ...]], Any] | None = None

    @property
    def lowered(self) -> bool:
        """Whether the op table gives the C++ backend a lowering of this op (any of the
        fields above); an op without one runs under `dp.interpret` only."""
        fields = (self.cxx, self.cxx_reduce, self.view_affine, self.axis_images, self.join_axis, self.weights,
                  self.sparse_rows, self.gather_affine, self.table, self.scatter, self.contraction,
                  self.recurrence, self.projection)  # fmt: skip
        return any(f is not None for f in fields)

    @property
    def differentiable(self) -> bool:
        return self.derivative is not None

    def differentiable_inputs(self, n_inputs: int) -> tuple[int, ...]:
        if self.derivative is None:
            return ()
        return tuple(i for i in range(n_inputs) if self.derivative.formula_for(i) is not None)

    def parse_attrs(self, attrs: Mapping[str, Any], where: str) -> BaseModel:
        """Validate ``attrs`` against the op's attribute model; ContractError on failure."""
        if not isinstance(attrs, Mapping):
            raise ContractError(
                f"{where}: attributes of op {self.name!r} must be a mapping name -> value, "
                f"found {type(attrs).__name__} {attrs!r}"
            )
        try:
            return self.attrs.model_validate(dict(attrs))
        except ValidationError as exc:
            problems = "; ".join(
                f"attribute {'.'.join(str(p) for p in e['loc']) or '?'}: {e['msg']} (found {e.get('input')!r})"
                for e in exc.errors()
            )
            raise ContractError(f"{where}: bad attributes for op {self.name!r}: {problems}") from None

    def canonical_attrs(self, attrs: Mapping[str, Any], where: str) -> dict[str, Any]:
        """The attributes as stored in the IR: validated, defaults filled, JSON-shaped."""
        return self.parse_attrs(attrs, where).model_dump(mode="json")

    def check_arity(self, n: int, where: str) -> None:
        if self.arity is None:
            if n < 1:
                raise ContractError(f"{where}: op {self.name!r} takes at least 1 input, found {n}")
        elif n != self.arity:
            raise ContractError(f"{where}: op {self.name!r} takes {self.arity} input(s), found {n}")


_REGISTRY: dict[str, OpDef] = {}
_OP_NAME_RE = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def register_op(op: OpDef, *, replace: bool = False) -> OpDef:
    """Add ``op`` to the table after checking its name and that its derivative entry is
    complete. An op without a C++ lowering (`OpDef.lowered`: no ``cxx=`` and no other
    lowering field) is accepted as interpreter-only: `dp.interpret` runs it, and compiling a
    graph that holds it is a ContractError naming it (see docs/adding-an-op.md)."""
    if not isinstance(op, OpDef):
        raise ContractError(f"register_op: expected an OpDef, found {type(op).__name__} {op!r}")
    if not isinstance(op.name, str) or not _OP_NAME_RE.fullmatch(op.name):
        raise ContractError(
            f"register_op: invalid op name {op.name!r}; expected letters, digits and '_', not starting with a digit"
        )
    if op.name in _REGISTRY and not replace:
        raise ContractError(f"op {op.name!r} is already registered (pass replace=True to override)")
    check_complete(op)
    _REGISTRY[op.name] = op
    return op


def get_op(name: str, where: str = "graph") -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise ContractError(f"{where}: unknown op {name!r} (see `dpt-ir ops` for the op table)") from None


def has_op(name: str) -> bool:
    return name in _REGISTRY


def all_ops() -> tuple[OpDef, ...]:
    return tuple(_REGISTRY[k] for k in sorted(_REGISTRY))


def check_lowered(ops: tuple[OpDef, ...]) -> None:
    """Prove the built-in table compilable: every op has a C++ lowering (`OpDef.lowered`)
    but loop ops (kind ``loop``), which compile to loop programs whose bodies are ordinary
    graphs. ContractError naming the ops that have none."""
    bare = [op.name for op in ops if op.kind != "loop" and not op.lowered]
    if bare:
        raise ContractError(
            f"op table: expected a C++ lowering (cxx=, cxx_reduce=, an index map...) for every built-in op, "
            f"found none for {bare}"
        )


def check_complete(op: OpDef) -> None:
    """Prove an op's derivative entry complete: formulas cover every input that is not
    declared non-differentiable, every saved name refers to something that exists, and a
    forward-mode `Linear` entry names differentiable inputs of an op with a derivative entry."""
    _check_linear(op)
    d = op.derivative
    if d is None:
        return
    if op.arity is None:
        if ALL_INPUTS not in d.formulas and not d.nondifferentiable:
            raise ContractError(f"op {op.name!r}: variadic op needs a '*' formula")
        if d.saved_inputs not in (ALL_INPUTS, ()):
            raise ContractError(f"op {op.name!r}: a variadic op saves all inputs ('*') or none")
        return
    for i in range(op.arity):
        has = i in d.formulas or ALL_INPUTS in d.formulas
        if not has and i not in d.nondifferentiable:
            raise ContractError(
                f"op {op.name!r}: input {i} has no derivative formula and is not declared non-differentiable"
            )
    saved = range(op.arity) if d.saved_inputs == ALL_INPUTS else d.saved_inputs
    for i in saved:
        if not 0 <= i < op.arity:  # type: ignore[operator]
            raise ContractError(f"op {op.name!r}: saved input {i} does not exist")
    for key in d.formulas:
        if key != ALL_INPUTS and not 0 <= key < op.arity:  # type: ignore[operator]
            raise ContractError(f"op {op.name!r}: formula for input {key} that does not exist")


def _check_linear(op: OpDef) -> None:
    lin = op.linear
    if lin is None:
        return
    if op.derivative is None:
        raise ContractError(f"op {op.name!r}: a linear entry needs a derivative entry; found none")
    if lin.groups == ALL_INPUTS:
        return
    if op.arity is None or isinstance(lin.groups, str):
        raise ContractError(f"op {op.name!r}: linear groups of a variadic op must be '*', found {lin.groups!r}")
    seen: set[int] = set()
    for group in lin.groups:
        for i in group:
            if not 0 <= i < op.arity or i in seen or i in op.derivative.nondifferentiable:
                raise ContractError(
                    f"op {op.name!r}: linear group {group} names input {i}; expected distinct differentiable "
                    f"inputs of 0..{op.arity - 1}, each in one group"
                )
            seen.add(i)

"""The ``dp.*`` API reference (``docs/api.md``), generated from the docstrings.

``python -m dpt_ir.cli.apiref > docs/api.md`` regenerates it; `tests/test_api_doc.py` fails
when the file is stale or when a public name of ``dpt_ir`` is in no section. Assumes the
public API is what ``dpt_ir/__init__.py`` exports; guarantees every exported name appears
once (aliases, such as ``dp.abs`` and ``dp.absolute``, share one entry) and that the text
is a pure function of the docstrings and signatures (no addresses, no dates).
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from typing import Any

import dpt_ir as dp

HEADER = """# API reference

Generated from the docstrings by `python -m dpt_ir.cli.apiref > docs/api.md`; a test fails
when this file is stale. Every name is used as `import dpt_ir as dp; dp.<name>`. The op
table (what each op computes, its gradient and what its backward saves) is in
[ops.md](ops.md); what is checked and which error you get in
[contracts-and-determinism.md](contracts-and-determinism.md).
"""

# (title, introduction, public names in order; "Class.method" documents a method)
SECTIONS: list[tuple[str, str, list[str]]] = [
    (
        "Building graphs",
        "A `GraphBuilder` records a graph: declare inputs, compute with operators and `dp.*`\n"
        "functions on `Tensor` handles, declare outputs, `build()`. Every call is checked as it\n"
        "is made, so a `ContractError` points at the line that made the mistake.",
        [
            "GraphBuilder",
            "GraphBuilder.input",
            "GraphBuilder.output",
            "GraphBuilder.build",
            "GraphBuilder.emit",
            "GraphBuilder.constant",
            "Tensor",
        ],
    ),
    (
        "Elementwise functions",
        "NumPy's names and semantics. Binary functions broadcast their operands (NumPy rules)\n"
        "and promote their dtypes (NumPy rules on float32, float64, int32, uint8, bool); a\n"
        "Python scalar operand is a weak constant that keeps the tensor's dtype (a float\n"
        "scalar with an integer tensor gives float64). Floating\n"
        "functions (`exp`, `log`, `sin`...) refuse integer tensors: `dp.cast` first.\n"
        "Comparisons give bool tensors. Gradient conventions at kinks and ties are in\n"
        "[design-decisions.md](design-decisions.md#gradients-at-ties-and-kinks).",
        [
            "abs",
            "neg",
            "exp",
            "log",
            "log1p",
            "expm1",
            "sqrt",
            "rsqrt",
            "square",
            "reciprocal",
            "sin",
            "cos",
            "tanh",
            "sigmoid",
            "relu",
            "softplus",
            "erf",
            "sign",
            "floor",
            "ceil",
            "stop_gradient",
            "add",
            "sub",
            "mul",
            "div",
            "pow",
            "maximum",
            "minimum",
            "atan2",
            "lt",
            "le",
            "gt",
            "ge",
            "eq",
            "ne",
            "logical_and",
            "logical_or",
            "logical_not",
            "where",
            "clamp",
            "cast",
        ],
    ),
    (
        "Reductions",
        "`axis` is None (every axis), an int or a tuple of ints, negative counting from the end;\n"
        "`keepdims=True` keeps the reduced axes with size 1, as in NumPy. Sums of float32 data\n"
        "accumulate in float64 in compiled programs, in a fixed order (deterministic).",
        ["sum", "mean", "max", "min", "logsumexp", "argmax", "argmin"],
    ),
    (
        "Shape functions",
        "Views in NumPy's sense (no data is copied in a fused kernel); indexing and slicing\n"
        "with `x[...]` are described under `Tensor` above.",
        ["broadcast_to", "reshape", "expand_dims", "squeeze", "transpose", "concatenate"],
    ),
    (
        "Gather, scatter and matrix products",
        "NumPy's semantics; positions are int32 tensors or integer NumPy arrays (constants), never\n"
        "differentiated. Adjoints are exact and deterministic (no float atomics): a scatter sums\n"
        "each destination's values in a fixed order. See [gather-scatter.md](gather-scatter.md).",
        ["take", "take_along_axis", "add_at", "matmul"],
    ),
    (
        "Imaging and objectives",
        "Filters with `scipy.ndimage` names, signatures and boundary modes, on 1-D and 2-D\n"
        "images; objectives for fitting a model to data. See [imaging.md](imaging.md).\n"
        "`dp.gradient` returns a **list** of tensors, one per axis, whenever several axes are\n"
        "differentiated (`axis=None` on a 2-D image gives `[d/d axis 0, d/d axis 1]`), as\n"
        "`numpy.gradient` does; one tensor for one axis. A `NumericalError` raised inside one\n"
        "of these functions names it (`... (op log in dp.poisson_deviance, ...)`).",
        [
            "correlate",
            "convolve",
            "correlate1d",
            "convolve1d",
            "gaussian_filter",
            "gradient",
            "squared_error",
            "poisson_deviance",
        ],
    ),
    (
        "Interpolation and projection",
        "`scipy.ndimage` interpolation (orders 0 to 5; every mode with `cval`) and\n"
        "`skimage.transform.radon`, with a compile-time constant geometry: each is a constant\n"
        "sparse map whose gradient is its exact transpose, an ordered gather (no atomics).\n"
        "`radon` and `fanbeam` (ASTRA's `fanflat` geometry) are matrix-free projectors.\n"
        "See [resampling.md](resampling.md).",
        [
            "map_coordinates",
            "affine_transform",
            "shift",
            "zoom",
            "rotate",
            "spline_filter1d",
            "spline_filter",
            "radon",
            "fanbeam",
        ],
    ),
    (
        "Loops",
        "`jax.lax.scan` semantics: the step is built once, as a body graph, and tensors of the\n"
        "enclosing graph it uses become inputs of the loop node (gradients reach them). The\n"
        "reverse sweep stores every carry or runs binomial checkpointing (revolve). `dp.compile`\n"
        "compiles the body once and launches it per step; loop programs run, `value_and_grad`,\n"
        "tape passes and the interop adapters like any program. See [loops.md](loops.md).",
        ["scan", "fori_loop"],
    ),
    (
        "Compiling and running",
        "`dp.compile` returns a `Program`. `run(**inputs)` returns a dict output name -> NumPy\n"
        "array; `value_and_grad(**inputs)` returns that dict and a dict input name -> gradient\n"
        "(NumPy arrays) of the loss output; a `TapePass` runs one forward and one backward on\n"
        "`wp.array`s and returns dicts of program-owned `wp.array`s. Inputs may be NumPy arrays,\n"
        "`wp.array`s on the program's device, Python scalars (0-d inputs) or exactly convertible\n"
        "lists ([contracts-and-determinism.md](contracts-and-determinism.md#accepted-input-kinds-one-front-door)).",
        [
            "compile",
            "Program",
            "Program.run",
            "Program.value_and_grad",
            "Program.jvp",
            "Program.hvp",
            "Program.gnvp",
            "Program.tape_pass",
            "TapePass",
            "TapePass.forward",
            "TapePass.backward",
            "TapePass.close",
        ],
    ),
    (
        "Reference interpreter",
        "The NumPy oracle of every test: the same inputs and the same results as `run` and\n"
        "`value_and_grad`'s gradients, computed op by op in the declared dtypes; `interpret_jvp`\n"
        "and `interpret_hvp` are the oracles of `jvp` and `hvp` ([second_order.md](second_order.md)).",
        ["interpret", "interpret_grad", "interpret_jvp", "interpret_hvp"],
    ),
    (
        "Graphs and the IR",
        "A `Graph` is a frozen pydantic model: `graph.model_dump_json()` /\n"
        "`dp.Graph.model_validate_json(doc)` and `graph.to_text()` / `dp.Graph.from_text(text)`\n"
        "round-trip exactly ([ir-format.md](ir-format.md)).",
        [
            "Graph",
            "Graph.to_text",
            "Graph.from_text",
            "Graph.from_json",
            "Graph.replace",
            "Graph.output_value",
            "TensorType",
            "Input",
            "Node",
            "Output",
        ],
    ),
    (
        "Adding ops",
        "Ops are data: one `OpDef` per op, with its derivative entry. See\n[adding-an-op.md](adding-an-op.md).",
        ["register_op", "OpDef", "Derivative", "GradContext", "get_op", "all_ops"],
    ),
    (
        "Errors",
        "The only exception types to catch.",
        ["ContractError", "LifecycleError", "NumericalError"],
    ),
]

# Reference text for names whose docstring lives in a file this generator does not own
# and says too little on its own (shown after the docstring, if any).
SUPPLEMENTS: dict[str, str] = {
    "Program": "Made by `dp.compile`. Its buffers are allocated once and reused by every call:\n"
    "`run` and `value_and_grad` return NumPy copies, a tape pass returns program-owned\n"
    "`wp.array`s (copy what you keep). `program.graph` is the compiled graph, `program.wrt`\n"
    "the differentiated inputs, `program.loss` the output `value_and_grad` seeds.",
    "get_op": "The `OpDef` registered under `name`; `ContractError` naming `where` if there is none.",
    "all_ops": "Every registered `OpDef` (built-in and user ops), sorted by name.",
}

# How the reference writes the receiver of an instance method.
INSTANCE_NAMES = {"GraphBuilder": "g", "Program": "program", "TapePass": "tp", "Graph": "graph"}


def _resolve(name: str) -> Any:
    obj: Any = dp
    for part in name.split("."):
        obj = getattr(obj, part)
    return obj


def _aliases() -> dict[int, list[str]]:
    """id of each public object of ``dpt_ir`` -> its public names, in sorted order."""
    out: dict[int, list[str]] = {}
    for name in sorted(vars(dp)):
        obj = getattr(dp, name)
        if name.startswith("_") or inspect.ismodule(obj):
            continue
        out.setdefault(id(obj), []).append(name)
    return out


def _signature(fn: Callable[..., Any], drop_self: bool) -> str:
    """``(a, b=1, *, c=None) -> Ret``: parameter names and defaults, the return annotation."""
    sig = inspect.signature(fn)
    params = list(sig.parameters.values())[1 if drop_self else 0 :]
    parts, star = [], False
    for p in params:
        if p.kind is p.KEYWORD_ONLY and not star:
            parts.append("*")
            star = True
        prefix = {p.VAR_POSITIONAL: "*", p.VAR_KEYWORD: "**"}.get(p.kind, "")
        star = star or p.kind is p.VAR_POSITIONAL
        default = "" if p.default is p.empty else f"={p.default!r}"
        parts.append(f"{prefix}{p.name}{default}")
    ret = sig.return_annotation
    ret_text = "" if ret is sig.empty else f" -> {ret if isinstance(ret, str) else getattr(ret, '__name__', ret)}"
    return f"({', '.join(parts)}){ret_text}"


def _entry(name: str, aliases: dict[int, list[str]]) -> list[str]:
    obj = _resolve(name)
    method = "." in name
    if inspect.isclass(obj):
        heading = f"### `dp.{name}`"
    elif not method:
        heading = f"### `dp.{name}{_signature(obj, drop_self=False)}`"
    else:
        cls, attr = name.split(".")
        bound = inspect.ismethod(obj)  # a classmethod, bound to its class
        owner = f"dp.{cls}" if bound else INSTANCE_NAMES[cls]
        heading = f"### `{owner}.{attr}{_signature(obj, drop_self=not bound)}`"
    lines = [heading, ""]
    others = [a for a in aliases.get(id(obj), []) if a != name] if not method else []
    if others:
        lines += ["Also: " + ", ".join(f"`dp.{a}`" for a in others) + ".", ""]
    doc = inspect.getdoc(obj) or ""
    for text in (doc, SUPPLEMENTS.get(name, "")):
        lines += [text, ""] if text else []
    return lines


def api_markdown() -> str:
    """The whole reference as Markdown."""
    aliases = _aliases()
    lines = [HEADER]
    for title, intro, names in SECTIONS:
        lines += [f"## {title}", "", intro, ""]
        for name in names:
            lines += _entry(name, aliases)
    return "\n".join(lines).rstrip("\n") + "\n"


def undocumented() -> list[str]:
    """Public names of ``dpt_ir`` that no section covers (directly or as an alias)."""
    covered = {id(_resolve(n)) for _, _, names in SECTIONS for n in names if "." not in n}
    return sorted(a for key, names in _aliases().items() if key not in covered for a in names)


if __name__ == "__main__":
    print(api_markdown(), end="")

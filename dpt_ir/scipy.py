"""`objective(program, **fixed_inputs)`: a program's loss as a SciPy objective.

Assumes: the program has a scalar loss output (``program.loss``) and a non-empty ``wrt``;
``fixed_inputs`` are exactly its other inputs, held unchanged while the objective is used.
Guarantees: ``fun(x) -> (float, ndarray)`` for ``scipy.optimize.minimize(fun, x0,
jac=True)``, where ``x`` is the flat float64 concatenation of the ``wrt`` inputs (in
``program.wrt`` order, each flattened in C order). Dtype conversion: ``x`` is rounded to
each input's declared dtype before the program runs, and the value and gradient are
returned as float64; so a float32 program is evaluated at the float32-rounded point and
its gradient carries float32 rounding (a line search can stall near float32 resolution;
use a float64 graph for tight tolerances). ``fun.x0(**arrays)`` flattens starting
values, ``fun.unflatten(x)`` splits ``x`` back into arrays of the declared shapes and
dtypes; ``fun.nfev`` counts the evaluations. ``fun.hessp(x, p)`` is the Hessian of the loss
at ``x`` times ``p`` (`Program.hvp`, its vectors ``p`` rounded to the inputs' dtypes like
``x``), as float64, for ``minimize(fun, x0, jac=True, hessp=fun.hessp, method="trust-ncg")``
or ``"Newton-CG"``; ``fun.nhev`` counts those products. A ``NumericalError`` from the program
propagates (SciPy gets no made-up value).
"""

from __future__ import annotations

from typing import Any

import numpy as np

from dpt_ir.interop import CompiledProgram, input_names, output_type, require_program
from dpt_ir.ir.errors import ContractError


def objective(program: CompiledProgram, **fixed_inputs: Any) -> Objective:
    """The program's loss over its ``wrt`` inputs, the others fixed (see the module docstring)."""
    return Objective(program, fixed_inputs)


class Objective:
    """``fun(x) -> (value, gradient)`` over the flat float64 vector of ``program.wrt``."""

    def __init__(self, program: CompiledProgram, fixed_inputs: dict[str, Any]) -> None:
        require_program(program, "dpt_ir.scipy.objective")
        graph = program.graph
        if not program.wrt:
            raise ContractError(f"dpt_ir.scipy.objective: program {graph.name!r} was compiled without wrt")
        if program.loss is None or output_type(graph, program.loss).shape != ():
            raise ContractError(
                f"dpt_ir.scipy.objective: program {graph.name!r} needs a scalar loss output; "
                f"compile with loss='<scalar output>' (found loss={program.loss!r})"
            )
        expected = [n for n in input_names(graph) if n not in program.wrt]
        wrong = [n for n in fixed_inputs if n in program.wrt]
        missing = [n for n in expected if n not in fixed_inputs]
        extra = [n for n in fixed_inputs if n not in expected and n not in program.wrt]
        if wrong or missing or extra:
            raise ContractError(
                f"dpt_ir.scipy.objective: fixed inputs must be exactly {expected} (wrt {list(program.wrt)} come "
                f"from x); found wrt {wrong}, missing {missing}, unexpected {extra}"
            )
        self.program = program
        self.fixed = dict(fixed_inputs)
        self.types = {w: graph.types[w] for w in program.wrt}
        self.offsets = np.cumsum([0] + [t.size for t in self.types.values()])
        self.size = int(self.offsets[-1])
        self.nfev = 0
        self.nhev = 0

    def __call__(self, x: Any) -> tuple[float, np.ndarray]:
        """The loss at ``x`` and its gradient, as float64."""
        arrays = self.unflatten(x)
        outs, grads = self.program.value_and_grad(**self.fixed, **arrays)
        self.nfev += 1
        assert self.program.loss is not None
        flat = np.concatenate([grads[w].astype(np.float64).reshape(-1) for w in self.types])
        return float(outs[self.program.loss]), flat

    def hessp(self, x: Any, p: Any) -> np.ndarray:
        """The Hessian of the loss at ``x`` times ``p``, as a flat float64 vector."""
        arrays, vectors = self.unflatten(x), self.unflatten(p)
        _, _, hvps = self.program.hvp(vectors, **self.fixed, **arrays)
        self.nhev += 1
        return np.concatenate([hvps[w].astype(np.float64).reshape(-1) for w in self.types])

    def x0(self, **arrays: Any) -> np.ndarray:
        """Starting values (one array per ``wrt`` input, of its shape) as the flat float64 vector."""
        if set(arrays) != set(self.types):
            raise ContractError(f"x0: expected exactly the wrt inputs {list(self.types)}, found {list(arrays)}")
        parts = []
        for name, t in self.types.items():
            arr = np.asarray(arrays[name])
            if arr.shape != t.shape:
                raise ContractError(f"x0: input {name!r}: expected shape {list(t.shape)}, found {list(arr.shape)}")
            parts.append(arr.astype(np.float64).reshape(-1))
        return np.concatenate(parts)

    def unflatten(self, x: Any) -> dict[str, np.ndarray]:
        """Split the flat vector into the ``wrt`` inputs (declared shapes, declared dtypes)."""
        flat = np.asarray(x)
        if flat.ndim != 1 or flat.size != self.size or flat.dtype.kind not in "biuf":
            raise ContractError(
                f"objective of {self.program.graph.name!r}: expected a flat real vector of {self.size} values, "
                f"found shape {list(flat.shape)} of dtype {flat.dtype}"
            )
        return {
            name: flat[self.offsets[k] : self.offsets[k + 1]].reshape(t.shape).astype(t.dtype)
            for k, (name, t) in enumerate(self.types.items())
        }

"""Reductions over non-adjacent axes: which row of the space an (output, reduced row) is.

Assumes: a loop space whose rows (the space without its inner axes) are numbered row-major
over ``extents``, some of whose axes are reduced (``reduced``) and the others kept. The
outputs of the reduction are numbered row-major over the kept axes (as NumPy lays out the
result, with or without keepdims) and each output's reduced rows row-major over the reduced
axes (the order of ``np.reshape(np.moveaxis(x, axes, -1), ...)``: the flat index argmax
returns). Guarantees: `RowMap.statements` is C++ that sets ``int <row>`` to the row number
of (kept index, reduced index), by division and modulus of those two per-row indices only,
never of a loop's inner counter; the walk over an output's rows is iteration order, so a
driver that folds them in turn folds its elements in row-major order of the reduced axes.
"""

from __future__ import annotations

import math
from dataclasses import dataclass


@dataclass(frozen=True)
class RowMap:
    """The rows of a space of extents ``extents`` (row-major), ``reduced[a]`` saying whether
    axis ``a`` is reduced: ``kept`` outputs (or column groups) of ``count`` rows each."""

    extents: tuple[int, ...]
    reduced: tuple[bool, ...]

    @property
    def kept(self) -> int:
        return math.prod(n for n, r in zip(self.extents, self.reduced, strict=True) if not r)

    @property
    def count(self) -> int:
        return math.prod(n for n, r in zip(self.extents, self.reduced, strict=True) if r)

    def statements(self, row: str, kept: str, red: str) -> list[str]:
        """C++ setting ``int <row>`` from the kept index ``kept`` and the reduced index ``red``
        (expressions, each evaluated once)."""
        out = [f"int {row} = 0;", f"{{ int qk = {kept}, qr = {red}; (void)qk; (void)qr;"]
        for a in reversed(range(len(self.extents))):
            n, stride = self.extents[a], math.prod(self.extents[a + 1 :])
            if n == 1:
                continue
            q = "qr" if self.reduced[a] else "qk"
            term = "" if stride == 1 else f" * {stride}"
            out.append(f"{row} += ({q} % {n}){term}; {q} /= {n};")
        return [*out, "}"]


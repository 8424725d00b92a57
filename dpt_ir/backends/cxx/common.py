"""What every C++ emitting module shares: the dtype spellings, the kernel-name token, the
precise-trig preamble and the flat offset forms.

Assumes: nothing from the other ``backends/cxx`` modules (this is their leaf: each may
import it, it imports none of them); the Warp glue's array limits (`spelling`).
Guarantees: constants and pure functions only; the text they give is the text the emitters
wrote before they were shared.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpt_ir.backends.warp.spelling import AXIS_LIMIT, WIDE_ROW
from dpt_ir.ir import indexing as idx
from dpt_ir.ir.indexing import Affine, Coords

C_TYPES = {"float32": "float", "float64": "double", "int32": "int", "uint8": "unsigned char", "bool": "bool"}
# The C types of reduction states, partials and launch constants, by dpt_ir dtype; a launch
# names a buffer's type by its dtype (`KernelSource.partials`), never by a Warp spelling.
STATE_TYPES = {**C_TYPES, "uint32": "unsigned"}
DTYPE_OF_C = {c: d for d, c in STATE_TYPES.items()}

TOKEN = "@F@"  # replaced by the kernel's hashed name (`units.hashed`)
# The most elements a kernel's space or any tensor it reads or writes may have: the drivers
# index with 32-bit ints, and a task's end (its start plus a chunk of `Target.cpu_task` or a
# block) may pass the last element before it is clamped, so 2**20 below 2**31 is kept free.
INDEX_LIMIT = 2**31 - 2**20
# Past `INDEX_LIMIT`, a kernel indexes with 64-bit integers (`WIDE_INDEX`, chosen per kernel,
# `Nest.index`: the others keep 32-bit ints and their text). The Warp glue binds such a
# buffer as rows of `WIDE_ROW` elements (an axis of a Warp array holds fewer than 2**31), so
# a tensor has at most `AXIS_LIMIT` such rows.
WIDE_LIMIT = AXIS_LIMIT * WIDE_ROW
WIDE_INDEX = "long long"
# Code outside any element loop (an epilogue, a sort stage): trig takes its precise path (P),
# so no huge-argument rerun is needed and ``big`` is only the templates' out-parameter.
PRECISE_TRIG = "constexpr bool P = true; bool big = false; (void)P; (void)big;"


def offset(coords: Coords, shape: Sequence[int], space: Sequence[int]) -> Affine:
    """The flat row-major offset of ``coords`` in a value of ``shape``, canonical."""
    return idx.canonical(idx.flat(coords, shape, len(space)), space)


def flat_index(space: Sequence[int]) -> Affine:
    """The offset of the space's own element (``i`` in a loop, ``o`` in an epilogue)."""
    return idx.canonical(Affine(0, tuple(idx.strides(space))), space)

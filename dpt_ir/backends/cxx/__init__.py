"""The C++ sources shared by the CPU and CUDA builds of generated kernels.

Assumes: the files sit next to this module as package data (declared in
``pyproject.toml``). Guarantees: ``math_header()`` returns the text of ``dp_math.h``, the
branch-free float32 math header (see its opening comment and ``docs/math.md``), ready to
be put in a Warp module's CPU and CUDA preambles (``wp.ModuleBuildOptions``), and
``pool_header()`` the text of ``dp_pool.h``, the native side of the CPU thread pool (`tasks`),
for CPU preambles only; each text is read once per process. The C++ path of the code
generator lives in this package: `nest` (which groups it covers and how they read), `emit`
(element functions), `drivers` (CPU and CUDA drivers), `contraction` (matrix products' CPU
and CUDA drivers), `kernels` (the Warp stubs and kernels around them) and `tasks` (the CPU
thread pool); see ``docs/backend.md``.
"""

from __future__ import annotations

import functools
from importlib import resources

MATH_HEADER = "dp_math.h"
POOL_HEADER = "dp_pool.h"


@functools.cache
def math_header() -> str:
    """The text of ``dp_math.h``."""
    return resources.files(__name__).joinpath(MATH_HEADER).read_text(encoding="utf-8")


@functools.cache
def pool_header() -> str:
    """The text of ``dp_pool.h``."""
    return resources.files(__name__).joinpath(POOL_HEADER).read_text(encoding="utf-8")

"""`dpt_ir.backends.warp.flags.cpu_flags`: generated modules build with ``-march=native`` where
``wp.config.cpu_compiler_flags`` is Warp's default (or None), keep a user's own flags, and add
``-mprefer-vector-width=512`` to a module with a matrix product; a generated module names them."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
import warp as wp

import dpt_ir as dp
from dpt_ir.backends.warp.flags import WARP_DEFAULT, cpu_flags


@pytest.fixture
def flags() -> Iterator[None]:
    """Restores ``wp.config.cpu_compiler_flags`` after the test."""
    before = wp.config.cpu_compiler_flags
    yield
    wp.config.cpu_compiler_flags = before


def test_warps_default_becomes_march_native(flags: None) -> None:
    for setting in (WARP_DEFAULT, None):
        wp.config.cpu_compiler_flags = setting
        assert cpu_flags() == "-march=native"
        assert cpu_flags(wide=True) == "-march=native -mprefer-vector-width=512"


def test_a_users_flags_are_kept(flags: None) -> None:
    wp.config.cpu_compiler_flags = "-march=x86-64-v3 -fno-slp-vectorize"
    assert cpu_flags() == "-march=x86-64-v3 -fno-slp-vectorize"
    assert cpu_flags(wide=True) == "-march=x86-64-v3 -fno-slp-vectorize -mprefer-vector-width=512"


def test_warps_shipped_default_is_the_one_replaced() -> None:
    """Every flag of `WARP_DEFAULT` is in the installed Warp's ``config.py``: a Warp that ships
    other defaults would not match, and its modules would keep Warp's own flags unnoticed."""
    from pathlib import Path

    import warp.config

    source = Path(warp.config.__file__).read_text()
    assert all(flag in source for flag in WARP_DEFAULT.split()), WARP_DEFAULT


def test_generated_modules_name_the_flags() -> None:
    g = dp.GraphBuilder("flags")
    a = g.input("a", (4, 4), "float32")
    g.output("p", a @ a)
    g.output("e", dp.exp(a))
    text = "".join(m.text for m in dp.compile(g.build(), device="cpu").modules.values())
    assert '"cpu_compiler_flags": cpu_flags(True)' in text

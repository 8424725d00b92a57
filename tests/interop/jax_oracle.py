"""What the tests of `dpt_ir.jax` share: float64 JAX for each of their tests (``x64``, an
autouse fixture once a test module imports it) and the pair graph written in jax.numpy,
their oracle. Importing this module skips the importing test module where the ``jax`` extra
is absent (`tests.interop.conftest.require`)."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests.interop.conftest import require

require("dpt_ir.jax")
import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402


@pytest.fixture(autouse=True)
def x64() -> Iterator[None]:
    """float64 for these tests only (the flag is process-global otherwise)."""
    with jax.enable_x64(True):
        yield


def pair_reference(a: jax.Array, b: jax.Array, w: jax.Array) -> tuple[jax.Array, jax.Array]:
    """The pair graph written in jax.numpy: the oracle."""
    return jnp.sum(w * jnp.exp(a) * b) + jnp.sum(a * a), a * jnp.sin(b)

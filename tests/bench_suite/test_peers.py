"""The benchmark peers (`benchmarks.peers_numpy`, `peers_torch`, `peers_jax`) compute the
same loss and gradient as the NumPy reference interpreter, for every case of
`benchmarks.cases.CASES`.

The shape is small and non-square, so a transposed axis shows. The imaging case runs
twice: with its generated data (a few dead pixels whose counts are NaN) and with some
valid counts forced to zero, the two lanes the Poisson deviance's double ``where``
exists for. Both losses are float32 computations in a different order, so the tolerances
are float32 ones: over 30 draws of the inputs the errors stayed below 8e-7 (loss,
relative) and 1.4e-6 (gradient, relative to its largest entry); the bounds leave a
factor of about seven.

(No ``__init__.py`` in this folder: as a package it would be named ``benchmarks`` and
shadow the repository's ``benchmarks`` package.)
"""

from __future__ import annotations

import functools
from types import ModuleType
from typing import Any

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks import peers_numpy
from benchmarks.cases import CASES, symmetric_index

SHAPE = (24, 20)
LOSS_RTOL = 5e-6
GRAD_RTOL = 1e-5  # max |grad - reference| <= GRAD_RTOL * max |reference|

# (case name, valid counts forced to zero); the second imaging variant exercises counts == 0.
VARIANTS = [(name, False) for name in CASES] + [("imaging", True)]
IDS = [name + ("-zero-counts" if zeros else "") for name, zeros in VARIANTS]


def _inputs(name: str, zero_counts: bool) -> dict[str, np.ndarray]:
    inputs = CASES[name].inputs(SHAPE, np.random.default_rng(7))
    if name == "imaging":
        mask = inputs["mask"]
        assert (mask == 0).any() and np.isnan(inputs["counts"][mask == 0]).all(), "no dead pixel to test"
        if zero_counts:
            zeros = (mask != 0) & (np.arange(mask.size).reshape(SHAPE) % 5 == 0)
            inputs["counts"][zeros] = 0.0
    return inputs


@functools.cache
def _reference(name: str, zero_counts: bool) -> tuple[float, np.ndarray]:
    case = CASES[name]
    graph = case.build(SHAPE)
    inputs = _inputs(name, zero_counts)
    loss = float(dp.interpret(graph, **inputs)["loss"])
    grad = dp.interpret_grad(graph, [case.wrt], **inputs)[case.wrt]
    assert np.isfinite(loss) and np.all(np.isfinite(grad)) and np.abs(grad).max() > 0
    return loss, grad


def _check(name: str, zero_counts: bool, loss: Any, grad: Any) -> None:
    ref_loss, ref_grad = _reference(name, zero_counts)
    loss = float(loss)
    grad = np.asarray(grad)
    assert grad.shape == ref_grad.shape and grad.dtype == np.float32
    assert np.all(np.isfinite(grad)), "non-finite gradient"
    assert abs(loss - ref_loss) <= LOSS_RTOL * abs(ref_loss), (loss, ref_loss)
    err = np.abs(grad - ref_grad).max()
    assert err <= GRAD_RTOL * np.abs(ref_grad).max(), (err, np.abs(ref_grad).max())


@pytest.fixture(scope="module")
def torch_peers() -> ModuleType:
    pytest.importorskip("torch")
    from benchmarks import peers_torch

    return peers_torch


@pytest.fixture(scope="module")
def jax_peers() -> ModuleType:
    pytest.importorskip("jax")
    from benchmarks import peers_jax

    return peers_jax


def test_numpy_peer_has_every_case() -> None:
    assert set(peers_numpy.VALUE_AND_GRAD) == set(CASES)


def test_torch_peer_has_every_case(torch_peers: ModuleType) -> None:
    assert set(torch_peers.LOSSES) == set(CASES)


def test_jax_peer_has_every_case(jax_peers: ModuleType) -> None:
    assert set(jax_peers.LOSSES) == set(CASES)


@pytest.mark.parametrize(("name", "zero_counts"), VARIANTS, ids=IDS)
def test_numpy_matches_interpreter(name: str, zero_counts: bool) -> None:
    inputs = _inputs(name, zero_counts)
    loss, grad = peers_numpy.VALUE_AND_GRAD[name](**inputs)
    assert isinstance(loss, float)
    _check(name, zero_counts, loss, grad)


@pytest.mark.parametrize(("name", "zero_counts"), VARIANTS, ids=IDS)
def test_torch_matches_interpreter(torch_peers: ModuleType, name: str, zero_counts: bool) -> None:
    run = torch_peers.make_value_and_grad(name, _inputs(name, zero_counts), CASES[name].wrt)
    loss, grad = run()
    assert loss.ndim == 0 and not loss.requires_grad and not grad.requires_grad
    _check(name, zero_counts, loss.item(), grad.numpy())


def test_torch_compiled_matches_interpreter(torch_peers: ModuleType) -> None:
    """Only beer: an Inductor compile takes seconds. Forward and backward must be one
    graph (no break at ``autograd.grad``), and a second call must not recompile."""
    import torch._dynamo.utils

    stats = torch._dynamo.utils.counters["stats"]
    before = stats["unique_graphs"]
    run = torch_peers.make_value_and_grad("beer", _inputs("beer", False), "x", compiled=True)
    for _ in range(2):
        loss, grad = run()
        _check("beer", False, loss.item(), grad.numpy())
    assert stats["unique_graphs"] - before == 1


def test_torch_reflect_index_is_symmetric_index(torch_peers: ModuleType) -> None:
    import torch

    for n in (1, 2, 5, 13):
        for radius in range(n + 1):
            got = torch_peers.reflect_index(n, radius, torch.device("cpu")).numpy()
            np.testing.assert_array_equal(got, symmetric_index(n, radius))


@pytest.mark.parametrize(("name", "zero_counts"), VARIANTS, ids=IDS)
def test_jax_matches_interpreter(jax_peers: ModuleType, name: str, zero_counts: bool) -> None:
    run = jax_peers.make_value_and_grad(name, _inputs(name, zero_counts), CASES[name].wrt)
    loss, grad = run()
    assert loss.shape == ()
    _check(name, zero_counts, loss, grad)


def _check_versions(peer: ModuleType, key: str) -> None:
    v = peer.versions()
    assert key in v and all(isinstance(k, str) and isinstance(s, str) for k, s in v.items())


def test_versions_numpy() -> None:
    _check_versions(peers_numpy, "numpy")


def test_versions_torch(torch_peers: ModuleType) -> None:
    _check_versions(torch_peers, "torch")


def test_versions_jax(jax_peers: ModuleType) -> None:
    _check_versions(jax_peers, "jax")

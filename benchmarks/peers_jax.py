"""The JAX peer of the benchmark cases: forward in ``jax.numpy``, gradient by
``jax.value_and_grad``, compiled by ``jax.jit`` (XLA).

`LOSSES` maps each case name of `benchmarks.cases.CASES` to a forward function taking
the case's inputs as keyword arrays (float32; the imaging mask bool or uint8) and
returning the 0-d loss, with the same math as the case's `dp.Graph`.
`make_value_and_grad` turns a case and its NumPy inputs into a zero-argument callable.
Nothing here sets environment variables: a caller that wants to fix XLA's CPU threads
sets ``XLA_FLAGS`` before importing this module. float32 throughout (JAX's default).
"""

from __future__ import annotations

from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np

from benchmarks.case_data import IMAGING_I0, IMAGING_SIGMA, gaussian_weights

Loss = Callable[..., jax.Array]


def beer(x: jax.Array, obs: jax.Array, w: jax.Array) -> jax.Array:
    """``sum(w * (1.3 exp(-0.7 x) - obs)**2)``."""
    return jnp.sum(w * jnp.square(1.3 * jnp.exp(-0.7 * x) - obs))


def chain16(x: jax.Array) -> jax.Array:
    """The 16 elementwise ops of `benchmarks.graphs.chain16`, then a sum."""
    y = jnp.sin(x)
    y = y * 0.5
    y = y + 1.25
    y = jnp.log(y)
    y = jnp.exp(y)
    y = jnp.sqrt(y)
    y = jnp.tanh(y)
    y = jax.nn.sigmoid(y)
    y = jnp.square(y)
    y = y - 0.25
    y = jnp.cos(y)
    y = jax.nn.softplus(y)
    y = jnp.reciprocal(y)
    y = jax.scipy.special.erf(y)
    y = -y
    y = jnp.expm1(y)
    return jnp.sum(y)


def softmax_xent(z: jax.Array, t: jax.Array) -> jax.Array:
    """``mean_rows(logsumexp(z) - sum(z t))``."""
    return jnp.mean(jax.nn.logsumexp(z, axis=1) - jnp.sum(z * t, axis=1))


def normalisation(x: jax.Array, w: jax.Array) -> jax.Array:
    """``sum(w * (c / sqrt(mean(c**2) + 1e-5))**2)`` with ``c = x - mean(x)`` over rows."""
    centred = x - jnp.mean(x, axis=1, keepdims=True)
    scale = jnp.sqrt(jnp.mean(jnp.square(centred), axis=1, keepdims=True) + 1e-5)
    return jnp.sum(w * jnp.square(centred / scale))


TAPS: tuple[float, ...] = tuple(float(v) for v in gaussian_weights(IMAGING_SIGMA))


def _correlate_valid(padded: jax.Array, taps: tuple[float, ...], axis: int) -> jax.Array:
    """The valid part of the correlation of ``padded`` with ``taps`` along ``axis``: a
    weighted sum of ``len(taps)`` shifted slices (XLA fuses them into one loop)."""
    n = padded.shape[axis] - len(taps) + 1
    out = None
    for k, tap in enumerate(taps):
        term = tap * jax.lax.slice_in_dim(padded, k, k + n, axis=axis)
        out = term if out is None else out + term
    return out


def gaussian_reflect(x: jax.Array, taps: tuple[float, ...] = TAPS) -> jax.Array:
    """``scipy.ndimage.gaussian_filter(x, sigma, mode="reflect")`` of a 2-D array, given
    the 1-D ``taps`` of the Gaussian (default: `gaussian_weights` of the imaging sigma).

    scipy's ``reflect`` is NumPy's ``symmetric`` pad (edge sample repeated); each axis is
    padded by the radius and correlated with the taps, axis 0 first as dpt_ir and scipy
    do. Correlation, not convolution, though the symmetric taps make them equal.
    """
    radius = len(taps) // 2
    out = x
    for axis in range(2):
        pad = [(0, 0), (0, 0)]
        pad[axis] = (radius, radius)
        out = _correlate_valid(jnp.pad(out, pad, mode="symmetric"), taps, axis)
    return out


def poisson_deviance(mean: jax.Array, counts: jax.Array, weights: jax.Array, mask: jax.Array) -> jax.Array:
    """``dp.poisson_deviance(..., reduction="mean")``: the weighted Poisson half deviance
    over the lanes where ``mask`` is set, divided by the total pixel count.

    The "double where": masked lanes get ``mean = 1, counts = 0`` and zero-count lanes a
    ratio of 1 before the logarithm, so neither the value nor the gradient of a lane
    whose branch is not taken can be NaN (masked counts are NaN).
    """
    valid = mask != 0
    m = jnp.where(valid, mean, 1.0)
    c = jnp.where(valid, counts, 0.0)
    positive = c > 0
    ratio = jnp.where(positive, c, 1.0) / jnp.where(positive, m, 1.0)
    term = m - c + jnp.where(positive, c * jnp.log(ratio), 0.0)
    return jnp.sum(jnp.where(valid, weights * term, 0.0)) / float(mean.size)


def imaging(mu: jax.Array, counts: jax.Array, weights: jax.Array, mask: jax.Array) -> jax.Array:
    """The transmission pipeline: ``I0 exp(-mu)``, reflect Gaussian blur, masked mean
    Poisson deviance."""
    expected = gaussian_reflect(IMAGING_I0 * jnp.exp(-mu))
    return poisson_deviance(expected, counts, weights, mask)


LOSSES: dict[str, Loss] = {
    "beer": beer,
    "chain16": chain16,
    "softmax_xent": softmax_xent,
    "normalisation": normalisation,
    "imaging": imaging,
}


def make_value_and_grad(
    name: str, inputs: dict[str, np.ndarray], wrt: str
) -> Callable[[], tuple[jax.Array, jax.Array]]:
    """A callable running case ``name`` forward + backward once: ``(loss, grad)``, ``grad``
    the gradient of the loss wrt input ``wrt``, both ready (``block_until_ready``).

    ``jax.jit(jax.value_and_grad(...))`` of the loss as a function of ``wrt`` and, as
    further arguments, the other inputs: they are traced arguments, not closed-over
    constants, so XLA cannot constant-fold them. The device arrays are made once
    (``jax.device_put``; ``mask`` as bool). The first call compiles.
    """
    loss_fn = LOSSES[name]
    arrays = {k: jax.device_put(np.asarray(v != 0) if k == "mask" else np.asarray(v)) for k, v in inputs.items()}
    x = arrays.pop(wrt)

    def loss_of_wrt(value: jax.Array, others: dict[str, jax.Array]) -> jax.Array:
        return loss_fn(**{wrt: value}, **others)

    fn = jax.jit(jax.value_and_grad(loss_of_wrt))

    def run() -> tuple[jax.Array, jax.Array]:
        loss, grad = fn(x, arrays)
        return loss.block_until_ready(), grad.block_until_ready()

    return run


def versions() -> dict[str, str]:
    """The library versions and the backend this peer runs on."""
    import jaxlib

    return {"jax": jax.__version__, "jaxlib": jaxlib.__version__, "backend": jax.default_backend()}

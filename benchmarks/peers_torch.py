"""The PyTorch peer of the benchmark cases: forward in torch, gradient by autograd.

`LOSSES` maps each case name of `benchmarks.cases.CASES` to a forward function taking
the case's inputs as keyword torch tensors (float32; the imaging mask bool or uint8) and
returning the 0-d loss tensor, with the same math as the case's `dp.Graph`.
`make_value_and_grad` turns a case and its NumPy inputs into a zero-argument callable
that runs forward + backward once, eagerly or under ``torch.compile``.
"""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import torch
import torch.nn.functional as tf

from benchmarks.case_data import IMAGING_I0, IMAGING_SIGMA, gaussian_weights

Loss = Callable[..., torch.Tensor]


def beer(x: torch.Tensor, obs: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``sum(w * (1.3 exp(-0.7 x) - obs)**2)``."""
    return torch.sum(w * torch.square(1.3 * torch.exp(-0.7 * x) - obs))


def chain16(x: torch.Tensor) -> torch.Tensor:
    """The 16 elementwise ops of `benchmarks.graphs.chain16`, then a sum."""
    y = torch.sin(x)
    y = y * 0.5
    y = y + 1.25
    y = torch.log(y)
    y = torch.exp(y)
    y = torch.sqrt(y)
    y = torch.tanh(y)
    y = torch.sigmoid(y)
    y = torch.square(y)
    y = y - 0.25
    y = torch.cos(y)
    y = tf.softplus(y)  # linear above its threshold 20; here y is in [-1, 1]
    y = torch.reciprocal(y)
    y = torch.erf(y)
    y = -y
    y = torch.expm1(y)
    return torch.sum(y)


def softmax_xent(z: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
    """``mean_rows(logsumexp(z) - sum(z t))``."""
    return torch.mean(torch.logsumexp(z, dim=1) - torch.sum(z * t, dim=1))


def normalisation(x: torch.Tensor, w: torch.Tensor) -> torch.Tensor:
    """``sum(w * (c / sqrt(mean(c**2) + 1e-5))**2)`` with ``c = x - mean(x)`` over rows."""
    centred = x - torch.mean(x, dim=1, keepdim=True)
    scale = torch.sqrt(torch.mean(torch.square(centred), dim=1, keepdim=True) + 1e-5)
    return torch.sum(w * torch.square(centred / scale))


TAPS: tuple[float, ...] = tuple(float(v) for v in gaussian_weights(IMAGING_SIGMA))


def reflect_index(n: int, radius: int, device: torch.device) -> torch.Tensor:
    """`benchmarks.case_data.symmetric_index` built from torch ops: the indices of scipy's
    ``reflect`` extension (edge sample repeated) of an axis of length ``n`` by ``radius``
    on each side, for ``radius <= n``. Torch ops rather than ``np.pad`` so that
    ``torch.compile`` traces it into the graph (Dynamo cannot trace ``np.pad``)."""
    i = torch.arange(-radius, n + radius, device=device)
    return torch.where(i < 0, -1 - i, torch.where(i >= n, 2 * n - 1 - i, i))


def gaussian_reflect(x: torch.Tensor, taps: tuple[float, ...] = TAPS) -> torch.Tensor:
    """``scipy.ndimage.gaussian_filter(x, sigma, mode="reflect")`` of a 2-D tensor, given
    the 1-D ``taps`` of the Gaussian (default: `gaussian_weights` of the imaging sigma).

    The ``reflect`` extension (NumPy's ``symmetric`` pad) is an ``index_select`` per axis
    with `reflect_index`; each axis (axis 0 first, as dpt_ir and scipy do) is then
    correlated with the taps as a weighted sum of shifted slices. Not ``conv2d``: with one
    channel on the CPU it takes a slow fallback path (about 2x slower for this blur's
    forward + backward at 1024x1024), and the peer should be the fastest plain code.
    Correlation, not convolution, though the symmetric taps make them equal.
    """
    radius = len(taps) // 2
    out = x
    for axis in range(2):
        n = out.shape[axis]
        padded = out.index_select(axis, reflect_index(n, radius, x.device))
        out = sum(tap * padded.narrow(axis, k, n) for k, tap in enumerate(taps))
    return out


def poisson_deviance(
    mean: torch.Tensor, counts: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor
) -> torch.Tensor:
    """``dp.poisson_deviance(..., reduction="mean")``: the weighted Poisson half deviance
    over the lanes where ``mask`` is set, divided by the total pixel count.

    The "double where": masked lanes get ``mean = 1, counts = 0`` and zero-count lanes a
    ratio of 1 before the logarithm, so neither the value nor the gradient of a lane
    whose branch is not taken can be NaN (masked counts are NaN).
    """
    valid = mask != 0
    m = torch.where(valid, mean, 1.0)
    c = torch.where(valid, counts, 0.0)
    positive = c > 0
    ratio = torch.where(positive, c, 1.0) / torch.where(positive, m, 1.0)
    term = m - c + torch.where(positive, c * torch.log(ratio), 0.0)
    return torch.sum(torch.where(valid, weights * term, 0.0)) / float(mean.numel())


def imaging(mu: torch.Tensor, counts: torch.Tensor, weights: torch.Tensor, mask: torch.Tensor) -> torch.Tensor:
    """The transmission pipeline: ``I0 exp(-mu)``, reflect Gaussian blur, masked mean
    Poisson deviance."""
    expected = gaussian_reflect(IMAGING_I0 * torch.exp(-mu))
    return poisson_deviance(expected, counts, weights, mask)


LOSSES: dict[str, Loss] = {
    "beer": beer,
    "chain16": chain16,
    "softmax_xent": softmax_xent,
    "normalisation": normalisation,
    "imaging": imaging,
}


def _tensor(name: str, value: np.ndarray, device: str) -> torch.Tensor:
    if name == "mask":
        return torch.from_numpy(np.ascontiguousarray(value != 0)).to(device)
    return torch.from_numpy(np.ascontiguousarray(value)).to(device)


def _compile(fn: Callable[..., tuple[torch.Tensor, torch.Tensor]]) -> Callable[..., tuple[torch.Tensor, torch.Tensor]]:
    """``torch.compile`` of a value-and-grad function, forward and backward in one graph.

    By default TorchDynamo breaks the graph at ``torch.autograd.grad``; with its config
    flag ``trace_autograd_ops`` (there in torch 2.13) it traces the call, and Inductor
    compiles forward and backward as one graph. The flag is read when Dynamo traces, so
    it is patched around the first call (the compile) only, never set globally: a patch
    costs some 30 us a call. ``fullgraph=True`` turns any later retrace, which would run
    without the flag, into an error instead of a silently different program. Without the
    flag (other torch versions): the plain compile, which compiles the forward with its
    AOTAutograd backward and runs ``autograd.grad`` eagerly between the graphs.
    """
    import torch._dynamo

    config = torch._dynamo.config
    if not hasattr(config, "trace_autograd_ops"):
        return torch.compile(fn)
    compiled = torch.compile(fn, fullgraph=True)
    traced = False

    def call(**kw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        nonlocal traced
        if traced:
            return compiled(**kw)
        with config.patch(trace_autograd_ops=True):
            out = compiled(**kw)
        traced = True
        return out

    return call


def make_value_and_grad(
    name: str, inputs: dict[str, np.ndarray], wrt: str, compiled: bool = False, device: str = "cpu"
) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
    """A callable running case ``name`` forward + backward once: ``(loss, grad)``, both
    detached, ``grad`` the gradient of the loss wrt input ``wrt``.

    The inputs are converted once (``torch.from_numpy``, moved to ``device``; ``mask`` to
    bool); ``wrt`` becomes a leaf requiring grad, and each call differentiates with
    ``torch.autograd.grad`` (nothing accumulates in ``.grad``). On a CUDA device the call
    synchronises before returning, so it can be timed from the host.

    ``compiled=True`` wraps the whole value-and-grad function (forward, then
    ``autograd.grad``) in ``torch.compile``; see `_compile`. In torch 2.13 Dynamo traces
    ``autograd.grad`` when asked to, so forward and backward compile into one graph
    (checked for every case against eager and `dp.interpret_grad`), and the steady-state
    call is the compiled graph alone. The first call compiles: 5-20 s per case on a
    2-core CPU with a cold Inductor cache, well under that with a warm one.
    """
    loss_fn = LOSSES[name]
    tensors = {k: _tensor(k, v, device) for k, v in inputs.items()}
    tensors[wrt] = tensors[wrt].detach().requires_grad_(True)

    def value_and_grad(**kw: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        loss = loss_fn(**kw)
        (grad,) = torch.autograd.grad(loss, kw[wrt])
        return loss.detach(), grad.detach()

    fn = _compile(value_and_grad) if compiled else value_and_grad
    cuda = torch.device(device).type == "cuda"

    def run() -> tuple[torch.Tensor, torch.Tensor]:
        loss, grad = fn(**tensors)
        if cuda:
            torch.cuda.synchronize(device)
        return loss, grad

    return run


def versions() -> dict[str, str]:
    """The library versions (and CPU thread count) this peer runs with."""
    out = {"torch": torch.__version__, "threads": str(torch.get_num_threads())}
    if torch.cuda.is_available():
        out["cuda"] = str(torch.version.cuda)
    return out


"""Data-parallel training of a model whose loss is a dpt_ir program, under torch.distributed.

Model: an attenuation image ``theta`` (a torch parameter) seen through Beer-Lambert,
``i0 * exp(-theta)``, fitted to a batch of noisy exposures by the mean squared error.
Each rank compiles the program for its shard of the batch, evaluates its shard, and
``DistributedDataParallel`` all-reduces (averages) the gradients; since the shards are
equal, the average of the shard means is the full-batch mean, so the run equals a
single process on the full batch (to rounding). Backend: gloo on the CPU (loopback).
On GPUs the same code runs with ``init_process_group("nccl")``, each rank's program
compiled on ``cuda:<rank>`` and its shard moved there (not in this example: untested).

    python examples/data_parallel.py --world-size 2 --steps 20 [--out theta.npy]

``--world-size 1`` runs the same training in this process, without torch.distributed.
"""

from __future__ import annotations

import argparse
import os
import socket

import numpy as np

import dpt_ir as dp

try:
    import dpt_ir.torch as dpt  # first: without PyTorch its ImportError names the extra to install
except ImportError as exc:
    raise SystemExit(f"error: {exc}") from None
import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.nn.parallel import DistributedDataParallel

SHAPE = (8, 8)
BATCH = 8
I0 = 2.0
LEARNING_RATE = 0.5


def build(batch: int) -> dp.Graph:
    """The loss of one shard: ``mean((i0 exp(-theta) - obs)^2)`` over ``batch`` exposures."""
    g = dp.GraphBuilder(f"data_parallel_b{batch}")
    theta = g.input("theta", SHAPE, dtype="float64")
    obs = g.input("obs", (batch, *SHAPE), dtype="float64", requires_grad=False)
    g.output("loss", dp.mean(dp.square(I0 * dp.exp(-theta) - obs)))
    return g.build()


def exposures() -> np.ndarray:
    """The full batch: noisy exposures of a disc phantom (the same on every rank)."""
    rng = np.random.default_rng(0)
    y, x = np.mgrid[-1 : 1 : SHAPE[0] * 1j, -1 : 1 : SHAPE[1] * 1j]
    truth = 0.8 * (x * x + y * y < 0.5)
    return I0 * np.exp(-truth) + 0.05 * rng.standard_normal((BATCH, *SHAPE))


class Attenuation(torch.nn.Module):
    """``theta`` as a parameter; the forward is the dpt_ir program."""

    def __init__(self, program: dp.Program) -> None:
        super().__init__()
        self.loss = dpt.function(program)
        self.theta = torch.nn.Parameter(torch.zeros(SHAPE, dtype=torch.float64))

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.loss(self.theta, obs)


def train(rank: int, world: int, steps: int, verbose: bool = False) -> np.ndarray:
    """SGD on this rank's shard; under a process group the gradients are all-reduced."""
    full = exposures()
    n = BATCH // world
    shard = torch.from_numpy(full[rank * n : (rank + 1) * n].copy())
    model: torch.nn.Module = Attenuation(dp.compile(build(n), wrt=["theta"], device="cpu"))
    if world > 1:
        model = DistributedDataParallel(model)
    opt = torch.optim.SGD(model.parameters(), lr=LEARNING_RATE)
    for step in range(steps):
        opt.zero_grad()
        loss = model(shard)
        loss.backward()
        opt.step()
        if verbose and rank == 0:
            print(f"step {step:3d}  shard loss {loss.item():.6f}")
    return next(model.parameters()).detach().numpy().copy()


def _worker(rank: int, world: int, steps: int, port: int, out: str | None) -> None:
    torch.set_num_threads(1)  # ranks share the machine's cores
    os.environ["MASTER_ADDR"] = "127.0.0.1"  # loopback only
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=world)
    try:
        theta = train(rank, world, steps, verbose=True)
        if rank == 0 and out:
            np.save(out, theta)
    finally:
        dist.destroy_process_group()


def free_port() -> int:
    """A TCP port free on the loopback interface."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--world-size", type=int, default=2)
    parser.add_argument("--steps", type=int, default=20)
    parser.add_argument("--out", default=None, help="save the final theta (.npy) from rank 0")
    args = parser.parse_args()
    if BATCH % args.world_size:
        parser.error(f"--world-size must divide the batch ({BATCH})")
    if args.world_size == 1:
        theta = train(0, 1, args.steps, verbose=True)
        if args.out:
            np.save(args.out, theta)
        return
    mp.spawn(_worker, args=(args.world_size, args.steps, free_port(), args.out), nprocs=args.world_size, join=True)


if __name__ == "__main__":
    main()

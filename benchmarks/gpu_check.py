"""Run CUDA bundles (``dpt-ir export-cuda``) with NumPy and CuPy alone: no dpt_ir, no warp-lang.

``python benchmarks/gpu_check.py DIR... [--dry] [--peers] [--rounds N]``. For each bundle:
validate ``plan.json`` against ``ref.npz`` (a bad bundle is one ``error:`` line naming the
file and field, exit 2), build ``kernels.cu``, allocate each plan's buffer table, run its
stages in order (`benchmarks.gpu_replay.Replay`: segments, and loops step by step), read the
status word after each stage as ``dpt_ir.runtime.program`` does, compare results with ``ref.npz``
(exit 1 on a mismatch), and time the plan (median of rounds) with the bytes it moves per
second.

- GPU (default): CuPy's ``RawModule`` (NVRTC) builds the ``k_*`` kernels; CUDA events time
  them; the bandwidth is compared with the device's HBM peak.
- ``--dry``: the system C++ compiler builds the same file twice as a shared library loaded
  with ctypes: the CPU drivers, and (``-DDP_CUDA``) the CUDA drivers as plain C++, each run
  over its plan's tasks; the second proves the CUDA partition and combine on the CPU.
- ``--peers``: also times ``torch.compile`` and ``jax.jit`` of the same case (from
  ``benchmarks/peers_torch.py`` and ``peers_jax.py``) when they import.
See docs/gpu-check.md.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
if str(ROOT) not in sys.path:  # run as a script: the peers and the bundle reader are imported from the repository
    sys.path.insert(0, str(ROOT))

from benchmarks.gpu_bundle_io import BundleError, constants_of, inputs_of, load  # noqa: E402
from benchmarks.gpu_replay import Replay  # noqa: E402

# -- back ends: the same launch sequence on host arrays (ctypes) or CuPy arrays ----------------


class Host:
    """``kernels.cu`` built by the system C++ compiler; ``cuda`` runs the CUDA drivers."""

    def __init__(self, source: str, cuda: bool, tmp: Path) -> None:
        cxx = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
        if cxx is None:
            raise BundleError("kernels.cu: no C++ compiler (c++, g++ or $CXX) for --dry")
        src, lib = tmp / "kernels.cpp", tmp / f"kernels_{'cuda' if cuda else 'cpu'}.so"
        src.write_text(source, encoding="utf-8")
        cmd = [cxx, "-std=c++17", "-O1", "-shared", "-fPIC", "-o", str(lib), str(src), *(["-DDP_CUDA"] if cuda else [])]
        done = subprocess.run(cmd, capture_output=True, text=True, check=False)
        if done.returncode:
            raise BundleError(f"kernels.cu: the host build failed: {done.stderr.strip().splitlines()[:1]}")
        self.lib, self.name = ctypes.CDLL(str(lib)), "cuda drivers on the CPU" if cuda else "CPU drivers"
        self.cuda = cuda

    def upload(self, a: np.ndarray) -> np.ndarray:
        return np.ascontiguousarray(a).reshape(-1).copy()

    def zeros(self, size: int, dtype: str) -> np.ndarray:
        return np.zeros(size, dtype=dtype)

    def host(self, a: np.ndarray) -> np.ndarray:
        return a

    def launch(self, launch: dict[str, Any], arrays: list[np.ndarray], status: np.ndarray | None) -> None:
        ptrs = (ctypes.c_void_p * max(len(arrays), 1))(*[a.ctypes.data for a in arrays])
        st = ctypes.c_void_p(status.ctypes.data if status is not None else None)
        tasks = launch["dim"] if self.cuda else launch["host_tasks"]  # the CUDA threads, or the CPU driver's partition
        getattr(self.lib, f"h_{launch['kernel']}")(ptrs, st, ctypes.c_int(launch["status_base"]), 0, tasks)


class Gpu:
    """``kernels.cu`` built by CuPy's NVRTC; launches on the current device."""

    def __init__(self, source: str) -> None:
        import cupy

        self.cp, self.name = cupy, f"CUDA sm_{cupy.cuda.Device().compute_capability}"
        self.module = cupy.RawModule(code=source, options=("-std=c++17",))

    def upload(self, a: np.ndarray) -> Any:
        return self.cp.asarray(np.ascontiguousarray(a).reshape(-1))

    def zeros(self, size: int, dtype: str) -> Any:
        return self.cp.zeros(size, dtype=dtype)

    def host(self, a: Any) -> np.ndarray:
        return self.cp.asnumpy(a)

    def launch(self, launch: dict[str, Any], arrays: list[Any], status: Any) -> None:
        fn = self.module.get_function(f"k_{launch['kernel']}")
        st = status if status is not None else np.uintp(0)
        args = (*arrays, st, np.int32(launch["status_base"]), np.int32(launch["dim"]))
        fn((max(launch["grid"], 1),), (launch["block"],), args)

    def peak(self) -> float | None:
        """HBM bandwidth in bytes/s from the device attributes (DDR: two transfers a clock);
        None where the runtime no longer reports the memory clock (CUDA 13 dropped it from
        the device properties; the attribute query is tried next)."""
        rt, dev = self.cp.cuda.runtime, self.cp.cuda.Device().id
        props = rt.getDeviceProperties(dev)
        try:
            clock, width = props.get("memoryClockRate") or rt.deviceGetAttribute(36, dev), props["memoryBusWidth"]
        except Exception:  # CUDARuntimeError, KeyError: not reported
            return None
        return 2.0 * clock * 1e3 * width / 8 if clock and width else None


def run_plan(be: Any, plan: dict[str, Any], data: dict[str, np.ndarray]) -> tuple[dict[str, Any], list[int], Any]:
    """Results, the raised status slots, and the `Replay` (``again`` re-runs every launch)."""
    replay = Replay(be, plan, data)
    raised = replay.run()
    results = {r["key"]: be.host(replay.bufs[r["buffer"]]) for r in plan["results"]}
    return results, raised, replay


def compare(plan: dict[str, Any], results: dict[str, np.ndarray], ref: dict[str, np.ndarray], tol: dict) -> list[str]:
    bad = []
    for key, got in results.items():
        want, at = ref[f"{plan['name']}/{key}"], ref.get(f"{plan['name']}/{key}@at")
        got = got.reshape(-1)[at] if at is not None else got.reshape(want.shape)
        finite = np.abs(want[np.isfinite(want)]) if want.dtype.kind == "f" else np.zeros(0)
        atol = tol["atol_rel"] * (float(finite.max()) if finite.size else 0.0)
        ok = (
            np.isclose(got, want, rtol=tol["rtol"], atol=atol, equal_nan=True)
            if want.dtype.kind == "f"
            else got == want
        )
        if not np.all(ok):
            k = int(np.flatnonzero(~np.asarray(ok).reshape(-1))[0])
            bad.append(f"{key}: {int((~ok).sum())}/{ok.size} off, first at {k}: {got.flat[k]!r} != {want.flat[k]!r}")
    return bad


def median_seconds(be: Any, again: Any, rounds: int) -> float:
    again()  # warm-up
    if isinstance(be, Gpu):
        cp, times = be.cp, []
        for _ in range(rounds):
            start, end = cp.cuda.Event(), cp.cuda.Event()
            start.record()
            again()
            end.record()
            end.synchronize()
            times.append(cp.cuda.get_elapsed_time(start, end) / 1e3)
        return statistics.median(times)
    times = []
    for _ in range(rounds):
        t = time.perf_counter()
        again()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def peers(doc: dict[str, Any], data: dict[str, np.ndarray], rounds: int, device: str, folder: str) -> list[str]:
    """Median seconds of torch.compile and jax.jit on the bundle's case, where they import: the
    case its graph is named after, else the one its folder is (imaging's graph is
    ``transmission_pipeline``; `gpu_bundle.sh` names each folder after its case)."""
    grads = [
        r["key"].split("/", 1)[1]
        for p in doc["plans"]
        if p["name"] == "value_and_grad"
        for r in p["results"]
        if r["key"].startswith("gradient/")
    ]
    if not grads:
        return ["peers: the bundle has no value_and_grad plan"]
    lines = []
    for label, make in (("torch.compile", _torch_peer(device)), ("jax.jit", _jax_peer())):
        try:
            fn = make([doc["graph"], folder], data, grads[0])
        except Exception as exc:  # a peer that is not installed or does not know the case
            lines.append(f"peers: {label} unavailable ({type(exc).__name__}: {str(exc).splitlines()[0][:100]})")
            continue
        fn()
        times = []
        for _ in range(rounds):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        lines.append(f"peers: {label} value_and_grad {statistics.median(times) * 1e3:.3f} ms")
    return lines


def _torch_peer(device: str) -> Any:
    def make(names: list[str], data: dict[str, np.ndarray], wrt: str) -> Any:
        from benchmarks import peers_torch

        name = next((n for n in names if n in peers_torch.LOSSES), names[0])
        return peers_torch.make_value_and_grad(name, data, wrt, compiled=True, device=device)

    return make


def _jax_peer() -> Any:
    def make(names: list[str], data: dict[str, np.ndarray], wrt: str) -> Any:
        from benchmarks import peers_jax

        name = next((n for n in names if n in peers_jax.LOSSES), names[0])
        return peers_jax.make_value_and_grad(name, data, wrt)

    return make


def check_bundle(folder: Path, args: argparse.Namespace, tmp: Path) -> int:
    doc, ref, source = load(folder)
    tmp.mkdir(parents=True, exist_ok=True)
    data = inputs_of(doc, ref, folder)
    backends = [Host(source, False, tmp), Host(source, True, tmp)] if args.dry else [Gpu(source)]
    failures = 0
    for be in backends:
        for plan in doc["plans"]:
            given = {**data, **{ct: ref[f"tape/cotangent/{o}"] for o, ct in plan.get("cotangents", {}).items()}}
            given.update(constants_of(plan, ref))
            results, raised, replay = run_plan(be, plan, given)
            what = f"{doc['graph']} {plan['name']} [{be.name}]"
            messages = [doc["status"][k]["message"] for k in raised if k < len(doc["status"])]
            if plan["expect_flags"] or raised:
                ok = bool(raised) == plan["expect_flags"]
                failures += not ok
                print(
                    f"{'ok  ' if ok else 'FAIL'} {what}: status word raised {messages or 'nothing'}"
                    f" (expected {'a flag' if plan['expect_flags'] else 'none'})"
                )
                continue
            bad = compare(plan, results, ref, doc["tolerance"])
            failures += bool(bad)
            launched = replay.launched
            seconds = median_seconds(be, replay.again, args.rounds)
            rate = plan["bytes_moved"] / seconds
            hbm = be.peak() if isinstance(be, Gpu) else None
            peak = f", {rate / hbm:.0%} of HBM ({hbm / 1e9:.0f} GB/s)" if hbm else ""
            print(
                f"{'FAIL' if bad else 'ok  '} {what}: {launched} launches, {seconds * 1e3:.3f} ms, "
                f"{rate / 1e9:.1f} GB/s{peak}{''.join('; ' + b for b in bad)}"
            )
    if args.peers:
        for line in peers(doc, data, args.rounds, "cpu" if args.dry else "cuda", folder.name):
            print(line)
    return failures


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("bundles", nargs="+", metavar="DIR", help="folders written by dpt-ir export-cuda")
    p.add_argument("--dry", action="store_true", help="replay on the CPU with the host build of kernels.cu")
    p.add_argument("--peers", action="store_true", help="also time torch.compile and jax.jit of the case")
    p.add_argument("--rounds", type=int, default=20, help="timing rounds (median)")
    args = p.parse_args(argv)
    failures = 0
    with tempfile.TemporaryDirectory(prefix="gpu_check_") as tmp:
        for k, folder in enumerate(args.bundles):
            try:
                failures += check_bundle(Path(folder), args, Path(tmp) / str(k))
            except BundleError as exc:
                print(f"error: {exc}", file=sys.stderr)
                return 2
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())

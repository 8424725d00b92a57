"""Export of compiled programs as CUDA bundles that run without warp-lang.

A bundle is a folder of three files: ``kernels.cu`` (the math header, each C++ unit's
drivers and ``extern "C"`` entry points for NVRTC and for a host C++ compiler),
``plan.json`` (`dpt_ir.export.bundle.Bundle`: launches, buffer table, status slots) and
``ref.npz`` (inputs and the interpreter's results). ``benchmarks/gpu_check.py`` runs it
with CuPy on a GPU, or replays it on the CPU (``--dry``). See ``docs/gpu-check.md``.
Only plans whose every launch is on the C++ path can be exported (`cuda.cuda_plans`); a
program with loops exports each plan as the stages its runtime runs (`stages`).
"""

from __future__ import annotations

from dpt_ir.export.writer import export_cuda

__all__ = ["export_cuda"]

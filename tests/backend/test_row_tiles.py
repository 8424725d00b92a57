"""The 8 x 8 row tiles of dp_math.h (``dp_rows_to_lanes8``, ``dp_lanes_to_rows8``: the recurrence
kernels' moves between float32 or float64 rows and lane-interleaved work lines,
`dpt_ir.backends.cxx.recurrence`),
built by the system C++ compiler twice: with vector shuffles, and with ``DP_NO_VECTOR_SHUFFLES``
(the fallback for a compiler without them). Both move every value to its place (NumPy's
transpose), round the store as the scalar cast does, and flag exactly the lanes holding a
non-finite value. Skipped without a C++ compiler (c++, g++ or $CXX).
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from pathlib import Path

import numpy as np
import pytest

from dpt_ir.backends.cxx import math_header

CXX = shutil.which(os.environ.get("CXX", "c++")) or shutil.which("g++")
L, J = 16, 5  # work-line lanes (two groups of 8) and the first entry moved
ENTRY = """
extern "C" void to_lanes(const float* x, const int* b, int j, double* w, int L) { dp_rows_to_lanes8(x, b, j, w, L); }
extern "C" void to_rows(const double* w, int L, float* y, const int* b, int i, int* bad) {
    dp_lanes_to_rows8(w, L, y, b, i, bad);
}
extern "C" void to_lanes_d(const double* x, const int* b, int j, double* w, int L) { dp_rows_to_lanes8(x, b, j, w, L); }
extern "C" void to_rows_d(const double* w, int L, double* y, const int* b, int i, int* bad) {
    dp_lanes_to_rows8(w, L, y, b, i, bad);
}
"""
TYPES = {"float32": (ctypes.c_float, "to_lanes", "to_rows"), "float64": (ctypes.c_double, "to_lanes_d", "to_rows_d")}


def _library(tmp: Path, fallback: bool) -> ctypes.CDLL:
    src, lib = tmp / f"tiles{int(fallback)}.cpp", tmp / f"tiles{int(fallback)}.so"
    src.write_text(math_header() + ENTRY, encoding="utf-8")
    flags = ["-DDP_NO_VECTOR_SHUFFLES"] if fallback else []
    cmd = [CXX, "-std=c++17", "-O1", "-shared", "-fPIC", *flags, "-o", str(lib), str(src)]
    subprocess.run(cmd, check=True, capture_output=True, text=True)
    return ctypes.CDLL(str(lib))


def _ptr(a: np.ndarray, ctype: type) -> object:
    return a.ctypes.data_as(ctypes.POINTER(ctype))


@pytest.mark.skipif(CXX is None, reason="no C++ compiler (c++, g++ or $CXX)")
@pytest.mark.parametrize("dtype", list(TYPES))
@pytest.mark.parametrize("fallback", [False, True], ids=["shuffles", "fallback"])
def test_row_tiles_move_round_and_flag(tmp_path: Path, fallback: bool, dtype: str) -> None:
    lib = _library(tmp_path, fallback)
    ctype, to_lanes, to_rows = TYPES[dtype]
    rng = np.random.default_rng(8)
    x = rng.normal(size=(8, 20)).astype(dtype)  # 8 rows of 20
    b = (np.arange(8, dtype=np.int32)[::-1] * 20).copy()  # row r of the tile is x's row 7 - r
    w = np.zeros((8, L), np.float64)
    getattr(lib, to_lanes)(_ptr(x, ctype), _ptr(b, ctypes.c_int), J, _ptr(w, ctypes.c_double), L)
    np.testing.assert_array_equal(w[:, :8], x[::-1, J : J + 8].T.astype(np.float64))
    assert not w[:, 8:].any(), "only the tile's 8 lanes are written"

    v = rng.normal(size=(8, L)) * 1e3  # doubles that float32 rounds
    v[3, 2], v[6, 5] = np.inf, np.nan  # entry 3 of lane 2, entry 6 of lane 5
    y = np.zeros((8, 20), dtype)
    bad = np.zeros(8, np.int32)
    out = (_ptr(y, ctype), _ptr(b, ctypes.c_int), J, _ptr(bad, ctypes.c_int))
    getattr(lib, to_rows)(_ptr(v, ctypes.c_double), L, *out)
    np.testing.assert_array_equal(y[::-1, J : J + 8], v[:, :8].T.astype(dtype))
    assert not y[:, :J].any() and not y[:, J + 8 :].any(), "only the tile's entries are written"
    np.testing.assert_array_equal(bad, [0, 0, 1, 0, 0, 1, 0, 0])

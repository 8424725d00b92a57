"""Warp's precompiled headers kept across processes (`dpt_ir.backends.warp.headers`): the rules
on a stand-in for Warp's folder, then real builds in fresh processes (a new process builds with
the stored headers, and the object code is byte-identical to a build without them)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from dpt_ir.backends.warp import headers

BUILD = r"""
import json, sys
import numpy as np
import dpt_ir as dp
from dpt_ir.backends.warp import headers
folders = []
for n in [int(a) for a in sys.argv[1:]]:
    g = dp.GraphBuilder(f"pch_probe_{n}")
    x = g.input("x", (n,))
    g.output("loss", dp.sum(dp.square(dp.sin(x))))
    program = dp.compile(g.build(), wrt=["x"], threads=1)
    program.value_and_grad(x=np.zeros(n, np.float32))
    folder = headers._warp_pch_dir()
    folders.append(sorted(p.name for p in __import__("pathlib").Path(folder).glob("*.pch")))
print(json.dumps(folders))
"""


@pytest.fixture
def stand_in(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> tuple[Path, Path]:
    """A process folder Warp would give, a store, and a fresh process (nothing compiled yet)."""
    process, store = tmp_path / "process", tmp_path / "store"
    process.mkdir()
    monkeypatch.setattr(headers, "_warp_pch_dir", lambda: str(process))
    monkeypatch.setattr(headers, "_compiled", False)
    monkeypatch.setattr(headers, "_runtime", lambda: object())  # `_install` sees it installed
    monkeypatch.setattr(headers, "header_key", lambda: "key")
    return process, store


def test_a_first_build_with_nothing_stored_takes_no_header_then_the_next_makes_one(stand_in) -> None:
    process, store = stand_in
    with headers.precompiled_headers(store):
        assert headers._pch_dir() is None  # one build without a PCH: 1.05 s, not 1.66
    assert not (store / "key").exists()
    with headers.precompiled_headers(store):
        assert headers._pch_dir() == str(process)
        (process / "builtin_a.pch").write_bytes(b"made by this build")
    assert (store / "key" / "builtin_a.pch").read_bytes() == b"made by this build"
    assert [p.name for p in (store / "key").iterdir()] == ["builtin_a.pch"]  # no temporary file left


def test_stored_headers_are_copied_in_and_outside_a_block_warp_decides(stand_in) -> None:
    process, store = stand_in
    (store / "key").mkdir(parents=True)
    (store / "key" / "builtin_a.pch").write_bytes(b"stored")
    assert headers._pch_dir() == str(process) and not any(process.iterdir())  # not in a block: Warp's own
    with headers.precompiled_headers(store):
        assert headers._pch_dir() == str(process)  # the first build too: a stored one is there
        assert (process / "builtin_a.pch").read_bytes() == b"stored"


def test_copied_headers_are_deleted_when_the_build_fails(stand_in) -> None:
    process, store = stand_in
    (store / "key").mkdir(parents=True)
    (store / "key" / "builtin_a.pch").write_bytes(b"from another compiler")
    with pytest.raises(RuntimeError, match="clang"), headers.precompiled_headers(store):
        headers._pch_dir()
        raise RuntimeError("clang rejected the PCH")
    assert not (process / "builtin_a.pch").exists()
    assert not (store / "key" / "builtin_a.pch").exists()  # the caller's retry builds without it


def test_the_key_names_the_headers_and_the_cpu() -> None:
    key = headers.header_key()
    assert len(key) == 20 and key == headers.header_key()
    assert headers._cpu_identity()  # model and flags where /proc/cpuinfo exists


def _build(warp_cache: Path, cache: Path, sizes: list[int]) -> list[list[str]]:
    env = {**os.environ, "WARP_CACHE_PATH": str(warp_cache), "DPT_IR_CACHE": str(cache)}
    proc = subprocess.run(
        [sys.executable, "-c", BUILD, *map(str, sizes)], env=env, capture_output=True, text=True, timeout=300
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def _objects(warp_cache: Path) -> dict[str, bytes]:
    """Warp's object files in ``warp_cache``, by path (a module's name is its content's hash)."""
    return {p.relative_to(warp_cache).as_posix(): p.read_bytes() for p in warp_cache.rglob("wp_*/*.o")}


def test_a_new_process_builds_with_the_stored_headers_and_the_same_object_code(tmp_path: Path) -> None:
    first, second = tmp_path / "warp1", tmp_path / "warp2"
    # a fresh machine: the first build has no PCH, the second makes one, which is stored
    folders = _build(first, tmp_path / "dpt1", [5, 6])
    assert folders[0] == [] and len(folders[1]) >= 1
    (store,) = first.glob("*/dpt_ir_headers")
    stored = sorted(p.name for p in store.glob("*/*.pch"))
    assert stored == folders[1]
    # a new process, with an empty kernel cache but the stored headers: its first build reads them
    (version,) = [p.name for p in first.iterdir() if p.is_dir()]
    shutil.copytree(store, second / version / "dpt_ir_headers")
    assert _build(second, tmp_path / "dpt2", [5]) == [stored]
    # built without a PCH in the first process, with one in the second: the same bytes
    a, b = _objects(first), _objects(second)
    assert b and set(b) < set(a) and all(a[k] == b[k] for k in b)

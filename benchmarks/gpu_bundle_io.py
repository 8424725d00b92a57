"""Reading a CUDA bundle for ``benchmarks/gpu_check.py``, with NumPy alone: ``plan.json``
validated against ``ref.npz`` and ``kernels.cu``, and the bundle's inputs (shipped, or drawn
from their seeds as ``dpt_ir.export.reference.draw`` draws them).

Guarantees: any problem raises `BundleError` with one line naming the file and the field
(a missing file, a plan of another version, a field missing, a buffer table that does not
match the launches, the results or ``ref.npz``); nothing here imports dpt_ir or warp.
"""

from __future__ import annotations

import json
import zipfile
from pathlib import Path
from typing import Any

import numpy as np

VERSION = 2
FILES = ("plan.json", "ref.npz", "kernels.cu")
DTYPES = {"float32", "float64", "int32", "uint32", "uint8", "bool"}
ROLES = {"input", "cotangent", "output", "gradient", "saved", "workspace", "partial", "status", "constant"}
NEED = {
    "bundle": ("format", "version", "graph", "inputs", "status_size", "status", "plans", "tolerance"),
    "plan": ("name", "buffers", "stages", "results", "bytes_moved", "expect_flags"),
    "buffer": ("name", "role", "dtype", "shape", "size"),
    "launch": ("name", "kernel", "phase", "dim", "host_tasks", "grid", "block", "args", "status_base"),
    "run": ("piece", "launches", "copies"),
    "copy": ("dst", "src", "size", "dst_at", "dst_step", "src_at", "src_step"),
    "segment": ("name", "run"),
    "loop": tuple(
        "name node op length body init carry_in carry_out feed emit keep final "
        "vjp vjp_carry_in vjp_feed after_vjp zero begin slots actions".split()
    ),
    "action": ("kind", "at", "slot", "count"),
}
_LISTS = ("init", "carry_in", "carry_out", "vjp_carry_in", "zero")  # a loop stage's fields naming buffers
_COPIES = ("feed", "emit", "final", "vjp_feed", "after_vjp", "begin")  # its copies (stepped or not)


class BundleError(Exception):
    """A bundle that cannot be run: the message names the file and the field."""


def _fields(obj: Any, kind: str, where: str) -> None:
    if not isinstance(obj, dict):
        raise BundleError(f"{where}: expected an object, found {type(obj).__name__}")
    for f in NEED[kind]:
        if f not in obj:
            raise BundleError(f"{where}: field {f!r} is missing")


def load(folder: Path) -> tuple[dict[str, Any], dict[str, np.ndarray], str]:
    """plan.json, ref.npz and kernels.cu of ``folder``, validated against each other."""
    for name in FILES:
        if not (folder / name).is_file():
            raise BundleError(f"{folder / name}: file is missing")
    path = folder / "plan.json"
    try:
        doc = json.loads(path.read_text(encoding="utf-8"))
    except (ValueError, UnicodeDecodeError) as exc:
        raise BundleError(f"{path}: not JSON ({exc})") from None
    _fields(doc, "bundle", str(path))
    if doc["format"] != "dpt_ir.cuda_bundle" or doc["version"] != VERSION:
        raise BundleError(
            f"{path}: field 'version' is {doc['version']!r} (format {doc['format']!r}), expected {VERSION}"
            " (re-export the bundle with this checkout's dpt-ir export-cuda)"
        )
    try:
        with np.load(folder / "ref.npz", allow_pickle=False) as npz:
            ref = {k: npz[k] for k in npz.files}
    except (OSError, ValueError, zipfile.BadZipFile) as exc:
        raise BundleError(f"{folder / 'ref.npz'}: not an .npz archive ({exc})") from None
    for k, plan in enumerate(doc["plans"]):
        _check_plan(plan, f"{path}: plans[{k}]", ref, folder)
    return doc, ref, (folder / "kernels.cu").read_text(encoding="utf-8")


def _check_plan(plan: dict[str, Any], where: str, ref: dict[str, np.ndarray], folder: Path) -> None:
    _fields(plan, "plan", where)
    table = {}
    for k, b in enumerate(plan["buffers"]):
        _fields(b, "buffer", f"{where}.buffers[{k}]")
        if b["role"] not in ROLES or b["dtype"] not in DTYPES or int(np.prod(b["shape"])) not in (b["size"], 0):
            raise BundleError(f"{where}.buffers[{k}] ({b['name']!r}): role/dtype/shape/size {b} are inconsistent")
        if b["role"] == "constant" and f"constant/{plan['name']}/{b['name']}" not in ref:
            raise BundleError(f"{folder / 'ref.npz'}: field 'constant/{plan['name']}/{b['name']}' is missing")
        table[b["name"]] = b
    for k, stage in enumerate(plan["stages"]):
        _check_stage(stage, f"{where}.stages[{k}]", table)
    for k, r in enumerate(plan["results"]):
        b = table.get(r["buffer"])
        key = f"{plan['name']}/{r['key']}"
        if b is None:
            raise BundleError(f"{where}.results[{k}].buffer: {r['buffer']!r} not in the buffer table")
        if not plan["expect_flags"] and key not in ref:
            raise BundleError(f"{folder / 'ref.npz'}: field {key!r} is missing ({where}.results[{k}])")
        if key in ref and key + "@at" not in ref and list(ref[key].shape) != list(r["shape"]):
            raise BundleError(
                f"{folder / 'ref.npz'}: field {key!r} has shape {list(ref[key].shape)}, "
                f"{where}.results[{k}] says {r['shape']}"
            )


def _check_stage(stage: Any, where: str, table: dict[str, Any]) -> None:
    kind = stage.get("kind") if isinstance(stage, dict) else None
    if kind not in ("segment", "loop"):
        raise BundleError(f"{where}.kind: {kind!r}; expected 'segment' or 'loop'")
    _fields(stage, kind, where)
    if kind == "segment":
        _check_run(stage["run"], f"{where}.run", table, 1)
        return
    n = stage["length"]
    if not isinstance(n, int) or n < 1 or stage["op"] not in ("scan", "scan_vjp"):
        raise BundleError(f"{where}: field 'length' {n!r} / 'op' {stage['op']!r}; expected >= 1 / scan or scan_vjp")
    _check_run(stage["body"], f"{where}.body", table, n)
    if stage["op"] == "scan_vjp":
        _check_run(stage["vjp"], f"{where}.vjp", table, n)
    for f in _LISTS:
        _named(stage[f], f"{where}.{f}", table)
    for f in ("keep", "slots"):
        for k, names in enumerate(stage[f]):
            _named(names, f"{where}.{f}[{k}]", table)
    if stage["keep"] and len(stage["keep"]) != n - 1:
        raise BundleError(f"{where}.keep: {len(stage['keep'])} kept carries; expected length - 1 = {n - 1}")
    for f in _COPIES:
        for k, c in enumerate(stage[f]):
            _check_copy(c, f"{where}.{f}[{k}]", table, n)
    for k, act in enumerate(stage["actions"]):
        _fields(act, "action", f"{where}.actions[{k}]")
        if act["at"] + act["count"] > n or act["slot"] > len(stage["slots"]):
            raise BundleError(
                f"{where}.actions[{k}]: {act} reaches step {act['at'] + act['count']} / slot {act['slot']}; "
                f"expected steps within field 'length' {n} and slots within {len(stage['slots'])} stored carries"
            )


def _named(names: list[str], where: str, table: dict[str, Any]) -> None:
    missing = [a for a in names if a not in table]
    if missing:
        raise BundleError(f"{where}: {missing} not in the buffer table")


def _check_run(run: Any, where: str, table: dict[str, Any], steps: int) -> None:
    _fields(run, "run", where)
    for k, launch in enumerate(run["launches"]):
        _fields(launch, "launch", f"{where}.launches[{k}]")
        _named(launch["args"], f"{where}.launches[{k}].args", table)
    for k, c in enumerate(run["copies"]):
        _check_copy(c, f"{where}.copies[{k}]", table, steps)


def _check_copy(c: Any, where: str, table: dict[str, Any], steps: int) -> None:
    """Both sides of a copy inside their buffers at every step ``0..steps-1`` of its stage."""
    _fields(c, "copy", where)
    _named([c["dst"], c["src"]], where, table)
    for side in ("dst", "src"):
        end = c[f"{side}_at"] + (steps - 1) * c[f"{side}_step"] + c["size"]
        if end > table[c[side]]["size"]:
            raise BundleError(
                f"{where}: {side} {c[side]!r} holds {table[c[side]]['size']} elements; step {steps - 1} of the "
                f"stage's {steps} (field 'length') reaches element {end}"
            )


def constants_of(plan: dict[str, Any], ref: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """The launch constants of ``plan`` (sparse rows, scatter tables), from ref.npz."""
    return {b["name"]: ref[f"constant/{plan['name']}/{b['name']}"] for b in plan["buffers"] if b["role"] == "constant"}


def inputs_of(doc: dict[str, Any], ref: dict[str, np.ndarray], where: Path) -> dict[str, np.ndarray]:
    """Each input shipped in ref.npz, or drawn from its seed (checked against its sum)."""
    out = {}
    for spec in doc["inputs"]:
        name = spec["name"]
        if spec.get("seed") is None:
            out[name] = ref[f"input/{name}"]
            continue
        size = int(np.prod(spec["shape"], dtype=np.int64))
        u = np.random.default_rng(spec["seed"]).random(size, dtype=np.float32)
        arr = (u * np.float32(spec["high"] - spec["low"]) + np.float32(spec["low"])).astype(spec["dtype"])
        want = float(ref[f"input/{name}@sum"])
        if arr.sum(dtype=np.float64) != want:
            raise BundleError(
                f"{where / 'ref.npz'}: field 'input/{name}@sum' is {want}, this NumPy draws "
                f"{arr.sum(dtype=np.float64)} from seed {spec['seed']}"
            )
        out[name] = arr.reshape(spec["shape"])
    return out

"""Tables, JSON and the plot of `dpt-ir bench` results, and the machine description.

Results are ``{case: {contender: Measurement}}``. Ratios are always a peer's median time
over dpt_ir's median time in the same run: above 1, dpt_ir is that many times faster.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
from dataclasses import asdict, dataclass, field
from importlib.metadata import PackageNotFoundError, version
from pathlib import Path
from typing import Any

from dpt_ir.cli.commands import format_table

BASELINE = "dpt_ir"


@dataclass
class Measurement:
    """One contender on one case. ``first_result_s``: from nothing (compile, conversion,
    allocation) to the first loss and gradient; ``times_s``: the timed steps; ``cpu_s``:
    process CPU time over those steps (cpu/wall near 1 means one thread)."""

    first_result_s: float
    times_s: list[float] = field(default_factory=list)
    cpu_s: float = 0.0
    launches: int | None = None
    loss: float = 0.0
    grad_error: float = 0.0

    @property
    def median_s(self) -> float:
        ordered = sorted(self.times_s)
        mid = len(ordered) // 2
        return ordered[mid] if len(ordered) % 2 else 0.5 * (ordered[mid - 1] + ordered[mid])

    @property
    def min_s(self) -> float:
        return min(self.times_s)

    @property
    def cpu_per_wall(self) -> float:
        return self.cpu_s / sum(self.times_s) if self.times_s else 0.0


Results = dict[str, dict[str, Measurement]]


def machine() -> dict[str, Any]:
    """CPU model, core count, package versions (those installed), UTC date."""
    model = platform.processor()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                model = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    versions = {"python": platform.python_version()}
    for package in ("dpt_ir", "warp-lang", "numpy", "scipy", "torch", "jax", "jaxlib"):
        try:
            versions[package] = version(package)
        except PackageNotFoundError:
            continue
    return {
        "cpu": model,
        "cores": os.cpu_count(),
        "versions": versions,
        "date": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
    }


def contender_order(results: Results) -> list[str]:
    """Contenders in first-seen order across cases."""
    names: list[str] = []
    for per_case in results.values():
        names += [n for n in per_case if n not in names]
    return names


def _table(header: list[str], rows: list[list[str]]) -> str:
    return format_table(header, rows, numeric=True)


def _cells(results: Results, names: list[str], cell: Any) -> list[list[str]]:
    return [[case, *(cell(per_case[n]) if n in per_case else "-" for n in names)] for case, per_case in results.items()]


def format_report(results: Results) -> str:
    """The three tables: median step times, ratios to dpt_ir, time to first result."""
    names = contender_order(results)
    peers = [n for n in names if n != BASELINE]
    times = _table(["median ms", *names], _cells(results, names, lambda m: f"{m.median_s * 1e3:.2f}"))
    ratio_rows = [
        [case, *(f"{per_case[n].median_s / per_case[BASELINE].median_s:.2f}x" if n in per_case else "-" for n in peers)]
        for case, per_case in results.items()
        if BASELINE in per_case
    ]
    ratios = _table(["peer / dpt_ir", *peers], ratio_rows)
    first = _table(["first result s", *names], _cells(results, names, lambda m: f"{m.first_result_s:.2f}"))
    cpu = _table(["cpu / wall", *names], _cells(results, names, lambda m: f"{m.cpu_per_wall:.2f}"))
    launches = [
        f"{case}: " + ", ".join(f"{n} {m.launches}" for n, m in per_case.items() if m.launches is not None)
        for case, per_case in results.items()
    ]
    return "\n\n".join(
        [
            "Step times (forward + backward, median):\n" + times,
            "Speed-up of dpt_ir (peer median / dpt_ir median; > 1: dpt_ir faster):\n" + ratios,
            "Time to first result (compile + conversion + first step; cold caches):\n" + first,
            "CPU time / wall time over the timed steps (1.0: one busy thread):\n" + cpu,
            "Kernel launches per step: " + "; ".join(launches),
        ]
    )


def to_json(results: Results, meta: dict[str, Any]) -> dict[str, Any]:
    """A JSON-ready document: ``meta`` plus, per case and contender, the measurement with
    its median, minimum and ratio to dpt_ir."""
    cases: dict[str, Any] = {}
    for case, per_case in results.items():
        base = per_case.get(BASELINE)
        cases[case] = {
            name: {
                **asdict(m),
                "median_s": m.median_s,
                "min_s": m.min_s,
                "cpu_per_wall": m.cpu_per_wall,
                "ratio_to_dpt_ir": None if base is None else m.median_s / base.median_s,
            }
            for name, m in per_case.items()
        }
    return {**meta, "cases": cases}


def write_json(path: Path, results: Results, meta: dict[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(to_json(results, meta), indent=2) + "\n")


def write_plot(path: Path, results: Results, meta: dict[str, Any]) -> None:
    """Two panels: dpt_ir's speed-up over each peer per case (log scale, 1 marked), and the
    time to first result per contender and case (log scale). Needs matplotlib."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.ticker import FuncFormatter, LogLocator

    names = contender_order(results)
    peers = [n for n in names if n != BASELINE]
    cases = list(results)
    fig, (ax_ratio, ax_first) = plt.subplots(1, 2, figsize=(13, 5.4), constrained_layout=True)
    x = np.arange(len(cases))
    def ratio(case: str, name: str) -> float:
        return results[case][name].median_s / results[case][BASELINE].median_s

    def first(case: str, name: str) -> float:
        return results[case][name].first_result_s

    plain = FuncFormatter(lambda v, _: f"{v:g}")
    for axis, contenders, value, label in (
        (ax_ratio, peers, ratio, "peer time / dpt_ir time"),
        (ax_first, names, first, "time to first result (s)"),
    ):
        width = 0.8 / max(len(contenders), 1)
        for k, name in enumerate(contenders):
            heights = [value(c, name) if name in results[c] and BASELINE in results[c] else np.nan for c in cases]
            # One colour per contender in both panels.
            offset = (k - (len(contenders) - 1) / 2) * width
            axis.bar(x + offset, heights, width, label=name, color=f"C{names.index(name)}")
        axis.set_yscale("log")
        axis.yaxis.set_major_formatter(plain)
        axis.yaxis.set_minor_locator(LogLocator(subs=(2.0, 5.0)))
        axis.yaxis.set_minor_formatter(plain)
        axis.set_xticks(x, cases, rotation=15)
        axis.set_ylabel(label)
        axis.grid(axis="y", which="both", alpha=0.3)
    ax_ratio.axhline(1.0, color="black", linewidth=1)
    ax_ratio.set_title("speed-up of dpt_ir, forward + backward (> 1: dpt_ir faster)")
    ax_first.set_title("compile + first step, cold caches")
    ax_ratio.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=3)
    ax_first.legend(fontsize=8, loc="upper center", bbox_to_anchor=(0.5, -0.12), ncol=4)
    v = meta.get("versions", {})
    fig.suptitle(
        f"{meta.get('shape_label', '')} float32 on {meta.get('device', 'cpu')} ({meta.get('cpu', '')}, "
        f"{meta.get('threads', 1)} thread); dpt_ir {v.get('dpt_ir', '?')}, warp {v.get('warp-lang', '?')}, "
        f"{meta.get('date', '')[:10]}",
        fontsize=9,
    )
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def results_from_json(doc: dict[str, Any]) -> Results:
    """The measurements of a document `write_json` wrote (to redraw its plot)."""
    fields = ("first_result_s", "times_s", "cpu_s", "launches", "loss", "grad_error")
    return {
        case: {name: Measurement(**{k: m[k] for k in fields}) for name, m in per_case.items()}
        for case, per_case in doc["cases"].items()
    }


if __name__ == "__main__":
    import sys

    if len(sys.argv) != 3:
        sys.exit("usage: python -m benchmarks.report RESULTS.json PLOT.png  (redraw the plot of a recorded run)")
    document = json.loads(Path(sys.argv[1]).read_text())
    write_plot(Path(sys.argv[2]), results_from_json(document), document)
    print(format_report(results_from_json(document)))

"""The ``.dot`` dumps render with Graphviz: fusion groups are clusters, saved values are
highlighted. Skipped when Graphviz's ``dot`` is not installed (``apt-get install
graphviz``)."""

from __future__ import annotations

import shutil
import subprocess
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest

from dpt_ir.ir.kernel_ir import plan_of
from dpt_ir.ir.records import saved_values
from dpt_ir.passes.manager import PipelineResult, run_pipeline
from dpt_ir.passes.options import CompileOptions

from .graphs import CASES

SVG = "{http://www.w3.org/2000/svg}"
DOT = shutil.which("dot")
pytestmark = pytest.mark.skipif(DOT is None, reason="Graphviz 'dot' is not on PATH")


def _dump(name: str, folder: Path) -> PipelineResult:
    case = CASES[name]
    return run_pipeline(case.graph, CompileOptions(wrt=case.wrt), dump_dir=folder)


def _render(dot_file: Path) -> ET.Element:
    svg = subprocess.run(
        [str(DOT), "-Tsvg", str(dot_file)], check=True, capture_output=True, text=True, timeout=60
    ).stdout
    return ET.fromstring(svg)


def _titled(svg: ET.Element, cls: str) -> dict[str, ET.Element]:
    """The SVG groups of one class (``cluster``, ``node``) by their title."""
    return {g.findtext(f"{SVG}title"): g for g in svg.iter(f"{SVG}g") if g.get("class") == cls}


@pytest.fixture(scope="module")
def exp_minus_max(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, PipelineResult]:
    folder = tmp_path_factory.mktemp("dot")
    return folder, _dump("exp_minus_max", folder)


def test_every_stage_renders(exp_minus_max: tuple[Path, PipelineResult]) -> None:
    folder, result = exp_minus_max
    for rec, stage in zip(result.records, result.stages, strict=True):
        nodes = _titled(_render(folder / f"{rec.index:02d}-{rec.name}.dot"), "node")
        assert set(stage.types) <= set(nodes), rec.name


def test_fusion_groups_are_clusters(exp_minus_max: tuple[Path, PipelineResult]) -> None:
    folder, result = exp_minus_max
    svg = _render(folder / f"{len(result.records) - 1:02d}-schedule.dot")
    clusters = _titled(svg, "cluster")
    groups = plan_of(result.graph).groups
    assert set(clusters) == {f"cluster_{g.id}" for g in groups}
    for g in groups:
        label = "".join(clusters[f"cluster_{g.id}"].itertext())
        assert f"{g.id}: {g.kind}" in label


def test_saved_values_are_highlighted(exp_minus_max: tuple[Path, PipelineResult]) -> None:
    folder, result = exp_minus_max
    nodes = _titled(_render(folder / f"{len(result.records) - 1:02d}-schedule.dot"), "node")
    saved = saved_values(result.graph)
    assert saved
    for name, g in nodes.items():
        outline = g.find(f"{SVG}polygon")
        red = outline is not None and outline.get("stroke") == "red" and outline.get("stroke-width") == "3"
        assert red == (name in saved), name

"""The package's metadata (pyproject.toml): a licence with its file, authors, classifiers,
and dependency ranges that do not replace a user's own torch or jax."""

from __future__ import annotations

import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PROJECT = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_licence_field_and_file() -> None:
    assert PROJECT["license"] == "Apache-2.0" and PROJECT["license-files"] == ["LICENSE"]
    text = (ROOT / "LICENSE").read_text()
    assert "Apache License" in text and "Version 2.0, January 2004" in text


def test_authors_and_classifiers() -> None:
    assert PROJECT["authors"] == [{"name": "dpt_ir developers"}]
    classifiers = set(PROJECT["classifiers"])
    assert {"Programming Language :: Python :: 3.11", "Topic :: Scientific/Engineering"} <= classifiers
    assert any(c.startswith("Operating System ::") for c in classifiers)
    assert not any(c.startswith("License ::") for c in classifiers)  # PEP 639: the expression says it


def test_adapter_extras_are_ranges_and_runtime_deps_bounded() -> None:
    extras = PROJECT["optional-dependencies"]
    for extra in ("torch", "jax"):
        assert extras[extra] and all("==" not in req and "<" in req for req in extras[extra]), extras[extra]
    assert all("<" in req for req in PROJECT["dependencies"]), PROJECT["dependencies"]
    assert "pydantic>=2.6,<3" in PROJECT["dependencies"]

"""Run a subprocess as if some packages were not installed: `env_without` writes a
``sitecustomize.py`` that makes ``import <package>`` (and its submodules) raise
ModuleNotFoundError, and returns an environment whose PYTHONPATH puts it first (then the
repository, so the checkout's dpt_ir is the one imported)."""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]

_SITECUSTOMIZE = """
import sys

HIDDEN = {packages!r}


class Hide:
    def find_spec(self, name, path=None, target=None):
        if name.partition(".")[0] in HIDDEN:
            raise ModuleNotFoundError(f"No module named {{name!r}}", name=name)


sys.meta_path.insert(0, Hide())
"""


def env_without(folder: Path, *packages: str) -> dict[str, str]:
    """The environment of a process in which ``packages`` cannot be imported (the file
    goes in ``folder``)."""
    (folder / "sitecustomize.py").write_text(_SITECUSTOMIZE.format(packages=sorted(packages)))
    paths = [str(folder), str(REPO), *filter(None, os.environ.get("PYTHONPATH", "").split(os.pathsep))]
    return {**os.environ, "PYTHONPATH": os.pathsep.join(paths)}

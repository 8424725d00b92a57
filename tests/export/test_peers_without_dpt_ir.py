"""The GPU machine has no warp-lang: `gpu_check.py --peers` must import the peers
(`benchmarks/peers_torch.py`, `peers_jax.py`) where importing `dpt_ir` or `warp` fails.

A subprocess refuses those imports with a `sys.meta_path` finder, then runs the torch
(eager) and JAX peers of beer and imaging on inputs made here by `benchmarks.cases`, and
checks their losses and gradients against each other and against dpt_ir's interpreter. The
constants `benchmarks.case_data` copies are checked against their dpt_ir sources.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

import dpt_ir as dp
from benchmarks import case_data
from benchmarks.cases import CASES
from dpt_ir.api import imaging

from .conftest import ROOT

SHAPE = (16, 16)

_CHILD = """
import sys
class Refuse:
    def find_spec(self, name, path=None, target=None):
        if name.split('.')[0] in ('dpt_ir', 'warp'):
            raise ImportError(f'{name} is not installed here')
sys.meta_path.insert(0, Refuse())
import numpy as np
from benchmarks import peers_jax, peers_torch
out = {}
for case, wrt in (('beer', 'x'), ('imaging', 'mu')):
    with np.load(sys.argv[1] + f'/{case}.npz') as npz:
        data = {k: npz[k] for k in npz.files}
    for label, make in (('jax', peers_jax.make_value_and_grad), ('torch', peers_torch.make_value_and_grad)):
        loss, grad = make(case, data, wrt)()
        out[f'{case}/{label}/loss'] = np.asarray(loss)
        out[f'{case}/{label}/grad'] = np.asarray(grad)
np.savez(sys.argv[1] + '/peers.npz', **out)
bad = sorted(m for m in sys.modules if m.split('.')[0] in ('dpt_ir', 'warp'))
assert not bad, bad
"""


@pytest.mark.skipif(
    importlib.util.find_spec("torch") is None or importlib.util.find_spec("jax") is None,
    reason="the peers need PyTorch and JAX (pip install -e '.[peers]'; .ci/run installs them)",
)
def test_peers_run_where_dpt_ir_and_warp_do_not_import(tmp_path: Path) -> None:
    refs = {}
    for case in ("beer", "imaging"):
        c = CASES[case]
        data = c.inputs(SHAPE, np.random.default_rng(3))
        np.savez(tmp_path / f"{case}.npz", **data)
        graph = c.build(SHAPE)
        refs[case] = (dp.interpret(graph, **data)["loss"], dp.interpret_grad(graph, [c.wrt], **data)[c.wrt])
    run = subprocess.run(
        [sys.executable, "-c", _CHILD, str(tmp_path)], capture_output=True, text=True, cwd=ROOT, check=False
    )
    assert run.returncode == 0, run.stdout + run.stderr
    with np.load(tmp_path / "peers.npz") as got:
        for case, (loss, grad) in refs.items():
            for label in ("jax", "torch"):
                np.testing.assert_allclose(got[f"{case}/{label}/loss"], loss, rtol=1e-4, err_msg=f"{case} {label}")
                np.testing.assert_allclose(
                    got[f"{case}/{label}/grad"], grad, rtol=1e-3, atol=1e-5 * np.abs(grad).max(), err_msg=case
                )


def test_case_data_matches_its_dpt_ir_sources() -> None:
    sys.path.append(str(ROOT / "examples"))
    import transmission_pipeline as pipeline

    assert (case_data.IMAGING_I0, case_data.IMAGING_SIGMA) == (pipeline.I0, pipeline.SIGMA)
    for sigma in (0.7, 1.5, 3.0):
        np.testing.assert_array_equal(case_data.gaussian_weights(sigma), imaging.gaussian_kernel1d(sigma))

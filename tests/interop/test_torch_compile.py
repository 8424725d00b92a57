"""``torch.compile(model, fullgraph=True)`` of a model that calls a dpt_ir program: it
compiles (fullgraph fails on any graph break) and equals eager, values and gradients.

The backend is ``aot_eager`` unless ``DPT_IR_TORCH_BACKEND`` names another: it runs
Dynamo (the graph-break check) and AOT autograd (which traces the forward and backward
ops through their fake implementations), everything the program's registration is
responsible for. Inductor adds only the C++ code generation of the torch ops around
the program, which costs ~35 s cold on the CI machine (measured); with
``DPT_IR_TORCH_BACKEND=inductor`` the test passes too (measured: 9 s with a warm cache).
"""

from __future__ import annotations

import os

import dpt_ir as dp
from tests.interop.conftest import pair_inputs, require

dpt = require("dpt_ir.torch")
import torch  # noqa: E402


class PairModel(torch.nn.Module):
    """Torch work before and after the program: parameters -> program -> a loss."""

    def __init__(self, program: dp.Program, a: torch.Tensor, b: torch.Tensor) -> None:
        super().__init__()
        self.f = dpt.function(program)
        self.a = torch.nn.Parameter(a.clone())
        self.b = torch.nn.Parameter(b.clone())

    def forward(self, w: torch.Tensor) -> torch.Tensor:
        loss, c, above = self.f(torch.tanh(self.a), self.b * 2.0, w)
        return loss + 0.5 * (c * c).sum() + above.sum()


def test_compiled_model_equals_eager(pair_program: dp.Program) -> None:
    arrays = {k: torch.tensor(v) for k, v in pair_inputs(9).items()}
    eager = PairModel(pair_program, arrays["a"], arrays["b"])
    compiled_model = PairModel(pair_program, arrays["a"], arrays["b"])
    backend = os.environ.get("DPT_IR_TORCH_BACKEND", "aot_eager")
    compiled = torch.compile(compiled_model, fullgraph=True, backend=backend)
    want, got = eager(arrays["w"]), compiled(arrays["w"])
    want.backward()
    got.backward()
    torch.testing.assert_close(got, want, rtol=1e-12, atol=0)
    for name in ("a", "b"):
        g_want, g_got = getattr(eager, name).grad, getattr(compiled_model, name).grad
        torch.testing.assert_close(g_got, g_want, rtol=1e-12, atol=1e-14)

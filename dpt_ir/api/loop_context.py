"""What a loop's step was traced on, for the errors raised while tracing it.

Assumes: a ``ContractError`` raised inside ``step`` (while `dp.scan` or `dp.fori_loop`
traces it once on body inputs) names body tensors (``%carry.0``, ``%closure.1``) the user
never named. Guarantees: `step_error` gives a ``ContractError`` that keeps the original
message and adds which enclosing tensor (name, shape, dtype) each body input stands for,
and, when the carries' leading (batch) axes disagree, says so first, naming the carries
and their sizes. It only describes; it never decides that a program is wrong.
"""

from __future__ import annotations

from collections.abc import Sequence

from dpt_ir.ir.builder import Tensor
from dpt_ir.ir.errors import ContractError


def _describe(role: str, t: Tensor, shape: tuple[int, ...]) -> str:
    return f"%{role} is %{t.name} {list(shape)} {t.dtype}"


def _inputs(carries: Sequence[Tensor], seq: Sequence[Tensor], captures: Sequence[Tensor]) -> list[str]:
    """One phrase per body input: the body's name, then the enclosing tensor's."""
    parts = [_describe(f"carry.{k}", t, t.shape) for k, t in enumerate(carries)]
    parts += [_describe(f"x.{k}", t, t.shape[1:]) + " (a row of it)" for k, t in enumerate(seq)]
    parts += [_describe(f"closure.{k}", t, t.shape) for k, t in enumerate(captures)]
    return parts


def batch_disagreement(carries: Sequence[Tensor]) -> str | None:
    """A sentence naming the carries whose leading axes differ, or None when the carries
    of rank >= 1 share one leading size (or there are fewer than two of them)."""
    ranked = [(k, t) for k, t in enumerate(carries) if t.ndim >= 1]
    if len({t.shape[0] for _, t in ranked}) < 2:
        return None
    sizes = ", ".join(f"carry {k} (%{t.name}) has {t.shape[0]}" for k, t in ranked)
    return f"the carries' leading (batch) axes disagree: {sizes}; expected one batch size for carries the step combines"


def step_error(
    where: str,
    error: ContractError,
    carries: Sequence[Tensor],
    seq: Sequence[Tensor],
    captures: Sequence[Tensor],
) -> ContractError:
    """``error`` (raised by the step) with the loop's context: see the module docstring."""
    lead = batch_disagreement(carries)
    context = "; ".join(_inputs(carries, seq, captures))
    head = f"{where}: {lead}. " if lead else f"{where}: "
    return ContractError(f"{head}the step failed while being traced ({context}): {error}")

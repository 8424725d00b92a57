"""Checkpoint schedules of a loop's reverse sweep, as plain data (a list of `Action`s).

A loop of ``n`` steps maps carry ``c_i`` to ``c_{i+1}``. Its reverse sweep needs, at each
step ``i`` from ``n-1`` down to ``0``, the carry ``c_i``. `schedule(n, slots)` gives the
Griewank–Walther binomial ("revolve") schedule with ``slots`` stored carries: the one that
runs the fewest forward steps (`optimal_advances`), starting from ``c_0`` and holding at
most ``slots`` carries at once (plus the current carry and its cotangent). It is replayed
identically by the interpreter and by any runtime: the same steps in the same order, so a
gradient does not depend on who replays it, and it is bit-identical across policies
(each step's vjp sees the same carry, computed by the same forward steps).

Actions, executed in order, with a *current carry* at position ``at``:

- ``store``: copy the current carry (``c_at``) into slot ``slot``;
- ``restore``: make slot ``slot`` (holding ``c_at``) the current carry;
- ``advance``: run ``count`` forward steps from ``c_at``;
- ``reverse``: run step ``at``'s vjp on the current carry ``c_at`` (this consumes it).

`CheckpointPlan` resolves a policy (``None``: store every carry; ``K``: ``K`` slots;
``"auto"``: the most slots a memory budget allows, hence the least recomputation) into a
schedule and the figures ``saved.txt``-style explanations report.
"""

from __future__ import annotations

import math
from typing import Literal

from pydantic import Field

from dpt_ir.ir.errors import ContractError
from dpt_ir.ir.types import FrozenModel

Policy = int | Literal["auto"] | None
DEFAULT_MEMORY_BUDGET = 256 * 2**20  # bytes of carries the "auto" policy may hold by default


class Action(FrozenModel):
    """One step of a checkpoint schedule (see the module docstring)."""

    kind: Literal["store", "restore", "advance", "reverse"]
    at: int = Field(ge=0)
    slot: int = Field(default=0, ge=0)
    count: int = Field(default=0, ge=0)


def beta(s: int, t: int) -> int:
    """``C(s + t, s)``: the most steps ``s`` slots reverse with each step advanced at most
    ``t`` times (0 for ``t < 0``)."""
    return math.comb(s + t, s) if t >= 0 else 0


def repetitions(n: int, slots: int) -> int:
    """The least ``r`` with ``beta(slots, r) >= n``."""
    r = 0
    while beta(slots, r) < n:
        r += 1
    return r


def optimal_advances(n: int, slots: int) -> int:
    """The fewest forward steps that reverse ``n`` steps with ``slots`` stored carries
    (Griewank 1992): ``r n - C(slots + r, slots + 1)``, ``r = repetitions(n, slots)``.
    Counts the steps run only to rebuild carries, not the forward inside each step's vjp."""
    r = repetitions(n, slots)
    return r * n - beta(slots + 1, r - 1)


def _split(length: int, slots: int) -> int:
    """Where an optimal schedule stores its next carry in a segment of ``length >= 2``
    steps with ``slots >= 2`` slots: an offset ``m`` such that advancing ``m`` steps and
    reversing both parts optimally costs `optimal_advances` (the left part, re-entered
    once more, may repeat its steps ``r - 1`` times; the right part ``r`` times)."""
    best = optimal_advances(length, slots)
    r = repetitions(length, slots)
    lo = max(1, length - beta(slots - 1, r))
    hi = min(length - 1, beta(slots, r - 1))
    candidates = [hi, lo, *range(lo + 1, hi)]
    for m in candidates:
        if m + optimal_advances(m, slots) + optimal_advances(length - m, slots - 1) == best:
            return m
    raise AssertionError(f"no optimal split for {length} steps and {slots} slots")  # the formula guarantees one


def schedule(n: int, slots: int) -> list[Action]:
    """The binomial schedule reversing ``n >= 1`` steps with ``slots >= 1`` stored carries.

    Iterative (an explicit stack of segments): no recursion on ``n``. Slots are used as a
    stack: a segment whose start carry is in slot ``k`` may use slots ``k..slots-1``."""
    if n < 1 or slots < 1:
        raise ContractError(f"checkpoint schedule: expected n >= 1 steps and slots >= 1, found n={n}, slots={slots}")
    actions = [Action(kind="store", at=0, slot=0)]
    position: int | None = 0  # where the current carry is (None: consumed by a reverse)
    stack = [(0, n, 0)]  # (start, end, slot holding c_start): reverse steps start..end-1
    while stack:
        start, end, k = stack.pop()
        free = slots - k
        if position != start:
            actions.append(Action(kind="restore", at=start, slot=k))
            position = start
        if end - start == 1:
            actions.append(Action(kind="reverse", at=start))
            position = None
        elif free == 1:  # no slot left: advance from the start for every step, last first
            for i in range(end - 1, start - 1, -1):
                if position != start:
                    actions.append(Action(kind="restore", at=start, slot=k))
                if i > start:
                    actions.append(Action(kind="advance", at=start, count=i - start))
                actions.append(Action(kind="reverse", at=i))
                position = None
        else:
            m = start + _split(end - start, free)
            actions.append(Action(kind="advance", at=start, count=m - start))
            actions.append(Action(kind="store", at=m, slot=k + 1))
            position = m
            stack.append((start, m, k))  # after the right part, whose slot k+1 is then free
            stack.append((m, end, k + 1))
    return actions


def advances(actions: list[Action]) -> int:
    """Forward steps a schedule runs to rebuild carries."""
    return sum(a.count for a in actions if a.kind == "advance")


class FirstSweep(FrozenModel):
    """A schedule's actions before its first ``reverse``: advances from ``c_0`` to
    ``c_{length-1}`` with stores on the way, the steps the loop's forward runs too. A forward
    that keeps the carries it stores (``stores``: slot -> step), and leaves ``c_{length-1}``
    where the reverse can read it, lets the reverse start after them: ``advances`` fewer
    forward steps, the same carries."""

    actions: int = Field(ge=1)
    stores: dict[int, int]
    advances: int = Field(ge=0)


def first_sweep(actions: list[Action] | tuple[Action, ...]) -> FirstSweep:
    """The leading actions of ``actions`` (a `schedule`) up to the first ``reverse``, which
    reverses the last step from the carry the sweep ends at."""
    stores: dict[int, int] = {}
    at = 0
    for j, act in enumerate(actions):
        if act.kind == "reverse":
            if act.at != at:  # `schedule` starts by advancing to the last step: it is reversed first
                raise AssertionError(f"the first reverse is at step {act.at}, the first sweep ends at {at}")
            return FirstSweep(actions=j, stores=stores, advances=at)
        if act.kind == "advance":
            at += act.count
        elif act.kind == "store" and act.slot > 0:
            stores[act.slot] = at
        elif act.kind == "restore":
            raise AssertionError(f"a restore (action {j}) before the first reverse")
    raise AssertionError("a schedule without a reverse")


def peak_slots(actions: list[Action]) -> int:
    """Slots a schedule uses (the highest slot index + 1)."""
    return 1 + max(a.slot for a in actions if a.kind == "store")


class CheckpointPlan(FrozenModel):
    """A loop's checkpointing policy resolved for its length and carry size.

    ``slots``: carries stored at once; ``bytes_held``: their bytes; ``peak_carries``: the
    most carries alive during the reverse sweep (the slots, the current carry and its
    cotangent); ``advances``: forward steps run to rebuild carries (the forward inside
    each step's vjp excluded); ``recompute_factor``: ``advances / length``."""

    policy: str
    length: int
    carry_bytes: int
    slots: int
    bytes_held: int
    peak_carries: int
    advances: int
    recompute_factor: float
    actions: tuple[Action, ...]


def check_policy(checkpoint: object, where: str) -> Policy:
    """``checkpoint`` as a policy, or ContractError naming ``where``."""
    if checkpoint is None or checkpoint == "auto":
        return checkpoint  # type: ignore[return-value]
    if isinstance(checkpoint, bool) or not isinstance(checkpoint, int):
        raise ContractError(
            f"{where}: unknown checkpoint policy {checkpoint!r}; expected None (store every carry), "
            "a positive int K (binomial checkpointing with K stored carries) or 'auto'"
        )
    if checkpoint < 1:
        raise ContractError(f"{where}: checkpoint=K needs K >= 1 stored carries, found K={checkpoint}")
    return checkpoint


def plan(length: int, carry_bytes: int, checkpoint: Policy, memory_budget: int | None, where: str) -> CheckpointPlan:
    """Resolve ``checkpoint`` for a loop of ``length`` steps whose carries take
    ``carry_bytes``. ``"auto"`` stores as many carries as ``memory_budget`` (bytes, default
    `DEFAULT_MEMORY_BUDGET`) holds after the current carry and its cotangent, at most
    ``length`` (then nothing is recomputed beyond one forward sweep)."""
    check_policy(checkpoint, where)
    if checkpoint is None:
        slots, label = length, "store every carry"
    elif checkpoint == "auto":
        budget = DEFAULT_MEMORY_BUDGET if memory_budget is None else memory_budget
        fit = budget // max(carry_bytes, 1) - 2
        if fit < 1:
            raise ContractError(
                f"{where}: checkpoint='auto' with a memory budget of {budget} bytes cannot hold 3 carries of "
                f"{carry_bytes} bytes (one stored, the current one and its cotangent); expected a budget of at "
                f"least {3 * carry_bytes} bytes"
            )
        slots = min(length, fit)
        label = f"auto: {slots} stored carries within a budget of {budget} bytes"
    else:
        slots = min(int(checkpoint), length)
        label = f"binomial (revolve) with K={checkpoint} stored carries"
    actions = schedule(length, slots)
    steps = advances(actions)
    return CheckpointPlan(
        policy=label,
        length=length,
        carry_bytes=carry_bytes,
        slots=slots,
        bytes_held=slots * carry_bytes,
        peak_carries=slots + 2,
        advances=steps,
        recompute_factor=steps / length,
        actions=tuple(actions),
    )

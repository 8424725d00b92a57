"""The revolve schedule (`dpt_ir.ops.revolve`): optimal forward-step counts against the
binomial formula and an independent dynamic programme, the slots it uses, and that it
reverses every step once, last first, each on the carry of its own position."""

from __future__ import annotations

import functools

import pytest

from dpt_ir import ContractError
from dpt_ir.ops.revolve import Action, advances, first_sweep, optimal_advances, peak_slots, plan, schedule


@functools.cache
def fewest_advances(n: int, slots: int) -> int:
    """The optimum by exhaustive split search (the textbook recurrence, not the formula)."""
    if n == 1:
        return 0
    if slots == 1:
        return n * (n - 1) // 2
    return min(m + fewest_advances(m, slots) + fewest_advances(n - m, slots - 1) for m in range(1, n))


def replay(actions: list[Action]) -> list[int]:
    """Simulate a schedule on integer 'carries' (the position); the steps reversed, in order.
    Fails when an action reads a slot or a carry that does not hold the position it claims."""
    slots: dict[int, int] = {}
    current: int | None = 0
    reversed_steps = []
    for a in actions:
        if a.kind == "store":
            assert current == a.at
            slots[a.slot] = current
        elif a.kind == "restore":
            assert slots[a.slot] == a.at
            current = a.at
        elif a.kind == "advance":
            assert current == a.at and a.count >= 1
            current += a.count
        else:
            assert current == a.at
            reversed_steps.append(a.at)
            current = None
    return reversed_steps


@pytest.mark.parametrize("slots", [1, 2, 3, 5, 8])
def test_schedule_is_optimal_and_reverses_every_step(slots: int) -> None:
    for n in range(1, 41):
        actions = schedule(n, slots)
        assert replay(actions) == list(range(n - 1, -1, -1))
        assert advances(actions) == optimal_advances(n, slots) == fewest_advances(n, min(slots, n) or 1), (n, slots)
        assert peak_slots(actions) <= slots


@pytest.mark.parametrize("slots", [1, 2, 3, 5, 16])
def test_first_sweep_is_the_forward_s_steps_with_its_stores(slots: int) -> None:
    """The actions before the first reverse advance from c_0 to c_{n-1} (the steps a forward
    runs), storing each slot at most once at increasing steps; nothing after them reads a
    slot the sweep did not store or the rest of the schedule stores first."""
    for n in range(1, 41):
        actions = schedule(n, slots)
        sweep = first_sweep(actions)
        assert sweep.advances == n - 1 and actions[sweep.actions] == Action(kind="reverse", at=n - 1)
        lead = actions[: sweep.actions]
        assert {a.kind for a in lead} <= {"store", "advance"}
        assert list(sweep.stores.values()) == sorted(set(sweep.stores.values()))
        assert all(0 < at < n for at in sweep.stores.values())
        filled = {0, *sweep.stores}
        for a in actions[sweep.actions :]:
            if a.kind == "store":
                filled.add(a.slot)
            elif a.kind == "restore":
                assert a.slot in filled, (n, slots, a)


def test_known_counts() -> None:
    # Griewank & Walther: r n - C(s + r, s + 1) with r the least repetition number.
    assert optimal_advances(1000, 10) == 3636
    assert advances(schedule(1000, 10)) == 3636
    assert optimal_advances(10, 1) == 45  # one slot: n (n - 1) / 2
    assert optimal_advances(1000, 1000) == 999  # every carry stored: one forward sweep


def test_plan_policies() -> None:
    every = plan(100, 800, None, None, "scan")
    assert (every.slots, every.advances, every.bytes_held) == (100, 99, 80_000)
    k = plan(100, 800, 4, None, "scan")
    assert k.slots == 4 and k.peak_carries == 6 and k.advances == optimal_advances(100, 4)
    assert k.recompute_factor == pytest.approx(optimal_advances(100, 4) / 100)
    auto = plan(100, 800, "auto", 10 * 800, "scan")
    assert auto.slots == 8 and auto.peak_carries * 800 <= 10 * 800
    assert plan(100, 800, "auto", 10**9, "scan").slots == 100


@pytest.mark.parametrize(
    ("checkpoint", "budget", "words"),
    [
        (0, None, "K >= 1"),
        (-3, None, "K >= 1"),
        ("some", None, "unknown checkpoint policy"),
        (2.5, None, "unknown checkpoint policy"),
        (True, None, "unknown checkpoint policy"),
        ("auto", 2000, "cannot hold 3 carries"),
    ],
)
def test_bad_policies(checkpoint: object, budget: int | None, words: str) -> None:
    with pytest.raises(ContractError, match=words):
        plan(10, 800, checkpoint, budget, "scan")  # type: ignore[arg-type]

"""Reachability between the groups of a kernel DAG while fusion merges them.

Assumes: the DAG is acyclic, and each merge joins two groups that either have no path
between them (horizontal fusion) or are joined by edges only (vertical fusion with no
detour through a third group), so the merged DAG stays acyclic.
Guarantees: `Reachability.connected` and `Reachability.detour` answer for the merged
DAG at every step, from bitmasks over the original groups updated once per merge,
instead of one graph search per candidate pair (fusion asks about every pair).
"""

from __future__ import annotations

from collections.abc import Iterable

import networkx as nx


class Reachability:
    """For each live group: bitmasks of its descendants (``down``), its ancestors (``up``)
    and the original groups merged into it (``members``); ids are the DAG's node ids."""

    def __init__(self, dag: nx.DiGraph) -> None:
        order = list(nx.topological_sort(dag))
        self.members = {gid: 1 << k for k, gid in enumerate(order)}
        self._live = list(order)  # original group k -> the live group that holds it
        self.down: dict[str, int] = {}
        for gid in reversed(order):
            self.down[gid] = self._closure(self.down, dag.successors(gid))
        self.up: dict[str, int] = {}
        for gid in order:
            self.up[gid] = self._closure(self.up, dag.predecessors(gid))

    def _closure(self, known: dict[str, int], neighbours: Iterable[str]) -> int:
        out = 0
        for n in neighbours:
            out |= self.members[n] | known[n]
        return out

    def connected(self, a: str, b: str) -> bool:
        """Is there a path from ``a`` to ``b`` or from ``b`` to ``a``?"""
        return bool(self.down[a] & self.members[b] or self.down[b] & self.members[a])

    def detour(self, a: str, b: str) -> bool:
        """Is there a path from ``a`` to ``b`` through some third group?"""
        return bool(self.down[a] & self.up[b])

    def merge(self, a: str, b: str) -> None:
        """Group ``b`` joins group ``a`` (the merged group keeps id ``a``).

        Only the groups above exactly one of ``a`` and ``b`` gain descendants (a group above
        both already reaches both and all below them), and only those below exactly one
        gain ancestors: the update visits those, not every live group, so a chain's merges
        of neighbours cost no more than the bitmask operations themselves."""
        b_members = self.members.pop(b)
        members = self.members[a] | b_members
        down_a, down_b, up_a, up_b = self.down[a], self.down.pop(b), self.up[a], self.up.pop(b)
        down = (down_a | down_b) & ~members
        up = (up_a | up_b) & ~members
        self.members[a], self.down[a], self.up[a] = members, down, up
        for k in _bits(b_members):
            self._live[k] = a
        for gid in self._groups((up_a ^ up_b) & ~members):
            self.down[gid] |= members | down
        for gid in self._groups((down_a ^ down_b) & ~members):
            self.up[gid] |= members | up

    def _groups(self, mask: int) -> set[str]:
        """The live groups holding the original groups of ``mask``."""
        return {self._live[k] for k in _bits(mask)}


def _bits(mask: int) -> list[int]:
    """The indices of the set bits of ``mask``."""
    out = []
    while mask:
        low = mask & -mask
        out.append(low.bit_length() - 1)
        mask ^= low
    return out

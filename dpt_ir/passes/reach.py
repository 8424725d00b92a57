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
        """Group ``b`` joins group ``a`` (the merged group keeps id ``a``)."""
        members = self.members[a] | self.members.pop(b)
        down = (self.down[a] | self.down.pop(b)) & ~members
        up = (self.up[a] | self.up.pop(b)) & ~members
        self.members[a], self.down[a], self.up[a] = members, down, up
        for gid, bits in self.members.items():
            if bits & up:
                self.down[gid] |= members | down
            elif bits & down:
                self.up[gid] |= members | up

"""`Reachability` against networkx on the contracted DAG, over random DAGs and random
valid merges (horizontal: no path between the two; vertical: an edge and no detour)."""

from __future__ import annotations

import random

import networkx as nx

from dpt_ir.passes.reach import Reachability


def _random_dag(rng: random.Random, n: int) -> nx.DiGraph:
    dag = nx.DiGraph()
    dag.add_nodes_from(f"g{k}" for k in range(n))
    dag.add_edges_from((f"g{a}", f"g{b}") for a in range(n) for b in range(a + 1, n) if rng.random() < 0.15)
    return dag


def _has_detour(dag: nx.DiGraph, a: str, b: str) -> bool:
    return any(nx.has_path(dag, c, b) for c in dag.successors(a) if c != b)


def test_reachability_matches_networkx_after_every_merge() -> None:
    rng = random.Random(0)
    merges = 0
    for _ in range(30):
        dag = _random_dag(rng, rng.randint(2, 14))
        reach = Reachability(dag)
        while dag.number_of_nodes() > 1:
            live = list(dag.nodes)
            for a in live:
                down = nx.descendants(dag, a)
                for b in live:
                    if a != b:
                        assert reach.connected(a, b) == (b in down or a in nx.descendants(dag, b))
                        assert reach.detour(a, b) == (b in down and _has_detour(dag, a, b))
            pairs = [(a, b) for a in live for b in live if a != b and not reach.connected(a, b)]
            pairs += [(a, b) for a, b in dag.edges if not reach.detour(a, b)]
            if not pairs:
                break
            a, b = rng.choice(pairs)
            reach.merge(a, b)
            dag = nx.contracted_nodes(dag, a, b, self_loops=False)
            merges += 1
    assert merges > 150

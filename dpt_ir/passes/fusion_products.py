"""Fused epilogues of matrix products: a pointwise kernel that reads a product's result
elementwise runs inside the product's kernel, on each output tile as it is finished.

Assumes: the groups left by `fusion_groups.merge_epilogues` (the last merge: a pointwise
consumer that a reduction, a sibling or a chain took stays where it is, so this merge only
takes kernels that would otherwise run alone), over a graph whose nodes are tagged with their
phase.
Guarantees: a contraction group of at most ``product_epilogues`` output elements (the target's
choice, `Target.product_epilogues`) absorbs at most one pointwise group, of the same phase, not
pinned, iterating over the product's output shape, made only of elementwise ops and single-read
views (no stencil, gather, fold or per-axis view such as a pad, whose loop nests the product's
drivers do not run), and reading
the product, and whatever it computes from it, only at its own index
(`fusion_groups.read_at_own_index`); no other group lies on a path between the two, so the
group DAG stays acyclic. The fused group keeps kind ``contraction``; the absorbed roots are its
``epilogue``. The product itself stays a written value of the fused kernel
(`fusion._annotate`): the epilogue reads it back from cache, right after its tile is stored, in
the same order of operations as its own kernel would (`dpt_ir.backends.cxx.contraction`), so
the bits are those of the unfused program.
"""

from __future__ import annotations

import functools

from dpt_ir.ir import traits
from dpt_ir.ir.graph import Graph
from dpt_ir.passes.fusion_groups import Group, contract, first_successor, group_dag, read_at_own_index


def _fits(graph: Graph, product: Group, largest: int | None, ep: Group) -> bool:
    """Can ``ep`` run on ``product``'s output tiles? (the module docstring's conditions, but
    the path one)"""
    if product.kind != "contraction" or product.epilogue or ep.kind != "pointwise":
        return False
    if ep.phase != product.phase or ep.pinned or ep.epilogue:
        return False
    (root,) = product.roots
    if ep.space != graph.types[root].shape or (largest is not None and graph.types[root].size > largest):
        return False
    for name in ep.nodes:
        node = graph.node_map[name]
        if traits.multi_read(node) or node.opdef.data_dependent_reads or node.opdef.axis_images is not None:
            return False  # a stencil, gather or per-axis view (a pad): its own kernel's loop nest
        if node.opdef.kind not in ("elementwise", "shape"):
            return False
    return read_at_own_index(graph, {root}, ep)


def merge_product_epilogues(graph: Graph, groups: list[Group], largest: int | None = None) -> list[Group]:
    """Fuse each contraction group of at most ``largest`` output elements (None: any) with its
    first successor (in list order) that fits as its epilogue (`_fits`) with no detour through
    another group. One pass: a product takes one epilogue, and a merge changes no other
    candidate pair's answer."""
    dag = group_dag(graph, groups)
    position = {g.id: k for k, g in enumerate(groups)}
    by_id = {g.id: g for g in groups}
    gone: set[str] = set()
    fused: dict[str, Group] = {}
    for product in groups:
        if product.kind != "contraction":
            continue
        # An absorbed group left the DAG (`contract`), so no later product sees it.
        eid = first_successor(dag, product.id, by_id, position, functools.partial(_fits, graph, product, largest))
        if eid is None:
            continue
        ep = by_id[eid]
        fused[product.id] = Group(
            product.id, product.phase, "contraction", product.space, (), product.roots + ep.roots,
            product.nodes | ep.nodes, list(ep.roots),
        )  # fmt: skip
        gone.add(eid)
        contract(dag, product.id, eid)
    return [fused.get(g.id, g) for g in groups if g.id not in gone]


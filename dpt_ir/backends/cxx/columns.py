"""C++ drivers of reductions over leading or middle axes: per-column accumulation.

Assumes: a `Nest` whose ``columns`` is (P, R, M, C): the space is P kept x R reduced x M
kept elements x C kept, contiguous columns; output ``o = (p * M + m) * C + c`` reduces the
elements ``(p, r, m, c)`` over ``r``; the element function ``elem<P, W>(.., i, j, rb, ..)``
of `dpt_ir.backends.cxx.emit` evaluates element ``i = row * C + c`` with inner counter
``j = c`` and the row bases of ``row = (p * R + r) * M + m`` (for non-adjacent reduced axes
P = 1 and ``row`` is the nest's row map of (m, r): `rowmap`). Guarantees:

- Every column folds its R elements in order ``r = 0 .. R - 1`` into lane 0 of its lane
  template (`CxxReduce`), the other 7 lanes left at their initial values (the template's
  identity), then merges the 8 lanes in the template's fixed tree: on the CPU and on CUDA,
  for any thread count, a column's result is the same bits.
- CPU: tasks ``t`` are (p, m, a block of `Target.block` columns), a partition fixed by the shape; per
  row the element loop fills a block buffer (``DP_VEC_LOOP``, as `drivers`; an input read as it
  is, `ElementWriter.direct`, is folded from its array instead) and an update
  loop over the block's columns folds it into per-column accumulators (float64 for float
  sums: ``acc[c] += x[r][c]``), which vectorises across columns and carries nothing between
  columns. CUDA: one thread per output column, sequential over the reduced rows.
- Pointwise outputs of the group are written on the last pass only (``W``).
"""

from __future__ import annotations

from dpt_ir.backends.base import Target
from dpt_ir.backends.cxx.drivers import (
    DriverSpec,
    Layout,
    buffered,
    c_min,
    cpu_block,
    cuda_element,
    driver_pair,
    row_bases,
    status_stores,
    subst,
)
from dpt_ir.backends.cxx.nest import Nest


def layout(nest: Nest, target: Target) -> Layout:
    """CPU: tasks of (p, m, a block of `Target.block` columns: one element block per row);
    CUDA: one thread per output column."""
    assert nest.columns is not None
    p, _, m, c = nest.columns
    cols = target.block
    return Layout(p * m * -(-c // cols), cols) if target.kind == "cpu" else Layout(p * m * c, 1)


def _column_subst(nest: Nest, q: int, k: str) -> dict[str, str]:
    """A template's placeholders in the CPU driver: lane slot and state of column ``k``."""
    t, out = nest.templates[nest.roots[q]], subst(nest, q)
    for name, _ in t.state:
        out[f"p_{name}"] = f"cs{q}_{name}[{k}]"
    for lp in t.passes:
        for name, _, _ in lp.lanes:
            out[f"a_{name}"] = f"ca{q}_{name}[{k}]"
    return out


def _merge_column(nest: Nest, q: int, p: int) -> list[str]:
    """Each column's lane 0 (the others at their initial values) merged into its state."""
    lp = nest.templates[nest.roots[q]].passes[p]
    lines = ["for (int k = 0; k < nc; ++k) {"]
    for name, ty, init in lp.lanes:
        lines.append(f"{ty} ln{q}_{name}[8]; ln{q}_{name}[0] = ca{q}_{name}[k];")
        lines.append(f"for (int l = 1; l < 8; ++l) ln{q}_{name}[l] = {init};")
    return [*lines, lp.merge.format(**_column_subst(nest, q, "k")), "}"]


def _passes(nest: Nest) -> list[tuple[bool, list[int]]]:
    """Per pass: whether it is the last (stores written), and the roots it folds."""
    n = max(len(t.passes) for t in nest.templates.values())
    return [(p == n - 1, [q for q, r in enumerate(nest.roots) if p < len(nest.templates[r].passes)]) for p in range(n)]


def _row(nest: Nest) -> list[str]:
    """``row``: the row of reduced row ``rr`` of column group ``pm`` = (p, m): ``(p R + rr) M +
    m`` for one reduced block, through the row map for non-adjacent axes (`rowmap`)."""
    assert nest.columns is not None
    _, rows, mid, _ = nest.columns
    if nest.row_map is not None:
        return nest.row_map.statements("row", "pm", "rr")
    return [f"const {nest.index} row = ({nest.widen('p')} * {rows} + rr) * {mid} + m;"]


def _cpu(spec: DriverSpec) -> list[str]:
    """Task ``t``: a block of `Target.block` columns (`layout`), row after row; a root in
    ``spec.direct`` folds its parameter's row itself, the others their block buffer."""
    nest, x_types, direct, nf = spec.nest, spec.x_types, spec.direct, spec.nf
    assert nest.columns is not None
    _, rows, mid, cols = nest.columns
    width, ix = spec.target.block, nest.index
    blocks = -(-cols // width)
    body = [
        f"bool fl[{nf}] = {{false}};",
        f"const {ix} pm = t / {blocks}, clo = (t - pm * {blocks}) * {width}, p = pm / {mid}, m = pm - p * {mid};",
        f"const {ix} chi = {c_min(f'clo + {width}', cols)}, nc = chi - clo;",
    ]
    for q, root in enumerate(nest.roots):
        body += [f"{ty} cs{q}_{name}[{width}];" for name, ty in nest.templates[root].state]
    computed = buffered(nest, direct)
    ys = [f"buf{q}[j - jb]" for q in computed]
    for p, (last, active) in enumerate(_passes(nest)):
        for q in active:
            for name, ty, init in nest.templates[nest.roots[q]].passes[p].lanes:
                body.append(f"{ty} ca{q}_{name}[{width}]; for (int k = 0; k < nc; ++k) ca{q}_{name}[k] = {init};")
        body += [f"for (int rr = 0; rr < {rows}; ++rr) {{", *_row(nest)]
        body += [*row_bases(nest, "row"), f"const {ix} jb = clo, je = chi;"]
        body += [f"{x_types[q]} buf{q}[{width}];" for q in computed]
        w = "true" if last else "false"
        body += cpu_block(spec, w, f"row * {cols} + j", ys)
        for q in active:
            update = nest.templates[nest.roots[q]].passes[p].inlined().format(**_column_subst(nest, q, "k"))
            x = f"{direct[q]}[row * {cols} + clo + k]" if q in direct else f"buf{q}[k]"
            body.append(f"DP_VEC_LOOP for (int k = 0; k < nc; ++k) {{ const {x_types[q]} x = {x};")
            body.append(f"const int r = rr; (void)r; {update} }}")
        body.append("}")
        for q in active:
            body += _merge_column(nest, q, p)
    body.append(f"for (int k = 0; k < nc; ++k) {{ const {ix} o = pm * {cols} + clo + k;")
    for q, root in enumerate(nest.roots):
        body += [f"const {ty} s{q}_{name} = cs{q}_{name}[k];" for name, ty in nest.templates[root].state]
    return [*body, *spec.finish, "}"]


def _cuda(spec: DriverSpec) -> list[str]:
    """Thread ``t``: output column ``o = t``, its reduced rows in order."""
    nest, x_types, direct, nf = spec.nest, spec.x_types, spec.direct, spec.nf
    assert nest.columns is not None
    _, rows, mid, cols = nest.columns
    ix = nest.index
    body = [f"bool fl[{nf}] = {{false}};", f"const {ix} o = t, pm = o / {cols}, c = o - pm * {cols};"]
    body.append(f"const {ix} p = pm / {mid}, m = pm - p * {mid};")
    computed = buffered(nest, direct)
    ys = [f"y{q}" for q in computed]
    for q, root in enumerate(nest.roots):
        body += [f"{ty} s{q}_{name};" for name, ty in nest.templates[root].state]
    for p, (last, active) in enumerate(_passes(nest)):
        for q in active:
            for name, ty, init in nest.templates[nest.roots[q]].passes[p].lanes:
                body.append(f"{ty} ln{q}_{name}[8]; for (int l = 0; l < 8; ++l) ln{q}_{name}[l] = {init};")
        body += [f"for (int rr = 0; rr < {rows}; ++rr) {{", *_row(nest)]
        body += [*row_bases(nest, "row"), *(f"{x_types[q]} y{q};" for q in computed)]
        body += cuda_element(spec, "true" if last else "false", f"row * {cols} + c", "c", ys)
        for q in active:
            update = nest.templates[nest.roots[q]].passes[p].inlined().format(**subst(nest, q))
            x = f"{direct[q]}[row * {cols} + c]" if q in direct else f"y{q}"
            body.append(f"{{ const int l = 0; const {x_types[q]} x = {x}; const int r = rr; (void)r; {update} }}")
        body.append("}")
        for q in active:
            body.append(nest.templates[nest.roots[q]].passes[p].merge.format(**subst(nest, q)))
    return [*body, *spec.finish]


def column_drivers(spec: DriverSpec) -> str:
    """The CPU and CUDA drivers of a column reduction (the CPU's column blocks: the target's
    `Target.block`); ``spec.finish``: statements finalizing and storing output ``o`` from the
    states ``s<q>_<name>`` (as `drivers.reduction_drivers`); ``spec.direct``: as there, the
    roots whose input is a parameter read at the element (`ElementWriter.direct`)."""
    return driver_pair(spec.sig, [*_cpu(spec), *status_stores(spec)], [*_cuda(spec), *status_stores(spec)])

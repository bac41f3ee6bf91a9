"""The program of a product recipe with a component axis (``components: {index: k, size: K}``) in numpy.

The derivation is made once for a generic component k; here every quantity with one value per component (the
IR's ``components["carried"]``) becomes an array with a leading component axis: (K, ...) for a global quantity
and (K, N) for a per-row one (each component's rows contiguous; the local outputs are returned as (N, K), like
scikit-learn's responsibilities).  Consecutive statements that compute such quantities run in a
loop over the components, each on the component's slices (``m = m_all[k]``) with the printers of a plain factorized
recipe, and stack their results; a statement that sums over the components (ComponentSum, ComponentLogSumExp)
runs on the whole arrays.  The per-row work inside a loop is vectorized over the rows (einsum over the matrix
chains, contracted in the best order: ``optimize=True``), so the loop costs K Python iterations, not N K.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import CodegenError
from blr_derive.core.nodes import ComponentLogSumExp, ComponentSum

REDUCTIONS = (ComponentSum, ComponentLogSumExp)


def _all(sym):
    """The symbol of the whole array of a per-component quantity (``m`` → ``m_all``)."""
    name = f"{sym.name}_all"
    return sp.MatrixSymbol(name, *sym.shape) if isinstance(sym, sp.MatrixSymbol) else sp.Symbol(name)


def _symbols(e):
    return e.free_symbols | e.atoms(sp.MatrixSymbol)


def lower(ir, pr, rp):
    """(lines of the step's program, [(output name, printed value)]) for ``ir`` with a component axis; ``pr``
    prints global expressions, ``rp`` (a RowBatchPrinter) per-row ones and plate sums."""
    comp = ir.components
    carried, rows = set(comp["carried"]), set(comp["rows"])
    k, K = comp["index"], comp["size"]
    for name in carried:
        if f"{name}_all" in carried or name == k:
            raise CodegenError(f"the name '{name}_all' is taken: rename '{name}'")
    lines = [f"{name}_all = {name}" for name in comp["state"]]
    have = set(comp["state"])                       # per-component arrays available as <name>_all

    def printed(kind, e):
        if kind == "row":
            return rp.doprint(e)
        if kind == "stat":
            return rp.plate_sum(e)
        return pr(e)

    def segments(stmts):
        """stmts: [(kind, symbol, expr)] in order; consecutive carried statements share one loop."""
        i = 0
        while i < len(stmts):
            if str(stmts[i][1]) not in carried:
                kind, s, e = stmts[i]
                outside = e.xreplace({r: sp.Dummy() for r in e.atoms(*REDUCTIONS)})
                if {str(x) for x in _symbols(outside)} & carried:
                    raise CodegenError(f"{s} mixes values per component and values summed over them: {e}")
                whole = {x: _all(x) for x in _symbols(e) if str(x) in carried}
                lines.append(f"{pr(s)} = {printed(kind, e.xreplace(whole))}")
                i += 1
                continue
            j = i
            while j < len(stmts) and str(stmts[j][1]) in carried:
                j += 1
            group = stmts[i:j]
            defined = {str(s) for _, s, _ in group}
            reads = sorted({str(x) for _, _, e in group for x in _symbols(e)} & carried & have - defined)
            lines.extend(f"{str(s)}_all = []" for _, s, _ in group)
            lines.append(f"for {k} in range({K}):")
            lines.extend(f"    {r} = {r}_all[{k}]" for r in reads)
            for kind, s, e in group:
                lines.append(f"    {pr(s)} = {printed(kind, e)}")
                value = f"numpy.broadcast_to({pr(s)}, (n_rows,))" if str(s) in rows else pr(s)
                lines.append(f"    {pr(s)}_all.append({value})")
            for _, s, _ in group:
                lines.append(f"{pr(s)}_all = numpy.stack({pr(s)}_all)")
            have.update(defined)
            i = j

    counter = [0]

    def split(stmts):
        """A sum over the components inside a per-component statement (ψ(Σ_j a_j) in ψ(a_k) − ψ(Σ_j a_j)) becomes a
        statement of its own before it, on the whole arrays."""
        out = []
        for kind, s, e in stmts:
            if str(s) in carried and e.has(*REDUCTIONS):
                reps = {}
                for r in sorted(e.atoms(*REDUCTIONS), key=str):
                    counter[0] += 1
                    t = sp.Symbol(f"_ksum{counter[0]}", real=True)
                    rkind = "row" if {str(x) for x in _symbols(r)} & rows else ("global" if kind == "stat" else kind)
                    out.append((rkind, t, r))
                    reps[r] = t
                e = e.xreplace(reps)
            out.append((kind, s, e))
        return out

    def run(stmts):
        segments(split(stmts))

    run([("global", s, e) for s, e in ir.prelude + ir.pre_loop])
    if ir.plate is not None:
        lines.append(f"n_rows = {ir.plate['data'][0][0]}_rows.shape[0]")
        lines.extend(f"{name} = {name}_rows" for name, _, _, _ in ir.plate["data"])
        run([("row", s, e) for s, e in ir.local_assign])
        for name, sym in ir.plate["local_outputs"]:
            lines.append(f"{name}_rows = {pr(sym)}_all.T" if str(sym) in carried
                         else f"{name}_rows = numpy.broadcast_to({pr(sym)}, (n_rows,)).copy()")
        run([("stat", s, e) for s, e in ir.stats])
    if ir.scale is not None:
        run([("global", ir.scale[0], ir.scale[1])])
    run([("global", s, e) for s, e in ir.assignments])
    returns = [(name, f"{pr(sym)}_all" if str(sym) in carried else pr(sym)) for name, sym in ir.outputs]
    return lines, returns

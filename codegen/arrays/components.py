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


class _Program:
    """The lines of a step with a component axis, written statement by statement (see the module docstring)."""

    def __init__(self, ir, pr, rp, xp="numpy"):
        comp = ir.components
        self.pr, self.rp, self.xp = pr, rp, xp
        self.carried, self.rows = set(comp["carried"]), set(comp["rows"])
        self.k, self.K = comp["index"], comp["size"]
        for name in self.carried:
            if f"{name}_all" in self.carried or name == self.k:
                raise CodegenError(f"the name '{name}_all' is taken: rename '{name}'")
        self.lines = [f"{name}_all = {name}" for name in comp["state"]]
        self.have = set(comp["state"])              # per-component arrays available as <name>_all
        self.sums = 0

    def printed(self, kind, e):
        if kind == "row":
            return self.rp.doprint(e)
        if kind == "stat":
            return self.rp.plate_sum(e)
        return self.pr(e)

    def split(self, stmts):
        """A sum over the components inside a per-component statement (ψ(Σ_j a_j) in ψ(a_k) − ψ(Σ_j a_j)) becomes a
        statement of its own before it, on the whole arrays."""
        out = []
        for kind, s, e in stmts:
            if str(s) in self.carried and e.has(*REDUCTIONS):
                reps = {}
                for r in sorted(e.atoms(*REDUCTIONS), key=str):
                    self.sums += 1
                    t = sp.Symbol(f"_ksum{self.sums}", real=True)
                    row = {str(x) for x in _symbols(r)} & self.rows
                    out.append(("row" if row else ("global" if kind == "stat" else kind), t, r))
                    reps[r] = t
                e = e.xreplace(reps)
            out.append((kind, s, e))
        return out

    def whole(self, kind, s, e):
        """A statement without the component axis: its sums over the components read the whole arrays."""
        outside = e.xreplace({r: sp.Dummy() for r in e.atoms(*REDUCTIONS)})
        if {str(x) for x in _symbols(outside)} & self.carried:
            raise CodegenError(f"{s} mixes values per component and values summed over them: {e}")
        arrays = {x: _all(x) for x in _symbols(e) if str(x) in self.carried}
        self.lines.append(f"{self.pr(s)} = {self.printed(kind, e.xreplace(arrays))}")

    def loop(self, group):
        """Consecutive per-component statements: one loop over the components, each on the component's slices."""
        pr, k = self.pr, self.k
        defined = {str(s) for _, s, _ in group}
        reads = sorted({str(x) for _, _, e in group for x in _symbols(e)} & self.carried & self.have - defined)
        self.lines.extend(f"{str(s)}_all = []" for _, s, _ in group)
        self.lines.append(f"for {k} in range({self.K}):")
        self.lines.extend(f"    {r} = {r}_all[{k}]" for r in reads)
        for kind, s, e in group:
            self.lines.append(f"    {pr(s)} = {self.printed(kind, e)}")
            value = f"{self.xp}.broadcast_to({pr(s)}, (n_rows,))" if str(s) in self.rows else pr(s)
            self.lines.append(f"    {pr(s)}_all.append({value})")
        self.lines.extend(f"{pr(s)}_all = {self.xp}.stack({pr(s)}_all)" for _, s, _ in group)
        self.have.update(defined)

    def run(self, stmts):
        """stmts: [(kind, symbol, expr)] in order; consecutive carried statements share one loop."""
        stmts = self.split(stmts)
        i = 0
        while i < len(stmts):
            j = i
            while j < len(stmts) and str(stmts[j][1]) in self.carried:
                j += 1
            if j == i:
                self.whole(*stmts[i])
                i += 1
            else:
                self.loop(stmts[i:j])
                i = j


def lower(ir, pr, rp, xp="numpy"):
    """(lines of the step's program, [(output name, printed value)]) for ``ir`` with a component axis; ``pr``
    prints global expressions, ``rp`` (a RowBatchPrinter) per-row ones and plate sums; ``xp`` names the array
    module (``numpy``; ``jnp`` for the jax target)."""
    prog = _Program(ir, pr, rp, xp)
    prog.run([("global", s, e) for s, e in ir.prelude + ir.pre_loop])
    if ir.plate is not None:
        prog.lines.append(f"n_rows = {ir.plate['data'][0][0]}_rows.shape[0]")
        prog.lines.extend(f"{name} = {name}_rows" for name, _, _, _ in ir.plate["data"])
        prog.run([("row", s, e) for s, e in ir.local_assign])
        for name, sym in ir.plate["local_outputs"]:
            prog.lines.append(f"{name}_rows = {pr(sym)}_all.T" if str(sym) in prog.carried
                              else f"{name}_rows = {xp}.broadcast_to({pr(sym)}, (n_rows,)).copy()")
        prog.run([("stat", s, e) for s, e in ir.stats])
    if ir.scale is not None:
        prog.run([("global", ir.scale[0], ir.scale[1])])
    prog.run([("global", s, e) for s, e in ir.assignments])
    returns = [(name, f"{pr(sym)}_all" if str(sym) in prog.carried else pr(sym)) for name, sym in ir.outputs]
    return prog.lines, returns

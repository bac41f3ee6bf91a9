"""``elementwise_exponential`` — evosax's xNES convention: the factor's step multiplies it entrywise by the entrywise
exponential of the local coordinate, F ← F ∘ exp(ρM), instead of by the matrix exponential, F ← F expm(ρM)
(``exponential_coordinates``; Wierstra et al., JMLR 2014, Algorithm 5).

Not a consequence of the BLR: it is what evosax 0.3.2's ``xNES._tell`` computes (``B * jnp.exp(0.5 * lr_B *
grad_B)`` and ``std * jnp.exp(...)``).  The two agree on the diagonal of a diagonal factor to first order in ρ
only where M is diagonal; a factor that starts diagonal stays diagonal (0 ∘ anything = 0), so the search
distribution stays axis-aligned and its correlations are never learned.

Recipe: ``elementwise_exponential: {param: A}`` (the factor named by ``exponential_coordinates``).
"""
from __future__ import annotations

import mpmath
import sympy as sp
from sympy.matrices.expressions.matexpr import MatrixExpr

from blr_derive.rules.base import Rule, register
from blr_derive.rules.exponential_coordinates import Expm
from blr_derive.rules.program import record, set_update, update_of


class HadamardExp(MatrixExpr):
    """F ∘ exp(X): the entrywise product of F with the entrywise exponential of X."""

    def __new__(cls, F, X):
        return sp.Basic.__new__(cls, F, X)

    @property
    def shape(self):
        return self.args[0].shape

    def _latex(self, printer):
        return r"%s \circ \exp\left(%s\right)" % (printer._print(self.args[0]), printer._print(self.args[1]))

    def _sympystr(self, printer):
        return f"{printer._print(self.args[0])} o exp({printer._print(self.args[1])})"

    def numeric_value(self, F, X):
        """F ∘ exp(X) of numeric matrices (mpmath matrices; ``families.symbolic.evaluate`` calls it)."""
        return mpmath.matrix([[F[i, j] * mpmath.exp(X[i, j]) for j in range(F.cols)] for i in range(F.rows)])


class ElementwiseExponential(Rule):
    name = "elementwise_exponential"
    kind = "convention"
    matrix_programs = True
    equation = "evosax 0.3.2 xNES (entrywise exp in place of Wierstra et al. (2014) Alg. 5's expm)"
    summary = "the factor's step F expm(ρM) taken entrywise, F ∘ exp(ρM) (evosax's xNES)"

    def rewrite(self, ctx):
        D = ctx.D
        pname = ctx.name("param")
        ctx.done()
        sym, expr = update_of(D, pname)
        found = [e for e in sp.preorder_traversal(expr) if isinstance(e, sp.MatMul) and
                 len(e.args) == 2 and isinstance(e.args[1], Expm)]
        if len(found) != 1:
            raise ctx.fail(f"the update of '{pname}' is not a step F expm(X) in exponential coordinates "
                           "(name the factor of 'exponential_coordinates')")
        F, X = found[0].args[0], found[0].args[1].args[0]
        new = expr.xreplace({found[0]: HadamardExp(F, X)})
        set_update(D, pname, new)
        record(ctx, "Entrywise exponential (evosax)",
               f"The step of {pname} multiplies it entrywise by exp(·) of the local coordinate instead of by the "
               "matrix exponential (evosax's xNES; a factor that starts diagonal stays diagonal).",
               [(sym, new, r"\leftarrow")])


register(ElementwiseExponential())

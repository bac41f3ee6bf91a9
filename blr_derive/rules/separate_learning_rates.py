"""Different learning rates for the mean and the scale (Eq. 36)."""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import record, set_update, update_of


class SeparateLearningRates(Rule):
    name = 'separate_learning_rates'
    kind = 'pass'
    matrix_programs = True          # rewrites the program by substitution only (any shapes)
    equation = 'Eq. 36'
    summary = 'different learning rates per parameter'

    def rewrite(self, ctx):
        D = ctx.D
        rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
        eqs = []
        for pname in list(ctx.args):
            # a family parameter, or the state that a coordinate rule put in its place (exponential_coordinates)
            if pname not in D.recipe.family.params and pname not in {n for n, _, _ in D.renamed.values()}:
                raise ctx.fail(f"'{pname}' is not a parameter of family '{D.recipe.family.name}'")
            rate = ctx.expr(pname)
            sym, expr = update_of(D, pname)
            new = expr.xreplace({rho: rate})
            set_update(D, pname, new)
            eqs.append((sym, new, r"\leftarrow"))
        ctx.done()
        record(ctx, "Separate learning rates", "Each named parameter gets its own learning rate (Eq. 36).", eqs)


register(SeparateLearningRates())

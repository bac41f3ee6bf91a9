"""AdamW: shrink the mean by ρδ outside the preconditioned step (the prior's natural gradient applied
to the mean only)."""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, mean_name, record, scalar, set_update, update_of


class DecoupledWeightDecay(Rule):
    name = 'decoupled_weight_decay'
    kind = 'convention'
    equation = 'AdamW convention'
    summary = 'm <- m - rho*delta*m outside the preconditioner'

    def rewrite(self, ctx):
        D = ctx.D
        delta = ctx.expr("coefficient")
        when = ctx.when()
        ctx.done()
        rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
        mean = mean_name(D)
        m = scalar(D.recipe.family.params[mean].symbol)
        sym, expr = update_of(D, mean)
        set_update(D, mean, cond(when, expr - rho * delta * m, expr))
        record(ctx, "Decoupled weight decay", "m ← m − ρδm added to the mean update (AdamW).",
                [(sym, expr - rho * delta * m, r"\leftarrow")])


register(DecoupledWeightDecay())

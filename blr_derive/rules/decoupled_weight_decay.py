"""AdamW: shrink the mean by ρδ outside the preconditioned step (the prior's natural gradient applied
to the mean only).

Optional ``form``: ``additive`` (default, m ← m − step − ρδm, torch.optim.AdamW) or ``multiplicative`` (the decay
after the step, m ← (m − step)(1 − ρδ), as pytorch-optimizer's optimizers apply it: they differ by ρδ·step)."""
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
        form = ctx.args.pop("form", "additive")
        ctx.done()
        if form not in ("additive", "multiplicative"):
            raise ctx.fail(f"form must be additive or multiplicative, got {form!r}")
        rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
        mean = mean_name(D)
        m = scalar(D.recipe.family.params[mean].symbol)
        sym, expr = update_of(D, mean)
        new = expr - rho * delta * m if form == "additive" else expr * (1 - rho * delta)
        set_update(D, mean, cond(when, new, expr))
        record(ctx, "Decoupled weight decay", "m ← m − ρδm added to the mean update (AdamW)." if form == "additive"
               else "m ← (m − step)(1 − ρδ): the mean shrunk after its step.", [(sym, new, r"\leftarrow")])


register(DecoupledWeightDecay())

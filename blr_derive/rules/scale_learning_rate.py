"""Multiply the learning rate of the mean by a factor (IVON's rescale_lr)."""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, mean_name, new_def, record, set_update, update_of


class ScaleLearningRate(Rule):
    name = 'scale_learning_rate'
    kind = 'convention'
    equation = 'IVON convention'
    summary = "multiply the mean's learning rate by a factor"

    def rewrite(self, ctx):
        D = ctx.D
        factor = ctx.expr("factor")
        when = ctx.when()
        ctx.done()
        rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
        mean = mean_name(D)
        sym, expr = update_of(D, mean)
        lr_eff = new_def(D, "lr_mean", cond(when, rho * factor, rho))
        set_update(D, mean, expr.xreplace({rho: lr_eff}))
        record(ctx, "Scaled learning rate", "", [(lr_eff, cond(when, rho * factor, rho))])


register(ScaleLearningRate())

"""``learning_rate_schedule`` — the BLR's learning rate ρ_t of Eq. 6 as a function of the step t,
ρ_t = ρ·factor(t), e.g. Adagrad's decay 1/(1 + (t − 1)·lr_decay).

Eq. 6 is stated with a step-dependent ρ_t; Sec. 5.3 uses the decreasing Robbins–Monro schedule
ρ_t = (t + τ)^−κ.  The rule multiplies the learning rate of one parameter's update (default: the mean) by
``factor``, an expression of the hyperparameters and of the step counter ``t`` (1 at the first step).  Unlike
``scale_learning_rate`` (IVON's constant rescaling) it names the step, so decaying schedules are written in the
recipe.

Arguments: ``factor``, ``param`` (default the mean), ``when`` (a condition; when false ρ is used as it is).
"""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, mean_name, new_def, record, set_update, step, update_of


class LearningRateSchedule(Rule):
    name = "learning_rate_schedule"
    kind = "pass"
    equation = "Eq. 6 (ρ_t); Sec. 5.3"
    summary = "ρ_t = ρ·factor(t): a learning rate that depends on the step"

    def rewrite(self, ctx):
        D = ctx.D
        step(D)                                   # the factor may name the step t
        factor = ctx.expr("factor")
        p = ctx.name("param", mean_name(D))
        when = ctx.when()
        ctx.done()
        rho = D.recipe.hyper_symbol(D.recipe.learning_rate)
        sym, expr = update_of(D, p)
        if not expr.has(rho):
            raise ctx.fail(f"the update of '{p}' does not use the learning rate {rho}")
        lr_t = new_def(D, "lr_t", cond(when, rho * factor, rho))
        set_update(D, p, expr.xreplace({rho: lr_t}))
        record(ctx, "Learning-rate schedule", f"The learning rate of {p} depends on the step (ρ_t of Eq. 6).",
                [(lr_t, cond(when, rho * factor, rho))])


register(LearningRateSchedule())

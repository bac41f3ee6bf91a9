"""``nesterov_lookahead`` — the preconditioned step uses the momentum one step ahead (Nesterov's look-ahead
of App. F, Eq. 77's average, in Dozat's bias-corrected form; a convention, not a BLR step).

EMA momentum (App. F, Eq. 77) averages the gradient, u_{t+1} = μu_t + (1 − μ)ĝ_t, and steps along u_{t+1}.
Nesterov's look-ahead steps instead along the average one step further, μu_{t+1} + (1 − μ)ĝ_t, and Dozat
(2016) corrects each term's bias separately:

    ũ = μ_{t+1}·u_{t+1}/(1 − Π_{k≤t+1} μ_k) + (1 − μ_t)·ĝ_t/(1 − Π_{k≤t} μ_k),

which replaces u_{t+1} in the mean update (the preconditioner is untouched: with Adam's scale this is NAdam).
μ and ĝ are read off the update of ``param`` (u ← μu + (1 − μ)ĝ, whatever earlier passes made of ĝ); with
``schedule`` the coefficient follows the schedule kept in that state by ``momentum_schedule`` (μ_t = P_{t+1}/P_t,
μ_{t+1} = μ_t at t + 1, Π_{k≤t} μ_k = P_{t+1}); without it μ is constant and Π_{k≤t} μ_k = μ^t.  Apply it to the
raw average (it corrects the bias itself, so not after ``debias`` of the same state).

Arguments: ``param`` (the momentum state), ``schedule`` (optional state of ``momentum_schedule``), ``when``.
"""
from __future__ import annotations

from blr_derive.rules.averages import moving_average, state_symbol
from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, mean_name, new_def, record, set_update, step, update_of


class NesterovLookahead(Rule):
    name = "nesterov_lookahead"
    kind = "convention"
    equation = "NAdam convention (Nesterov look-ahead of App. F, Eq. 77)"
    summary = "step along μu_{t+1} + (1 − μ)ĝ, each term bias-corrected (Dozat)"

    def rewrite(self, ctx):
        D = ctx.D
        p = ctx.name("param")
        sched = ctx.name("schedule") if "schedule" in ctx.args else None
        when = ctx.when()
        ctx.done()
        t = step(D)
        u_new, _, mu_const, g = moving_average(ctx, p)
        if ctx.view(p) != u_new:
            raise ctx.fail(f"'{p}' already enters the update through {ctx.view(p)}: apply nesterov_lookahead to the "
                           "raw average (it corrects the bias itself)")
        mean = mean_name(D)
        _, mean_expr = update_of(D, mean)
        if not mean_expr.has(u_new):
            raise ctx.fail(f"the mean update does not read '{p}' directly")
        if sched is None:
            mu, mu_next, prod, prod_next = mu_const, mu_const, mu_const ** t, mu_const ** (t + 1)
        else:
            prod_new, prod_expr = update_of(D, sched)
            prod_old = state_symbol(D, sched)
            mu = prod_expr / prod_old               # μ_t, the schedule's definition or an expression of t
            if mu.has(prod_old) or not prod_expr.has(prod_old):
                raise ctx.fail(f"'{sched}' is not a momentum schedule {sched} <- {sched}*rate(t)")
            rate = mu.xreplace(dict(D.defs))
            if not rate.free_symbols <= set(ctx.symbols().values()):
                raise ctx.fail(f"the schedule of '{sched}' is not an expression of the hyperparameters and t")
            mu_next = new_def(D, f"{sched}_rate_next", rate.xreplace({t: t + 1}))
            prod = prod_new
            prod_next = new_def(D, f"{sched}_next", prod_new * mu_next)
        look = mu_next * u_new / (1 - prod_next) + (1 - mu) * g / (1 - prod)
        u_look = new_def(D, f"{p}_nesterov", cond(when, look, u_new))
        set_update(D, mean, mean_expr.xreplace({u_new: u_look}))
        D.views.set(p, u_look)
        record(ctx, "Nesterov look-ahead", "The mean step uses the average one step ahead, each term divided by "
                "1 − the product of the momentum coefficients (Dozat's NAdam).", [(u_look, look)])


register(NesterovLookahead())

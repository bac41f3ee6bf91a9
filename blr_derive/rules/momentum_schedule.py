"""``momentum_schedule`` — a momentum coefficient that follows a schedule μ_t, kept as the running product
Π_{k≤t} μ_k that its bias corrections need (NAdam's "momentum cache", Dozat 2016; a convention, not a BLR step).

App. F's momentum (Eqs. 75, 77, 80) has a fixed coefficient γ.  Dozat's NAdam lets it vary with the step,
μ_t = β₁(1 − ½·0.96^{tψ}) in torch.optim.NAdam, and corrects the bias of the zero-initialised average by
1 − Π_{k≤t} μ_k instead of 1 − γ^t.  The rule adds that product as a state (initialised to 1):
P_{t+1} = P_t·rate(t), ``rate`` being an expression of the hyperparameters and of the step ``t`` (1 at the first
step).  It changes no other update by itself: rules that use the momentum one step ahead read the schedule from
this state (``nesterov_lookahead: {schedule: <state>}`` takes μ_t = P_{t+1}/P_t and μ_{t+1} = rate(t + 1)).

Arguments: ``rate`` (μ_t), ``state`` (default ``mu_product``).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import add_aux, new_def, record, step


class MomentumSchedule(Rule):
    name = "momentum_schedule"
    kind = "convention"
    equation = "NAdam convention (App. F momentum with a scheduled coefficient)"
    summary = "momentum coefficient μ_t on a schedule, with the running product Π μ_k as state"

    def rewrite(self, ctx):
        D = ctx.D
        step(D)                                   # the schedule names the step t
        rate = ctx.expr("rate")
        name = ctx.name("state", "mu_product")
        ctx.done()
        prod, prod_new = add_aux(ctx, name, sp.Integer(1), "running product of the momentum schedule")
        mu = new_def(D, f"{name}_rate", rate)         # μ_t: a host scalar, computed once per step
        D.updates.insert(0, (name, prod_new, prod * mu))
        D.views.set(name, prod_new)
        record(ctx, "Momentum schedule", "The momentum coefficient follows μ_t; its running product corrects the "
                "bias of averages started at zero (Dozat's NAdam).", [(mu, rate), (prod_new, prod * mu, r"\leftarrow")])


register(MomentumSchedule())

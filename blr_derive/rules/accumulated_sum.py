"""``accumulated_sum`` — a scale that sums its targets instead of averaging them (Eq. 37 with a decreasing
learning rate ρ_t = 1/(t + c), i.e. no forgetting; the posterior precision of Eq. 54).

Eq. 37 updates the scale as s_{t+1} = (1 − ρ_t)s_t + ρ_t h_t.  With the decreasing learning rate
ρ_t = 1/(t + c) (Robbins & Monro's schedule with κ = 1) the rescaled state S_t = (t − 1 + c)·s_t obeys
S_{t+1} = S_t + h_t: nothing is forgotten and S is the natural parameter of the posterior after t
observations, the prior's λ₀ = S_1 plus one message per step (Sec. 5.1, Eq. 54; the online-Newton /
exponential-weight updates at the end of Sec. 5.4).  The rule writes that sum: the update p ← a·p + (1 − a)·x of
``param`` (whatever earlier passes made of Eq. 37's h, e.g. the squared gradient of Eq. 38) becomes
p ← p + weight·x, and every other update keeps reading p_{t+1} (now the sum).  Adagrad's accumulator is this
sum of squared gradients started at ``initial_accumulator_value``.

Arguments: ``param`` (a state updated as an average), ``weight`` (default 1), ``when`` (a condition; when false,
the average is kept).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.averages import moving_average
from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, record, set_update, update_of


class AccumulatedSum(Rule):
    name = "accumulated_sum"
    kind = "pass"
    equation = "Eq. 37 with ρ_t = 1/(t + c); Eq. 54"
    summary = "p ← p + x: the scale sums its targets (a decreasing learning rate, no forgetting)"

    def rewrite(self, ctx):
        p = ctx.name("param")
        weight = ctx.expr("weight", sp.Integer(1))
        when = ctx.when()
        ctx.done()
        sym, old, _, x = moving_average(ctx, p)
        _, expr = update_of(ctx.D, p)
        total = old + weight * x
        set_update(ctx.D, p, cond(when, total, expr))
        record(ctx, "Accumulated sum", f"{p} sums what it averaged: Eq. 37 with the decreasing learning rate "
                f"ρ_t = 1/(t + c), rescaled by t + c (nothing is forgotten; the posterior precision of Eq. 54).",
                [(sym, cond(when, total, expr), r"\leftarrow")])


register(AccumulatedSum())

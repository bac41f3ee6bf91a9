"""Exponential-moving-average momentum of the gradient in the mean update (App. F, Eq. 77)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import add_aux, mean_name, record, replace


class EmaMomentum(Rule):
    name = 'ema_momentum'
    kind = 'pass'
    equation = 'App. F, Eq. 77'
    summary = 'exponential-moving-average momentum of the gradient'

    def rewrite(self, ctx):
        D = ctx.D
        rate = ctx.expr("rate")
        name = ctx.name("state", "u")
        ctx.done()
        mean = mean_name(D)
        g = ctx.view("grad")
        u, u_new = add_aux(ctx, name, sp.Integer(0), "exponential moving average of the gradient")
        replace(D, g, u_new, only=(mean,))
        D.updates.insert(0, (name, u_new, rate * u + (1 - rate) * g))
        D.views.set(name, u_new)
        D.views.grad = u_new       # later gradient passes act on what the mean update sees
        record(ctx, "Momentum by exponential smoothing", "The mean update uses an EMA of the gradient (Eq. 77).",
                [(u_new, rate * u + (1 - rate) * g, r"\leftarrow")])


register(EmaMomentum())

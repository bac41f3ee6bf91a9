"""Precondition with the variance of the gradient instead of its second moment (centered RMSprop)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import add_aux, cond, record, substitute_def


class Centered(Rule):
    name = 'centered'
    kind = 'convention'
    equation = 'centered RMSprop convention'
    summary = 'precondition with the gradient variance'

    def rewrite(self, ctx):
        D = ctx.D
        p = ctx.name("param")
        rate = ctx.expr("rate")
        when = ctx.when()
        name = ctx.name("state", "grad_avg")
        ctx.done()
        g = ctx.view("grad")
        ga, ga_new = add_aux(ctx, name, sp.Integer(0), "exponential moving average of the gradient")
        D.updates.insert(0, (name, ga_new, cond(when, rate * ga + (1 - rate) * g, ga)))
        v = ctx.view(p)
        c = substitute_def(D, f"{p}_centered", v, cond(when, v - ga_new**2, v), skip=(p, name))
        D.views.set(p, c)
        record(ctx, "Centering", "Subtract the squared running mean of the gradient from the scale.",
                [(c, cond(when, v - ga_new**2, v))])


register(Centered())

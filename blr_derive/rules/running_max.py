"""Precondition with the running maximum of the scale (AMSGrad's convention)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import add_aux, cond, record, substitute_def


class RunningMax(Rule):
    name = 'running_max'
    kind = 'convention'
    equation = 'AMSGrad convention'
    summary = 'precondition with the running maximum of the scale'

    def rewrite(self, ctx):
        D = ctx.D
        p = ctx.name("param")
        when = ctx.when()
        name = ctx.name("state", f"{p}_max")
        ctx.done()
        v = ctx.view(p)
        mx, mx_new = add_aux(ctx, name, sp.Integer(0), f"running maximum of {p}")
        D.updates.append((name, mx_new, cond(when, sp.Max(mx, v), mx)))
        used = substitute_def(D, f"{p}_used", v, cond(when, mx_new, v), skip=(p, name))
        D.views.set(p, used)
        record(ctx, "Running maximum", "The preconditioner uses max over time of the scale (AMSGrad).",
                [(mx_new, cond(when, sp.Max(mx, v), mx), r"\leftarrow")])


register(RunningMax())

"""Coupled weight decay: the prior R(θ) = δ/2 ||θ||² of Eq. 1 under the delta method adds δm to
the gradient and δ to the Hessian (Eq. 34 with R)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, mean_name, record, record_prior, scalar, substitute_def


class WeightDecay(Rule):
    name = 'weight_decay'
    kind = 'pass'
    equation = 'Eqs. 1, 34'
    summary = 'coupled weight decay: the prior δ‖θ‖²/2 adds δm to the gradient and δ to the Hessian'

    def rewrite(self, ctx):
        D = ctx.D
        delta = ctx.expr("coefficient")
        when = ctx.when()
        ctx.done()
        m = D.recipe.family.params[mean_name(D)].symbol
        record_prior(D, lambda theta: delta * theta**2 / 2, when)      # R(θ) of Eq. 1, for the objective
        g_old = D.views.grad
        # a zero coefficient (a runtime hyperparameter) skips the term: no work when weight decay is off
        active = sp.Ne(delta, 0) if not delta.is_number else None
        if when is not None:
            active = when if active is None else sp.And(when, active)
        value = cond(active, g_old + delta * scalar(m), g_old)
        gw = substitute_def(D, "g_wd", g_old, value)
        D.views.grad = gw
        eqs = [(gw, g_old + delta * scalar(m))]
        if D.views.hess is not None:
            h_old = D.views.hess
            hw = substitute_def(D, "h_wd", h_old, cond(when, h_old + delta, h_old))
            D.views.hess = hw
            eqs.append((hw, h_old + delta))
        record(ctx, "Weight decay as a Gaussian prior", "R(θ) = δ‖θ‖²/2 added to the loss (Eq. 1), through the delta method.",
                eqs)


register(WeightDecay())

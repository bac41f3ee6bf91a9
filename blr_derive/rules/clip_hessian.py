"""``clip_hessian`` — the Hessian estimate clipped elementwise to [−radius, radius] before the precision update (the
clipped Price estimate of EVON, Minut et al. 2026: the Bayes-duality slides' Algorithm 2, line 4, Ĥ ← clip(E ⊙ G°/V);
a Monte Carlo estimate of one sample can be far off, and one outlier would move the precision for ~1/(1 − β₂) steps).

Arguments: ``radius`` (an expression of hyperparameters and of the family's parameters, i.e. the state before the
update: a radius relative to the current precision, as the official EVON code's ±ratio·(h + ε), is written with the
parameter the recipe's later ``change_variable`` replaces), optional ``when``.  After the estimate it clips
(``price_estimator``, ``squared_gradient_hessian`` ...): an estimate listed after it would replace the clipped view.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, record, substitute_def
from blr_derive.core.exprparse import parse_expression


class ClipHessian(Rule):
    name = "clip_hessian"
    kind = "pass"
    equation = "Minut et al. (2026), the slides' Algorithm 2 line 4"
    summary = ("clip the Hessian estimate elementwise to [-radius, radius] before the precision update (radius: "
               "hyperparameters and the state)")

    def rewrite(self, ctx):
        D = ctx.D
        syms = {**ctx.symbols(), **{p.name: p.symbol for p in D.recipe.family.params.values()
                                    if not isinstance(p.symbol, sp.MatrixSymbol)}}
        if "radius" not in ctx.args:
            raise ctx.fail("missing argument 'radius'")
        try:
            radius = parse_expression(ctx.args.pop("radius"), syms, what="clip_hessian.radius",
                                      choices=ctx.r.choices())
        except SpecError as exc:
            raise exc.located(ctx.r.file, ctx.approx.line) from None
        when = ctx.when()
        ctx.done()
        h = D.views.hess
        if h is None:
            raise ctx.fail("the update has no Hessian estimate to clip")
        clipped = sp.Min(sp.Max(h, -radius), radius)
        new = substitute_def(D, "h_clipped", h, cond(when, clipped, h))
        D.views.hess = new
        D.indefinite.add(new)
        record(ctx, "Clipped Hessian estimate", "The estimate is clipped elementwise to [−r, r] before it enters the "
               "precision's update.", [(new, clipped)])


register(ClipHessian())

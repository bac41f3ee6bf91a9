"""``absolute_gradient_hessian`` — the Hessian replaced by the gradient's absolute value |ĝ| + ε (Adamax's
convention, not a BLR step).

Eq. 38 replaces the diagonal Hessian of Eq. 37 by the gradient magnitude ĝ∘ĝ (the Gauss–Newton approximation
of Eq. 45), and Eq. 36 takes absolute values of Hessian entries to keep the scale positive.  Adamax (Kingma &
Ba 2015, Sec. 7.1) instead feeds the scale the first power |ĝ|: a quantity with the units of a gradient, not of
a Hessian, that the scale then tracks with an infinity norm (``infinity_norm``) and uses without a square root.
This is the peer's choice, recorded as a convention.  ``eps`` is added to |ĝ| (torch.optim.Adamax adds it
before its maximum).

Arguments: ``eps`` (default 0), ``scale`` (default 1): Hessian ≈ scale·|ĝ| + eps.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import hessian_to_replace, is_stat, record, replace


class AbsoluteGradientHessian(Rule):
    name = "absolute_gradient_hessian"
    kind = "convention"
    equation = "Adamax convention (Eq. 38 with |ĝ| for ĝ∘ĝ)"
    summary = "Hessian ≈ |ĝ| + ε (the gradient's absolute value)"

    def rewrite(self, ctx):
        D = ctx.D
        eps = ctx.expr("eps", sp.Integer(0))
        scale = ctx.expr("scale", sp.Integer(1))
        ctx.done()
        h = hessian_to_replace(ctx)
        if D.sampling is not None and is_stat(D, h):
            raise ctx.fail("the Hessian is an average over samples; use squared_gradient_hessian or "
                           "price_estimator there")
        g = ctx.view("grad")
        value = scale * sp.Abs(g) + eps
        replace(D, h, value)
        D.views.hess = None
        record(ctx, "Absolute-gradient Hessian", "∇²ℓ ≈ |ĝ| + ε (Adamax's choice: the gradient magnitude of "
                "Eq. 38 to the first power).", [(h, value, r"\approx")])


register(AbsoluteGradientHessian())

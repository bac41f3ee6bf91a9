"""``hessian_damping`` — a constant γ added to the Hessian estimate only (Levenberg–Marquardt damping; the γ of
bSAM, Möllenhoff & Khan, ICLR 2023, Algorithm 1, official code optim.py line 166: s ← β₂s + (1 − β₂)(ĝ_s + γ + δ)).

Unlike a Gaussian prior (``weight_decay``, Eqs. 1, 34), which adds δm to the gradient and δ to the Hessian, the
damping changes the precision only: the precision update of Eq. 6 sees ∇²ℓ ≈ ĥ + γ, the mean's gradient is
unchanged.  It keeps the precision away from zero where the curvature estimate vanishes.

Arguments: ``value`` γ (an expression of hyperparameters), optional ``when``.
"""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import cond, record, substitute_def


class HessianDamping(Rule):
    name = "hessian_damping"
    kind = "pass"
    equation = "Levenberg–Marquardt damping; Möllenhoff & Khan (2023) Alg. 1 (γ)"
    summary = ("add a constant γ to the Hessian estimate only (not to the gradient); after an estimate that replaces "
               "the Hessian (squared_gradient_hessian, gauss_newton_hessian, ...), which would drop it")

    def rewrite(self, ctx):
        D = ctx.D
        gamma = ctx.expr("value")
        when = ctx.when()
        ctx.done()
        h = D.views.hess
        if h is None:
            raise ctx.fail("the update has no Hessian to damp")
        new = substitute_def(D, "h_damped", h, cond(when, h + gamma, h))
        D.views.hess = new
        D.views.damped_hess = new          # a later estimate that replaces the Hessian would drop γ
        record(ctx, "Damped Hessian", "A constant γ is added to the Hessian estimate (not to the gradient).",
               [(new, h + gamma)])


register(HessianDamping())

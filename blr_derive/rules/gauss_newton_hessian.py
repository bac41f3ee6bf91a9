"""Gauss–Newton Hessian (Eq. 45): the mean over the mini-batch of squared per-example gradients,
asked from an oracle ``ggn`` (at the mean under the delta method, at the samples under Monte Carlo)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import OracleCall, Rule, register
from blr_derive.rules.program import call_symbol, hessian_to_replace, is_stat, new_stat, record, replace, scalar


class GaussNewtonHessian(Rule):
    name = 'gauss_newton_hessian'
    kind = 'pass'
    equation = 'Eq. 45'
    summary = "diagonal Gauss-Newton Hessian from squared per-example gradients (oracle 'ggn')"

    def rewrite(self, ctx):
        D = ctx.D
        oracle = ctx.name("oracle", "ggn")
        ctx.done()
        h = hessian_to_replace(ctx)
        if D.sampling is not None and is_stat(D, h):
            k = call_symbol(D, oracle)
            est = new_stat(D, oracle, k)
        else:
            fam = D.recipe.family
            est = sp.Symbol(oracle, real=True)
            D.oracle_calls.append(OracleCall(est, oracle, scalar(fam.gaussian_mean),
                                   "mean over the mini-batch of squared per-example gradients (Gauss-Newton, Eq. 45)"))
        replace(D, h, est)
        D.views.hess = est
        record(ctx, "Gauss-Newton Hessian", "diag ∇²ℓ ≈ mean_i (∇ℓ_i)² over the mini-batch (Eq. 45).",
                [(h, est, r"\approx")])


register(GaussNewtonHessian())

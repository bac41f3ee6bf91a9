"""``gradient_magnitude_hessian`` — E_q[∇²ℓ] ≈ mean_k |ĝ_k| · c from the gradients at the samples of q
(Möllenhoff & Khan, "SAM as an Optimal Relaxation of Bayes", ICLR 2023, Algorithm 1: ĝ_s = √s·|ĝ|, official
code optim.py line 139 ``sqrt(s * g**2)``).

Price's theorem through Stein's lemma (Khan & Rue 2023, Eq. 11) gives E_q[∇²ℓ] = E_q[∇ℓ(θ)(θ − m)]/σ² =
E[ĝ_k ε_k]/σ with θ_k = m + σε_k (``price_estimator``).  Replacing the random sign and size of ε_k ĝ_k by the
gradient magnitude |ĝ_k| gives a positive estimate |ĝ_k|/σ, i.e. c = 1/σ; bSAM takes σ per example,
c = √s with s the per-example precision.  ``scale`` is c (it may read the state, e.g. ``sqrt(s/ess)`` when s is
the precision of q over N examples).

Arguments: ``scale`` (required).  The Hessian must be the average over samples (after ``monte_carlo``).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import call_symbol, hessian_to_replace, is_stat, new_stat, record, substitute_def
from blr_derive.rules.sharpness_aware import state_expr


class GradientMagnitudeHessian(Rule):
    name = "gradient_magnitude_hessian"
    kind = "pass"
    equation = "Möllenhoff & Khan (2023) Alg. 1; Eq. 11 (Price) with ε_k ĝ_k → |ĝ_k|"
    summary = "E_q[∇²ℓ] ≈ c · mean_k |ĝ_k| from the gradients at the samples (bSAM: c = √s per example)"

    def rewrite(self, ctx):
        D = ctx.D
        if "scale" not in ctx.args:
            raise ctx.fail("missing argument 'scale'")
        scale = state_expr(ctx, "scale", None)
        ctx.done()
        h = hessian_to_replace(ctx, "estimate")
        if D.sampling is None or D.sampling.draw == "point" or not is_stat(D, h):
            raise ctx.fail("needs gradients at samples of q: add 'monte_carlo' (and place it before the passes "
                           "that change the Hessian)")
        g_k = call_symbol(D, "grad")
        est = new_stat(D, "absg", sp.Abs(g_k))
        d = substitute_def(D, "h_mag", h, scale * est)
        D.views.hess = d
        record(ctx, "Gradient-magnitude Hessian at samples",
               "Price's estimator E[ĝ_k ε_k]/σ with ε_k ĝ_k replaced by the magnitude |ĝ_k|: a positive "
               "estimate c·mean_k |ĝ_k| (bSAM, Möllenhoff & Khan 2023, Alg. 1).",
               [(h, scale * est, r"\approx")])


register(GradientMagnitudeHessian())

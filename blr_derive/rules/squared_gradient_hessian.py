"""Replace the Hessian by the squared gradient (gradient magnitude, Eqs. 38 and 45)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import call_symbol, hessian_to_replace, is_stat, new_stat, record, substitute_def


class SquaredGradientHessian(Rule):
    name = 'squared_gradient_hessian'
    kind = 'pass'
    equation = 'Eqs. 38, 45'
    summary = 'Hessian ≈ squared gradient (gradient magnitude / Gauss-Newton)'

    def rewrite(self, ctx):
        D = ctx.D
        scale = ctx.expr("scale", sp.Integer(1))
        ctx.done()
        h = hessian_to_replace(ctx)
        if D.sampling is not None and is_stat(D, h):
            # at samples: the average of the squared per-sample gradients (Eq. 45 with weight perturbation);
            # the per-sample gradient is the statistic the gradient view averages (e.g. z·∇ℓ(θ̃) under dropout masks)
            g_k = next((e for a, e in D.sampling.stats if a == D.views.grad), None) or call_symbol(D, "grad")
            est = new_stat(D, "gsq", g_k**2)
            d = substitute_def(D, "h_gsq", h, scale * est)
            D.views.hess = d
            record(ctx, "Squared-gradient Hessian at samples", "∇²ℓ ≈ mean_k ĝ_k∘ĝ_k (Eqs. 38, 45).",
                    [(h, scale * est, r"\approx")])
            return
        g = ctx.view("grad")
        d = substitute_def(D, "h_gsq", h, scale * g**2)
        D.views.hess = d
        D.frozen.add(d)         # the square of this gradient: later rules add to the Hessian through the view
        record(ctx, "Squared-gradient Hessian", "∇²ℓ ≈ ĝ∘ĝ (Eq. 38; the Gauss–Newton/gradient-magnitude approximation of Eq. 45).",
                [(d, scale * g**2, r"\approx")])


register(SquaredGradientHessian())

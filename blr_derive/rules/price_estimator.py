"""E_q[∇²ℓ] ≈ mean_k ∇ℓ(θ_k)(θ_k − m)/σ² (Price's theorem via Stein's lemma, from gradients at samples)."""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.program import call_symbol, cond, hessian_to_replace, new_stat, record, substitute_def


class PriceEstimator(Rule):
    name = 'price_estimator'
    kind = 'pass'
    equation = "Eq. 11 (Price), Stein's lemma"
    summary = 'E_q[∇²ℓ] ≈ mean_k ∇ℓ(θ_k)(θ_k - m)/σ²: the reparameterization Hessian estimator from gradients at samples'

    def rewrite(self, ctx):
        D = ctx.D
        when = ctx.when()
        ctx.done()
        if D.sampling is None:
            raise ctx.fail("needs gradients at samples: add 'monte_carlo'")
        h = hessian_to_replace(ctx, "estimate")
        fam = D.recipe.family
        g_k = call_symbol(D, "grad")
        m = fam.gaussian_mean
        noise = D.sampling.theta_expr - m          # σε_k, exactly the perturbation that was drawn
        nxg = new_stat(D, "nxg", g_k * noise)
        est = nxg / fam.gaussian_cov
        new = cond(when, est, h)
        d = substitute_def(D, "h_price", h, new)
        D.views.hess = d
        D.indefinite.add(d)                        # a Monte Carlo estimate of a Hessian: of any sign
        record(ctx, "Price's reparameterization estimator",
                "E_q[∇²ℓ] = E_q[∇ℓ(θ)(θ − m)]/σ² (Stein's lemma), estimated from the gradients at the samples.",
                [(d, new)])


register(PriceEstimator())

"""``gauss_hermite`` — E_q[∇ℓ], E_q[∇²ℓ] of an explicit loss with sums over data of f(aᵀθ + b) (Sec. 5.4): Aᵀ E[f'],
Aᵀ diag(E[f'']) A, the one-dimensional Gaussian expectations by Gauss–Hermite quadrature (argument ``nodes``;
E[f''] in Stein's form E[f'(x)(x − η)]/σ², the exact variance derivative of the quadrature).  The derivation is
``blr_derive/rules/datasum.py``."""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.datasum import explicit_expectations
from blr_derive.rules.delta import needs_gaussian_moments, needs_gaussian_vector
from blr_derive.rules.gaussian import gaussian_natural_gradient


class GaussHermite(Rule):
    name = "gauss_hermite"
    kind = "expectation"
    equation = "Sec. 5.4; Eqs. 10-11 (Bonnet, Price)"
    summary = ("E_q[∇ℓ], E_q[∇²ℓ] of an explicit loss with sums over data of f(aᵀθ + b): Aᵀ E[f'], Aᵀ diag(E[f'']) A, "
               "the one-dimensional Gaussian expectations by Gauss-Hermite quadrature (argument 'nodes'; E[f''] in "
               "Stein's form E[f'(x)(x - η)]/σ², the exact variance derivative of the quadrature)")
    losses = ("explicit",)

    def check(self, ctx):
        if ctx.candidate != "single":
            return
        approx = ctx.approx(self.name)
        if ctx.recipe.loss_kind == "explicit":
            needs_gaussian_vector(ctx, approx)
            return
        needs_gaussian_moments(ctx, approx)
        raise ctx.fail("an abstract loss needs an expectation approximation for E_q[∇ℓ], E_q[∇²ℓ]: add 'delta' or "
                       "'monte_carlo'")

    def natural_gradient(self, ctx):
        ng, _, _ = gaussian_natural_gradient(ctx)
        return explicit_expectations(ctx.recipe, ctx.D, ng.grads, ng.Eg, ng.EH, ctx.mean_mu, ctx.cov_mu, ctx.sym)


register(GaussHermite())

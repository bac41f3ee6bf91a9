"""``reparameterization`` — natural gradient F(λ)⁻¹ E_u[∇ℓ(θ) ∂θ/∂λ] with θ = sampler(u; λ) (any family with a differentiable sampler) (Eq. 4; reparameterization through the sampler).  Derived in ``blr_derive/rules/sampling.py``."""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.sampling import check_sampler, sampled_natural_gradient


class Reparameterization(Rule):
    name = 'reparameterization'
    kind = "expectation"
    equation = 'Eq. 4; reparameterization through the sampler'
    summary = 'natural gradient F(λ)⁻¹ E_u[∇ℓ(θ) ∂θ/∂λ] with θ = sampler(u; λ) (any family with a differentiable sampler)'
    losses = ("abstract",)

    def check(self, ctx):
        if ctx.candidate == "single":
            check_sampler(ctx, self.name)

    def natural_gradient(self, ctx):
        return sampled_natural_gradient(ctx.recipe, ctx.D, ctx.approx(self.name), self.name)


register(Reparameterization())

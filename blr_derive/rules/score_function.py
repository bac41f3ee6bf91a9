"""``score_function`` — natural gradient F(λ)⁻¹ Cov_q(ℓ, T) from the loss at samples of q (any family with a sampler) (Eq. 4; score-function identity).  Derived in ``blr_derive/rules/sampling.py``."""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.sampling import check_sampler, sampled_natural_gradient


class ScoreFunction(Rule):
    name = 'score_function'
    kind = "expectation"
    equation = 'Eq. 4; score-function identity'
    summary = 'natural gradient F(λ)⁻¹ Cov_q(ℓ, T) from the loss at samples of q (any family with a sampler)'
    losses = ("abstract",)

    def check(self, ctx):
        if ctx.candidate == "single":
            check_sampler(ctx, self.name)

    def natural_gradient(self, ctx):
        return sampled_natural_gradient(ctx.recipe, ctx.D, ctx.approx(self.name), self.name)


register(ScoreFunction())

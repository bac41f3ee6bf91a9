"""``score_function`` — natural gradient F(λ)⁻¹ Cov_q(ℓ, T) from the loss at samples of q (any family with a sampler) (Eq. 4; score-function identity).  Derived in ``blr_derive/rules/sampling.py``; for the full-covariance Gaussian (samples m + A z through a factor of the covariance) in ``blr_derive/rules/gaussian_score.py``."""
from __future__ import annotations

from blr_derive.rules.base import register
from blr_derive.rules.gaussian_score import check_full_gaussian, gaussian_score_natural_gradient, is_full_gaussian
from blr_derive.rules.sampling import SampledRule


class ScoreFunction(SampledRule):
    name = 'score_function'
    equation = 'Eq. 4; score-function identity'
    summary = 'natural gradient F(λ)⁻¹ Cov_q(ℓ, T) from the loss at samples of q (any family with a sampler)'

    def check(self, ctx):
        if ctx.candidate == "single" and ctx.recipe.loss_kind == "abstract" and is_full_gaussian(ctx.family):
            check_full_gaussian(ctx, self.name)
            return
        super().check(ctx)

    def natural_gradient(self, ctx):
        if is_full_gaussian(ctx.family):
            return gaussian_score_natural_gradient(ctx, self.name)
        return super().natural_gradient(ctx)


register(ScoreFunction())

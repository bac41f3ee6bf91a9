"""``score_function`` — natural gradient F(λ)⁻¹ Cov_q(ℓ, T) from the loss at samples of q (any family with a sampler) (Eq. 4; score-function identity).  Derived in ``blr_derive/rules/sampling.py``."""
from __future__ import annotations

from blr_derive.rules.base import register
from blr_derive.rules.sampling import SampledRule


class ScoreFunction(SampledRule):
    name = 'score_function'
    equation = 'Eq. 4; score-function identity'
    summary = 'natural gradient F(λ)⁻¹ Cov_q(ℓ, T) from the loss at samples of q (any family with a sampler)'


register(ScoreFunction())

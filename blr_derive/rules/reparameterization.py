"""``reparameterization`` — natural gradient F(λ)⁻¹ E_u[∇ℓ(θ) ∂θ/∂λ] with θ = sampler(u; λ) (any family with a differentiable sampler) (Eq. 4; reparameterization through the sampler).  Derived in ``blr_derive/rules/sampling.py``."""
from __future__ import annotations

from blr_derive.rules.base import register
from blr_derive.rules.sampling import SampledRule


class Reparameterization(SampledRule):
    name = 'reparameterization'
    equation = 'Eq. 4; reparameterization through the sampler'
    summary = 'natural gradient F(λ)⁻¹ E_u[∇ℓ(θ) ∂θ/∂λ] with θ = sampler(u; λ) (any family with a differentiable sampler)'


register(Reparameterization())

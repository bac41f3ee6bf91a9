"""``straight_through`` — the τ → 0, zero-noise limit of the Concrete relaxation: the gradient at the hard sample of u = 1/2 (θ = sign(λ)), with the straight-through Jacobian ∇_μ θ ≈ 1 (E_q[θ] = μ: the delta method in μ) (Sec. 4.5, Eq. 48 (τ → 0, zero noise; delta method)).  Derived in ``blr_derive/rules/sampling.py``."""
from __future__ import annotations

from blr_derive.rules.base import register
from blr_derive.rules.sampling import SampledRule, relaxed_natural_gradient


class StraightThrough(SampledRule):
    name = 'straight_through'
    takes_arguments = False
    equation = 'Sec. 4.5, Eq. 48 (τ → 0, zero noise; delta method)'
    summary = 'the τ → 0, zero-noise limit of the Concrete relaxation: the gradient at the hard sample of u = 1/2 (θ = sign(λ)), with the straight-through Jacobian ∇_μ θ ≈ 1 (E_q[θ] = μ: the delta method in μ)'
    derive = staticmethod(relaxed_natural_gradient)


register(StraightThrough())

"""``concrete_relaxation`` — relax the hard threshold sign(x) of a binary family's sampler to tanh(x/τ) and take the gradient at the relaxed sample: ∇_μ E_q[ℓ] ≈ s∘∇ℓ(θ̂), s = ∇_μ θ̂ (chain rule through the ordinary parameter) (Sec. 4.5, Eqs. 50-51 (Concrete / Gumbel-softmax)).  Derived in ``blr_derive/rules/sampling.py``."""
from __future__ import annotations

from blr_derive.rules.base import register
from blr_derive.rules.sampling import SampledRule, relaxed_natural_gradient


class ConcreteRelaxation(SampledRule):
    name = 'concrete_relaxation'
    equation = 'Sec. 4.5, Eqs. 50-51 (Concrete / Gumbel-softmax)'
    summary = "relax the hard threshold sign(x) of a binary family's sampler to tanh(x/τ) and take the gradient at the relaxed sample: ∇_μ E_q[ℓ] ≈ s∘∇ℓ(θ̂), s = ∇_μ θ̂ (chain rule through the ordinary parameter)"
    derive = staticmethod(relaxed_natural_gradient)


register(ConcreteRelaxation())

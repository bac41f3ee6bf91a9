"""``concrete_relaxation`` — relax the hard threshold sign(x) of a binary family's sampler to tanh(x/τ) and take the gradient at the relaxed sample: ∇_μ E_q[ℓ] ≈ s∘∇ℓ(θ̂), s = ∇_μ θ̂ (chain rule through the ordinary parameter) (Sec. 4.5, Eqs. 50-51 (Concrete / Gumbel-softmax)).  Derived in ``blr_derive/rules/sampling.py``."""
from __future__ import annotations

from blr_derive.rules.base import Rule, register
from blr_derive.rules.sampling import check_sampler, relaxed_natural_gradient


class ConcreteRelaxation(Rule):
    name = 'concrete_relaxation'
    kind = "expectation"
    equation = 'Sec. 4.5, Eqs. 50-51 (Concrete / Gumbel-softmax)'
    summary = "relax the hard threshold sign(x) of a binary family's sampler to tanh(x/τ) and take the gradient at the relaxed sample: ∇_μ E_q[ℓ] ≈ s∘∇ℓ(θ̂), s = ∇_μ θ̂ (chain rule through the ordinary parameter)"
    losses = ("abstract",)

    def check(self, ctx):
        if ctx.candidate == "single":
            check_sampler(ctx, self.name)

    def natural_gradient(self, ctx):
        return relaxed_natural_gradient(ctx.recipe, ctx.D, ctx.approx(self.name), self.name)


register(ConcreteRelaxation())

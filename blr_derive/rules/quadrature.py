"""``quadrature`` — E_q[ℓ(θ)(T(θ) − μ)] = ∇_λ E_q[ℓ] (Eq. 4; the score-function identity) by a deterministic rule
instead of samples: θ = F⁻¹(u) through the family's inverse-CDF sampler and the tanh-sinh (double-exponential) rule
in u ∈ (0, 1), whose nodes crowd toward both ends, so the quadrature converges fast even where F⁻¹ has the
endpoint singularities of every support (−log(1 − u) for a positive one, a logit for a real one): one rule for
any scalar family with a sampler of one uniform draw (exponential, gamma, beta, chi, Weibull, ...).  Argument
``nodes`` (the number of points: odd, at least 3; default 65).  The middle node is u = ½ exactly: a sampler that is
0/0 there is refused (its x/|x| is already read as sign(x), ``core.specialfns.limit_safe``).  The loss may be explicit (evaluated at the nodes) or abstract
(the ``loss`` oracle at the nodes).  Derived in ``blr_derive/rules/sampling.py``."""
from __future__ import annotations

from blr_derive.rules.base import register
from blr_derive.rules.sampling import SampledRule, check_quadrature, quadrature_natural_gradient


class Quadrature(SampledRule):
    name = "quadrature"
    equation = "Eq. 4; score-function identity; tanh-sinh quadrature in the CDF coordinate (Takahasi & Mori 1974)"
    summary = ("natural gradient F(λ)⁻¹ E_q[ℓ(θ)(T(θ) − μ)] by the tanh-sinh rule in u = F(θ) through the family's "
               "inverse-CDF sampler (argument 'nodes'; explicit or abstract loss)")
    losses = ("abstract", "explicit")
    derive = staticmethod(quadrature_natural_gradient)

    def check(self, ctx):
        if ctx.candidate == "single":
            check_quadrature(ctx, self.name)


register(Quadrature())

"""``no_entropy`` — minimise E_q[ℓ] alone (Eq. 2 without −H(q); Sec. 4.5): ∇_μ H(q) = −λ − ∇_μ E_q[log h] drops
out, so λ_t is not shrunk and the base-measure term vanishes: no exponential smoothing (STE)."""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import RULES, Rule, register
from blr_derive.rules.blr import zeros_like_mu


class NoEntropy(Rule):
    name = "no_entropy"
    takes_arguments = False
    kind = "step"
    equation = "Eq. 2 without H(q); Sec. 4.5"
    summary = ("drop the entropy from the Bayesian objective: λ ← λ - ρ∇_μ E_q[ℓ] (no exponential smoothing, as in "
               "STE)")

    def on_blr(self, ctx):
        fam = ctx.family
        ctx.keep = sp.Integer(1)
        ctx.D.add("no_entropy", RULES["no_entropy"].equation, "No entropy term",
                  "Minimising E_q[ℓ] alone (Eq. 2 without -H(q)): ∇_μ H(q) = -λ - ∇_μ E_q[log h] drops out, so λ_t is "
                  "not shrunk and the base-measure term vanishes: no exponential smoothing (Sec. 4.5, STE).",
                  [(ln, l - ctx.rho * g) for ln, l, g in zip(ctx.lam_next, fam.lam, ctx.gblock)])
        ctx.g_logh = zeros_like_mu(fam)


register(NoEntropy())

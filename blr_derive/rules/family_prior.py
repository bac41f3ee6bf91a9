"""``family_prior`` — a prior p₀ = q(·; λ₀) in the candidate's family (Eq. 1; Sec. 5.1): -log p₀ = -log h - <λ₀, T>
+ A(λ₀), so ℓ̄ = ℓ - log p₀ has ∇_μE_q[ℓ̄] = ∇_μE_q[ℓ] - λ₀ - ∇_μE_q[log h], and in Eq. 6 the base-measure term
cancels: ∇_μE_q[ℓ̄ + log h] = ∇_μE_q[ℓ] - λ₀ (exact)."""
from __future__ import annotations

from blr_derive.core.matexpr import is_mat
from blr_derive.rules.base import RULES, Rule, register


class FamilyPrior(Rule):
    name = "family_prior"
    kind = "step"
    equation = "Eq. 1 with p(θ) in the candidate family; Sec. 5.1"
    summary = ("a prior p₀(θ) = h(θ)exp(<λ₀, T(θ)> - A(λ₀)) in the candidate's family: ∇_μ E_q[ℓ - log p₀ + log h] "
               "= ∇_μ E_q[ℓ] - λ₀ (exact)")

    def adjust_gradient(self, ctx, grads):
        """The returned blocks are those to which the BLR step adds ∇_μE_q[log h]: ∇_μE_q[ℓ] - λ₀ - ∇_μE_q[log h]."""
        D, fam = ctx.D, ctx.family
        args = ctx.args(self.name)
        no_entropy = "no_entropy" in ctx.names
        g_logh = ctx.g_logh
        g_loss = grads
        if any(is_mat(l) for l in fam.lam):
            raise args.fail(f"family '{fam.name}' has vector or matrix natural parameters; family_prior takes scalar ones "
                           "(scalar or elementwise families)")
        if no_entropy and fam.depends_on_variable(fam.log_h):
            raise args.fail(f"with 'no_entropy' the prior's -log h(θ) does not cancel, and family '{fam.name}' has a "
                           "base measure that depends on θ")
        lam0 = [args.expr(l.name) for l in fam.lam]
        args.done()
        D.loss_model.family_prior = lam0            # ℓ̄ = ℓ − log p₀ (the objective adds E_q[−log p₀])
        out = [g - l0 - gh for g, l0, gh in zip(g_loss, lam0, g_logh)]
        D.add("family_prior", RULES["family_prior"].equation, "Prior in the candidate family",
              "-log p₀(θ) = -log h(θ) - <λ₀, T(θ)> + A(λ₀) is linear in T up to log h, so its natural gradient is "
              "exact: -λ₀ - ∇_μE_q[log h], and the base-measure term of Eq. 6 cancels the latter.",
              [((r"\lambda^{(%d)}_0" % (i + 1)), l0) for i, l0 in enumerate(lam0)])
        return out


register(FamilyPrior())

"""``unit_learning_rate`` — ρ_t = 1 (Sec. 5.1): the BLR jumps to its fixed point λ = ∇_μ E_q[−ℓ] (Eq. 5), the
conjugate one-step solution."""
from __future__ import annotations

from blr_derive.core.matexpr import simplify_mat
from blr_derive.rules.base import RULES, Rule, register
from blr_derive.rules.blr import expand


class UnitLearningRate(Rule):
    name = "unit_learning_rate"
    takes_arguments = False
    kind = "step"
    equation = "Sec. 5.1"
    summary = ("set ρ_t = 1: the BLR jumps to its fixed point λ = ∇_μ E_q[-ℓ] (Eq. 5), the conjugate one-step "
               "solution")

    def adjust_lambda(self, ctx, lam_new):
        lam_new = [simplify_mat(expand(e.xreplace({ctx.rho: 1})), ctx.sym) for e in lam_new]
        ctx.D.add("unit_learning_rate", RULES["unit_learning_rate"].equation, "Learning rate ρ = 1",
                  "With ρ_t = 1 the old natural parameters drop out: one step lands on the fixed point of Eq. 5.",
                  [(ln, e, r"\leftarrow") for ln, e in zip(ctx.lam_next, lam_new)])
        return lam_new


register(UnitLearningRate())

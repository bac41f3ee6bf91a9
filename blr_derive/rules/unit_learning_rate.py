"""``unit_learning_rate`` — ρ_t = 1 (Sec. 5.1): λ ← ∇_μ E_q[−ℓ] at the current q (Eq. 5's map); for a conjugate
loss the gradient does not depend on q, so this is the fixed point in one step; otherwise one full step of the
fixed-point iteration."""
from __future__ import annotations

from blr_derive.core.matexpr import simplify_mat
from blr_derive.rules.base import RULES, Rule, register
from blr_derive.rules.blr import expand


class UnitLearningRate(Rule):
    name = "unit_learning_rate"
    takes_arguments = False
    kind = "step"
    equation = "Sec. 5.1"
    summary = ("set ρ_t = 1: λ ← ∇_μ E_q[-ℓ] at the current q (Eq. 5's map); for a conjugate loss the gradient does "
               "not depend on q, so this is the fixed point in one step; otherwise it is one full step of the "
               "fixed-point iteration")

    def adjust_lambda(self, ctx, lam_new):
        lam_new = [simplify_mat(expand(e.xreplace({ctx.rho: 1})), ctx.sym) for e in lam_new]
        ctx.D.add("unit_learning_rate", RULES["unit_learning_rate"].equation, "Learning rate ρ = 1",
                  "With ρ_t = 1 the old natural parameters drop out: λ_{t+1} = ∇_μ E_q[−ℓ] at the current q, the fixed "
                  "point of Eq. 5 in one step where the loss is conjugate (its gradient does not depend on q).",
                  [(ln, e, r"\leftarrow") for ln, e in zip(ctx.lam_next, lam_new)])
        return lam_new


register(UnitLearningRate())

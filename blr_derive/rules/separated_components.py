"""``separated_components`` — components far apart: r_k(m_k) ≈ 1, r_j(m_k) ≈ 0, so ∇log q(m_k) ≈ ∇log q_k(m_k),
∇²log q(m_k) ≈ ∇²log q_k(m_k) (App. E, Eq. 74; App. G, Eqs. 85-86).  Applied by mixture candidates
(``blr_derive/candidates/mixture.py``) to the entropy term of the generic component, in place of the
responsibilities of ``mixture_score``."""
from __future__ import annotations

from blr_derive.core.matexpr import simplify_mat
from blr_derive.rules.base import RULES, Rule, register
from blr_derive.rules.blr import doit


class SeparatedComponents(Rule):
    name = 'separated_components'
    takes_arguments = False
    kind = 'mixture'
    equation = 'App. E, Eq. 74; App. G, Eqs. 85-86'
    structures = ("mixture",)
    summary = ('components far apart: r_k(m_k) ≈ 1, r_j(m_k) ≈ 0, so ∇log q(m_k) ≈ ∇log q_k(m_k), '
               '∇²log q(m_k) ≈ ∇²log q_k(m_k)')

    def mixture_entropy(self, ctx, M, grads, score, hess):
        """∇ log q(m_k), ∇² log q(m_k) (``M.gq``, ``M.Hq``) replaced by component k's own score and its Jacobian,
        derived from the component family (``score``, ``hess`` in θ and the family's parameters)."""
        base, theta = M.base, M.base.theta
        own_g = base.simp(score.xreplace(M.gen).xreplace({theta: M.mean_k}))
        own_H = base.simp(hess.xreplace(M.gen).xreplace({theta: M.mean_k}))
        grads = [simplify_mat(doit(g.xreplace({M.gq: own_g, M.Hq: own_H})), M.hsym) for g in grads]
        ctx.D.add("separated_components", RULES["separated_components"].equation, "Separated components",
                  "The components are far apart, so r_k(m_k) ≈ 1 and r_j(m_k) ≈ 0 for j ≠ k (Eq. 74; for the "
                  "spike-and-slab of dropout, Eqs. 85-86): ∇ log q(m_k) ≈ ∇ log q_k(m_k), ∇² log q(m_k) ≈ "
                  "∇² log q_k(m_k), with the component's score derived from its family.",
                  [(r"\nabla_\theta \log q_k(\theta)", score.xreplace(M.gen)), (M.gq, own_g, r"\approx"),
                   (M.Hq, own_H, r"\approx")])
        return grads


register(SeparatedComponents())

"""``factored_tikhonov`` — a convention: the isotropic Gaussian prior δ‖W‖²_F/2 of ℓ̄ (Khan & Rue Eq. 1) on a
Kronecker candidate, its precision δI split between the two factors (factored Tikhonov damping: Martens & Grosse,
ICML 2015, Sec. 6.3; Zhang, Sun, Duvenaud & Grosse, ICML 2018, Eq. 18).

The prior adds δ vec(W) to the gradient at the point where the loss's oracles are evaluated (δ vec(M) at the mean
under the delta method, exact; δ vec(W_k) at the samples under ``monte_carlo``, whose average estimates δ vec(M), as in
Zhang et al.'s Alg. 1) and δI = δ I ⊗ I to the Hessian.  L ⊗ R + δ I ⊗ I is not one Kronecker product; the convention replaces it by

    (L + π√δ I) ⊗ (R + (√δ/π) I) = L ⊗ R + δ I ⊗ I + √δ (π I ⊗ R + (1/π) L ⊗ I),

dropping the cross terms (argument ``prior`` = δ, ``split`` = π > 0, default 1).  Exact only for δ = 0.  Zhang et
al.'s damping π√γ on the unscaled factors E[aaᵀ], E[DsDsᵀ] with γ = δ/N is split = π·n·√N here (n the mini-batch
size: the factors here are N aᵀa and bᵀb, see ``kronecker_gauss_newton``).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import RULES, register
from blr_derive.rules.kronecker import Kron, KroneckerRule


class FactoredTikhonov(KroneckerRule):
    name = "factored_tikhonov"
    kind = "convention"
    equation = "Martens & Grosse (2015) Sec. 6.3; Zhang et al. (2018) Eq. 18; Khan & Rue Eq. 1"
    summary = ("prior δ‖W‖²/2 on a Kronecker candidate: δM added to the gradient, δI split between the factors as "
               "π√δ I and (√δ/π) I (factored Tikhonov damping; the cross terms are dropped)")

    def kronecker_damping(self, kctx, args):
        delta = args.expr("prior")
        split = args.positive("split", sp.Integer(1))
        args.done()
        if delta.is_number and not (delta.is_real and delta >= 0):
            raise kctx.fail(f"approximation '{self.name}': prior must be nonnegative, got {delta}")
        one = kctx.hess.single() if kctx.hess is not None else None
        if one is None:
            raise kctx.fail(f"approximation '{self.name}' splits the prior between the factors of one Kronecker "
                            "product: name a Kronecker Hessian rule before it (e.g. 'kronecker_gauss_newton')")
        L, R = one
        I_c, I_r = sp.Identity(kctx.cols), sp.Identity(kctx.rows)
        exact = kctx.hess.plus(Kron([(delta, I_c, I_r)]))
        kctx.hess = Kron([(sp.Integer(1), L + split * sp.sqrt(delta) * I_c, R + sp.sqrt(delta) / split * I_r)])
        kctx.grad = kctx.grad + delta * kctx.mean_point
        D = kctx.D
        D.add(self.name, RULES[self.name].equation, "Prior and factored Tikhonov damping (convention)",
              "The prior δ‖W‖²/2 adds δ vec(M) to the gradient and δI = δ I ⊗ I to the Hessian (Eq. 1). A sum of "
              "two Kronecker products has no Kronecker inverse; the convention splits δI between the factors and "
              "drops the cross terms √δ(π I ⊗ R + L ⊗ I/π) (Martens & Grosse Sec. 6.3), exact only for δ = 0."
              + ("" if kctx.mean_point == kctx.M else " The oracles are evaluated at a sample W_k of q: the "
                 "prior's gradient is taken there too, δ vec(W_k), whose average over q is δ vec(M)."),
              [(sp.Symbol(r"\hat{H} + \delta I"), exact.sympy()),
               (sp.Symbol(r"\hat{H} + \delta I"), kctx.hess.sympy(), r"\approx"),
               (sp.Symbol(r"\hat{g}_\delta"), kctx.grad)])


register(FactoredTikhonov())

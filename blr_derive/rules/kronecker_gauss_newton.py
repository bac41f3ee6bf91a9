"""``kronecker_gauss_newton`` — the Kronecker-factored Gauss–Newton Hessian of one layer (K-FAC; Martens & Grosse,
ICML 2015, Sec. 3; Zhang, Sun, Duvenaud & Grosse, ICML 2018, Sec. 3.1, Eq. 17), from the oracles ``activations``
and ``output_grads``.

For a layer s = W a (W rows × cols, column-major vec) the per-example Gauss–Newton matrix is (a aᵀ) ⊗ Λ with Λ the
Gauss–Newton matrix of the loss in the layer's output s.  With ``activations`` a (n × cols, one input per row) and
``output_grads`` b (r × rows) — the output gradients of the mini-batch *mean* loss (what a backward pass of a
mean-reduced loss returns: rows (1/n) ∂ℓ_i/∂s_i, targets sampled from the model for the Fisher, or the square-root
factors Λ^{1/2}/√n of the Gauss–Newton matrix) — K-FAC takes the expectation of the Kronecker product as the
Kronecker product of the expectations:

    ∇²(1/n Σ_i ℓ_i) ≈ E[a aᵀ] ⊗ E[Λ] = (aᵀa / n) ⊗ (n bᵀb) = (aᵀa) ⊗ (bᵀb),

exact when every example has the same Λ (then Σ_i a_i a_iᵀ ⊗ Λ = (aᵀa) ⊗ Λ).  The oracles are mini-batch means; the
BLR needs the sums over the N examples of ℓ̄ (Eq. 34): the gradient and the Hessian are scaled by N (argument
``size``, default 1), N on the activation factor (Zhang et al. keep the N/λ of the posterior with A):

    H ≈ (N aᵀa) ⊗ (bᵀb),    ∇ℓ̄ ≈ N vec(ĝ).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.rules.base import RULES, OracleCall, register
from blr_derive.rules.kronecker import Kron, KroneckerRule


class KroneckerGaussNewton(KroneckerRule):
    name = "kronecker_gauss_newton"
    kind = "pass"
    equation = "Martens & Grosse (2015) Sec. 3; Zhang et al. (2018) Eq. 17; Khan & Rue Eq. 34"
    summary = ("Kronecker-factored Gauss-Newton Hessian (K-FAC) of a layer, (N aᵀa) ⊗ (bᵀb), from the oracles "
               "'activations' a and 'output_grads' b (mini-batch means scaled by N = size)")

    def kronecker_hessian(self, kctx, args):
        N = args.positive("size", sp.Integer(1))
        args.done()
        D = kctx.D
        if kctx.hess is not None:
            raise kctx.fail("the Hessian already has a Kronecker form (name one Kronecker Hessian rule)")
        n_a, n_b = sp.Symbol("n_a", integer=True, positive=True), sp.Symbol("n_b", integer=True, positive=True)
        a = sp.MatrixSymbol("a", n_a, kctx.cols)
        b = sp.MatrixSymbol("b", n_b, kctx.rows)
        D.symbol_names.update({a: r"\mathbf{a}", b: r"\mathbf{b}"})
        where = "at the mean" if kctx.mean_point == kctx.M else "at the sample"
        D.oracle_calls.append(OracleCall(a, "activations", kctx.mean_point,
                               f"the layer's inputs, one row per example of the mini-batch ({where})"))
        D.oracle_calls.append(OracleCall(b, "output_grads", kctx.mean_point,
                               "gradients of the mini-batch mean loss in the layer's outputs, one row per example "
                               f"(or square-root factors of its Gauss-Newton matrix; {where})"))
        L, R = N * (a.T * a), b.T * b
        old_g = kctx.grad
        kctx.grad = N * old_g if N != 1 else old_g
        kctx.hess = Kron([(sp.Integer(1), L, R)])
        D.add(self.name, RULES[self.name].equation, "Kronecker-factored Gauss-Newton Hessian (K-FAC)",
              "For a layer s = W a the Gauss-Newton matrix of one example is (a aᵀ) ⊗ Λ; K-FAC replaces the mean of "
              "the Kronecker products by the Kronecker product of the means, E[a aᵀ] ⊗ E[Λ] = (aᵀa/n) ⊗ (n bᵀb) for "
              "output gradients b of the mini-batch mean loss (exact when every example has the same Λ). The "
              "oracles are mini-batch means and the BLR needs sums over the N examples (Eq. 34): both are scaled "
              "by N, kept with the activation factor.",
              [(sp.Symbol(r"\hat{H}"), kctx.hess.sympy(), r"\approx"),
               (sp.Symbol(r"\hat{g}_N"), kctx.grad)])


register(KroneckerGaussNewton())

"""Natural gradients through the Gaussian mean and covariance (App. D): identities of every family with a
``gaussian`` section.

* ``chain_rule_gaussian`` — ∇_μ E_q[f] through m(μ) and C(μ): ∇_{μ1} = ∇_m − 2(∇_C)m, ∇_{μ2} = ∇_C;
* ``bonnet`` — ∇_m E_q[ℓ] = E_q[∇ℓ] (Eq. 10);
* ``price`` — ∇_C E_q[ℓ] = ½ E_q[∇²ℓ] (Eq. 11).
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.matexpr import is_mat, like_symbol, simplify_mat
from blr_derive.rules.base import RULES, NaturalGradient, rule
from blr_derive.rules.blr import doit

rule("chain_rule_gaussian", "identity", "App. D",
     "∇_μ E_q[f] through the mean m(μ) and covariance C(μ): ∇_{μ1} = ∇_m - 2(∇_C)m, ∇_{μ2} = ∇_C")
rule("bonnet", "identity", "Eq. 10, App. D", "Bonnet's theorem: ∇_m E_q[ℓ(θ)] = E_q[∇_θ ℓ(θ)]")
rule("price", "identity", "Eq. 11, App. D", "Price's theorem: ∇_C E_q[ℓ(θ)] = ½ E_q[∇²_θ ℓ(θ)]")


def gaussian_natural_gradient(ctx):
    """``chain_rule_gaussian``, ``bonnet``, ``price``: the natural gradient of E_q[ℓ] for a family with Gaussian
    moments, in terms of E_q[∇ℓ] and E_q[∇²ℓ] (App. D, Eqs. 10-11).  Returns a :class:`NaturalGradient` (also set
    as ``D.natural_gradient``) and whether the covariance enters (``uses_cov``); the expectation rule then replaces
    the two expectations (delta method, Monte Carlo, quadrature)."""
    D, fam, sym = ctx.D, ctx.family, ctx.sym
    mean_mu, cov_mu = ctx.mean_mu, ctx.cov_mu
    gm = like_symbol("grad_m_E", mean_mu)
    GC = like_symbol("grad_C_E", cov_mu)
    D.symbol_names[gm] = r"\nabla_{m}\mathbb{E}_q[\bar\ell]"
    D.symbol_names[GC] = r"\nabla_{C}\mathbb{E}_q[\bar\ell]"
    csym = set(sym) | ({GC} if is_mat(GC) else set())
    # E_q[ℓ] = Φ(m(μ), C(μ)); its differential is <∇_m Φ, dm> + <∇_C Φ, dC>
    phi = (sp.Trace(gm.T * mean_mu) if is_mat(gm) else gm * mean_mu) + \
          (sp.Trace(GC * cov_mu) if is_mat(GC) else GC * cov_mu)
    grads = matcalc.gradient(phi, fam.mu, csym)
    uses_cov = any(g.has(GC) for g in grads)
    D.add("chain_rule_gaussian", RULES["chain_rule_gaussian"].equation,
          "Natural gradients through the mean and covariance",
          "Write m and C as functions of μ and apply the chain rule (App. D).",
          [(sp.Symbol("m"), mean_mu), (sp.Symbol("C"), cov_mu)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g) for i, g in enumerate(grads)])

    Eg = like_symbol("E_grad", mean_mu)
    EH = like_symbol("E_hess", cov_mu)
    D.symbol_names[Eg] = r"\mathbb{E}_q[\nabla_\theta \bar\ell]"
    D.symbol_names[EH] = r"\mathbb{E}_q[\nabla^2_\theta \bar\ell]"
    subs = {gm: Eg}
    D.add("bonnet", RULES["bonnet"].equation, "Bonnet's theorem", "", [(gm, Eg)])
    if uses_cov:
        subs[GC] = EH / 2
        D.add("price", RULES["price"].equation, "Price's theorem", "", [(GC, EH / 2)])
    grads = [simplify_mat(doit(g.xreplace(subs)), csym | ({EH} if is_mat(EH) else set())) for g in grads]
    # exact natural gradient of E_q[ℓ] in terms of E_q[∇ℓ], E_q[∇²ℓ] (before any approximation)
    D.natural_gradient = NaturalGradient(list(grads), Eg, EH)
    D.steps[-1].equations += [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g)
                              for i, g in enumerate(grads)]
    return D.natural_gradient, uses_cov, csym

"""Posterior correction (Khan 2025, *Knowledge Adaptation as Posterior Correction*; Daheim, Möllenhoff, Ang &
Khan, *SVRG and Beyond via Posterior Correction*, ICML 2026; shared/references/bayes-duality-project-summary-slides.md,
"Speeding up training with memories").

An old candidate q_old (a snapshot) is a product of sites, q_old ∝ Π_j exp(−ℓ̂_{j|old}).  A BLR step on the
mini-batch B replaces the batch's old sites by new ones:

    q ← q^{1−ρ} q_old^ρ Π_{j∈B} exp(−ρ(ℓ̂_j − ℓ̂_{j|old})),

so the natural gradient of the step is corrected by the batch's natural gradient at q_old and completed by
the full-data natural gradient at q_old (the sites q_old holds):

    ∇_μ E_q[ℓ_B]  →  ∇_μ E_q[ℓ_B] − ∇_μ E_{q_old}[ℓ_B] + ∇_μ E_{q_old}[ℓ].

The three terms are the same derived expression of E_q[∇ℓ], E_q[∇²ℓ] and μ (chain rule, Bonnet, Price, the
delta method), evaluated at (the batch oracles at m, μ), (the batch oracles at m_old, μ_old) and (the stored
full-data gradient/Hessian at m_old, μ_old).  Over N(m, I) this is SVRG: m ← m − ρ(g_B(m) − g_B(m_old) + ḡ_old);
over the full Gaussian it adds Hessian corrections.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import SpecError
from blr_derive.core.matexpr import is_mat, like_symbol, simplify_mat
from blr_derive.rules.base import PROGRAM_KINDS, RULES, OracleCall, Rule, register


def posterior_correction(recipe, D, g_loss, sym):
    fam = recipe.family
    approx = [a for a in recipe.approximations if a.name == "posterior_correction"][0]
    if approx.args:
        raise SpecError(f"approximation 'posterior_correction' takes no arguments (got {', '.join(sorted(approx.args))})",
                        recipe.file, approx.line)
    if recipe.loss_kind != "abstract" or D.natural_gradient is None \
            or D.natural_gradient.Eg is None or D.sampling is not None:
        raise SpecError("approximation 'posterior_correction' needs an abstract loss with the delta method",
                        recipe.file, approx.line)
    passes = [a for a in recipe.approximations if RULES[a.name].kind in PROGRAM_KINDS]
    if passes:       # a pass rewrites one gradient/Hessian view; here each oracle is asked at m and at m_old
        raise SpecError(f"approximation '{passes[0].name}' cannot follow 'posterior_correction': the corrected step "
                        "uses the oracles at m and at the snapshot's m_old, and a pass would rewrite only one of them",
                        recipe.file, passes[0].line)
    grads, Eg, EH = D.natural_gradient.grads, D.natural_gradient.Eg, D.natural_gradient.EH
    old = {p.symbol: next(d.symbol for d in recipe.data if d.name == f"{p.name}_old")
           for p in fam.params.values() if not p.fixed}
    for d in recipe.data:
        if d.symmetric:
            sym.add(d.symbol)
    mu_old = {u: e.xreplace(old) for u, e in zip(fam.mu, fam.mu_ord)}
    m_old = fam.gaussian_mean.xreplace(old)
    g_old = like_symbol("g_old", Eg)
    D.oracle_calls.append(OracleCall(g_old, "grad", m_old, "∇_θ ℓ(θ) at the snapshot's mean (posterior correction)"))
    reps_batch, reps_full = {Eg: g_old}, {Eg: next(d.symbol for d in recipe.data if d.name == "grad_full")}
    if EH is not None and any(g.has(EH) for g in grads):
        H_old = like_symbol("H_old", EH)
        if is_mat(H_old):
            sym.add(H_old)
        D.oracle_calls.append(OracleCall(H_old, "hess", m_old, "∇²_θ ℓ(θ) at the snapshot's mean (posterior correction)"))
        reps_batch[EH] = H_old
        reps_full[EH] = next(d.symbol for d in recipe.data if d.name == "hess_full")
    D.symbol_names.update({g_old: r"\hat{g}_{old}"})
    out, eqs = [], []
    for i, (g, gn) in enumerate(zip(g_loss, grads)):
        at_old = gn.xreplace(mu_old)
        batch_old = at_old.xreplace(reps_batch)
        full_old = at_old.xreplace(reps_full)
        new = g - batch_old + full_old
        new = simplify_mat(new, sym) if is_mat(new) else sp.expand(new)
        out.append(new)
        eqs.append(((r"\tilde\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), new))
    D.add("posterior_correction", RULES["posterior_correction"].equation, "Posterior correction",
          "The batch's old sites in q_old are replaced by new ones: the natural gradient of the batch at q is "
          "corrected by the batch's natural gradient at the snapshot q_old and completed by the full-data natural "
          "gradient at q_old (the same derived expression at the snapshot, with the batch oracles and with the "
          "stored full-data gradient and Hessian).", eqs)
    return out


class PosteriorCorrection(Rule):
    name = "posterior_correction"
    kind = "step"
    equation = "Khan (2025) posterior correction; Daheim et al. (2026)"
    summary = ("replace the batch's old sites in a snapshot q_old: ∇_μ E_q[ℓ_B] − ∇_μ E_{q_old}[ℓ_B] + ∇_μ E_{q_old}[ℓ] "
               "(SVRG over N(m, I))")

    def adjust_gradient(self, ctx, grads):
        return posterior_correction(ctx.recipe, ctx.D, grads, ctx.sym)


register(PosteriorCorrection())

"""The score-function natural gradient of a Gaussian with a full covariance (Eq. 4 with App. D's chain rule;
Wierstra et al., JMLR 2014, Sec. 3.3), used by ``score_function`` for a vector variable with a ``gaussian``
section and matrix statistics (``gaussian_full``).

The samples are θ_k = m + A z_k, z_k ~ N(0, I), through a square-root factor A of the covariance (C = A Aᵀ); the
factor is named ``A`` and stands for the family's covariance until a rule makes it the state
(``exponential_coordinates``).  Derivation, every step symbolic:

* App. D's chain rule: ∇_μ E_q[ℓ] through m(μ) and C(μ), in terms of ∇_m E_q[ℓ] and ∇_C E_q[ℓ];
* the score-function identity ∇_{m,C} E_q[ℓ] = E_q[ℓ ∇_{m,C} log N(θ | m, C)], the gradients of the log density
  taken by matrix differential calculus (``core/matcalc``) and written at θ = m + A z;
* whitening: Aᵀ∇_m log N and Aᵀ(∇_C log N)A depend on the draw z alone (checked: A must cancel), so the Monte Carlo
  averages are of draw-only statistics and the factors stay outside the mean, where the coordinate rules cancel them.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core import matcalc
from blr_derive.core.matexpr import is_mat, like_symbol, simplify_mat
from blr_derive.rules.args import Ctx
from blr_derive.rules.base import RULES, NaturalGradient, Sampling, TexForm
from blr_derive.rules.blr import doit

#: the rules that make the covariance factor the state (a recipe with score_function over a full Gaussian names one)
FACTOR_RULES = ("exponential_coordinates",)


def is_full_gaussian(fam) -> bool:
    """A vector variable with Gaussian moments and matrix statistics (the full-covariance Gaussian)."""
    return (not fam.elementwise and fam.gaussian_mean is not None and is_mat(fam.gaussian_mean)
            and fam.gaussian_mean.shape[1] == 1 and is_mat(fam.gaussian_cov))


def check_full_gaussian(ctx, rule_name):
    """The samples go through a factor of the covariance, which a coordinate rule must make the state."""
    approx = ctx.approx(rule_name)
    if not any(ctx.approx(r) is not None for r in FACTOR_RULES):
        raise ctx.fail(f"approximation '{rule_name}' over the full Gaussian '{ctx.family.name}' draws θ = m + A z "
                       "through a factor A of the covariance; name the factor as the state with "
                       + " or ".join(f"'{r}'" for r in FACTOR_RULES), approx)


def gaussian_score_natural_gradient(bctx, mode):
    """∇_μ E_q[ℓ] of the full Gaussian by the score function at θ_k = m + A z_k (see the module docstring);
    ``bctx`` is the rule stage's context (its mean and covariance written in μ)."""
    D, fam = bctx.D, bctx.family
    ctx = Ctx(D, bctx.approx(mode))
    samples = ctx.count("samples")
    ctx.done()
    mean, cov = fam.gaussian_mean, fam.gaussian_cov
    P = mean.shape[0]
    sym = set(bctx.sym)
    # App. D: E_q[ℓ] = Φ(m(μ), C(μ)); its differential <∇_m Φ, dm> + <∇_C Φ, dC>, with m, C written in μ
    mean_mu, cov_mu = bctx.mean_mu, bctx.cov_mu
    if mean_mu is None or cov_mu is None:
        raise ctx.fail(f"family '{fam.name}' gives no closed form of its mean and covariance in μ")
    gm, GC = like_symbol("grad_m_E", mean), like_symbol("grad_C_E", cov)
    D.symbol_names.update({gm: r"\nabla_{m}\mathbb{E}_q[\bar\ell]", GC: r"\nabla_{C}\mathbb{E}_q[\bar\ell]"})
    phi = sp.Trace(gm.T * mean_mu) + sp.Trace(GC * cov_mu)
    grads = matcalc.gradient(phi, fam.mu, sym | {GC})
    D.add("chain_rule_gaussian", RULES["chain_rule_gaussian"].equation,
          "Natural gradients through the mean and covariance",
          "Write m and C as functions of μ and apply the chain rule (App. D).",
          [(sp.Symbol("m"), mean_mu), (sp.Symbol("C"), cov_mu)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g) for i, g in enumerate(grads)])
    # the score of N(θ | m, C) in m and C (matrix differential calculus), at θ = m + A z, C = A Aᵀ
    mv, Cv, th = sp.MatrixSymbol("m_v", P, 1), sp.MatrixSymbol("C_v", P, P), sp.MatrixSymbol("theta_v", P, 1)
    logq = -sp.Trace((th - mv).T * sp.Inverse(Cv) * (th - mv)) / 2 - sp.log(sp.Determinant(Cv)) / 2
    score_m, score_C = matcalc.gradient(logq, [mv, Cv], {Cv})
    A, z = sp.MatrixSymbol("A", P, P), sp.MatrixSymbol("z", P, 1)
    theta = sp.MatrixSymbol("theta_k", P, 1)
    at = {th: mv + A * z, Cv: A * A.T}
    white_m = simplify_mat(sp.expand(doit(A.T * score_m.xreplace(at))))
    white_C = simplify_mat(sp.expand(doit(A.T * score_C.xreplace(at) * A)))
    for w in (white_m, white_C):
        if w.has(A) or w.has(mv):
            raise ctx.fail(f"the whitened score {w} still depends on the factor or the mean")
    loss_k = sp.Symbol("loss_k", real=True)
    sz, SZ = sp.MatrixSymbol("ngrad_z", P, 1), sp.MatrixSymbol("ngrad_Z", P, P)
    stats = [(sz, loss_k * white_m), (SZ, loss_k * white_C)]
    # ∇_m E_q[ℓ] = A⁻ᵀ E[ℓ Aᵀ∇_m log q], ∇_C E_q[ℓ] = A⁻ᵀ E[ℓ Aᵀ(∇_C log q)A] A⁻¹
    Ainv = sp.Inverse(A)
    reps = {gm: Ainv.T * sz, GC: Ainv.T * SZ * Ainv}
    grads = [simplify_mat(doit(g.xreplace(reps)), sym | {SZ}) for g in grads]
    D.sampling = Sampling(samples, z, theta, mean + A * z, [(loss_k, "loss")], stats, draw="normal")
    D.natural_gradient = NaturalGradient(list(grads))
    D.sampling.covariance_factor = A        # until a coordinate rule makes the factor the state
    D.symbol_names.update({sz: r"\bar{g}_z", SZ: r"\bar{G}_z", theta: r"\theta_k"})
    D.add(mode, RULES[mode].equation, "Natural gradient from samples of q (full Gaussian)",
          "θ_k = m + A z_k, z_k ~ N(0, I), with A a factor of the covariance (C = A Aᵀ).  The score-function identity "
          "∇_{m,C} E_q[ℓ] = E_q[ℓ ∇_{m,C} log N(θ | m, C)] with the gradients of the log density by matrix calculus; "
          "whitened by A they depend on z alone, so the samples average draw-only statistics and A stays outside "
          "the mean (Eq. 4 with App. D; Wierstra et al. 2014, Sec. 3.3).",
          [(theta, mean + A * z), (A * A.T, cov, "="),
           (r"A^\top\nabla_m \log q(\theta_k)", white_m), (r"A^\top\nabla_C \log q(\theta_k) A", white_C)]
          + [(avg, TexForm(r"\frac{1}{S}\sum_k %s", (e,))) for avg, e in stats]
          + [(gm, reps[gm], r"\approx"), (GC, reps[GC], r"\approx")]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g, r"\approx") for i, g in enumerate(grads)])
    return grads

"""Samples of the Kronecker (matrix-normal) candidate for ``monte_carlo`` (Khan & Rue Sec. 4.4, Eq. 46: weight
perturbation): the expectations E_q[∇ℓ̄], E_q[∇²ℓ̄] of the full-Gaussian BLR over vec(W) are estimated at samples of
q, drawn by a sampler derived from the candidate's precision structure.

A Gaussian with precision S = L_S L_Sᵀ (Cholesky) is sampled by θ_k = m + L_S⁻ᵀ ε_k, ε_k ~ N(0, I): then
Cov θ_k = L_S⁻ᵀ L_S⁻¹ = (L_S L_Sᵀ)⁻¹ = S⁻¹.  The candidate maps that sampler with its identities: S = A ⊗ G,
L_S = L_A ⊗ L_G (``kronecker_cholesky``) and L_S⁻ᵀ vec(E) = vec(L_G⁻ᵀ E L_A⁻¹) (``kronecker_vec``), so

    W_k = M + L_G⁻ᵀ E_k L_A⁻¹,   E_k a rows × cols matrix of independent N(0, 1),

a draw of MN(M, A⁻¹, G⁻¹) (Zhang, Sun, Duvenaud & Grosse, ICML 2018, Alg. 1, which folds the KL weight λ and N into
the factors).  The oracles are evaluated at W_k.  The per-sample values that the structure's rules build from them
(the gradient, e.g. N g_k + δ W_k, and the Hessian's Kronecker factors, e.g. N a_kᵀa_k and b_kᵀb_k) are averaged
over the K samples term by term, each Kronecker factor on its own:

    (1/K) Σ_k L_k ⊗ R_k  ≈  L̄ ⊗ R̄,

K-FAC's independence of the two factors (``kronecker_gauss_newton``: E[a aᵀ ⊗ Λ] ≈ E[a aᵀ] ⊗ E[Λ]) taken over the
weight noise as well; exact for K = 1, Zhang et al.'s one sample per step.
"""
from __future__ import annotations

import sympy as sp

from blr_derive.core.errors import DerivationError
from blr_derive.rules.base import RULES, Sampling, TexForm
from blr_derive.rules.kronecker import CholeskyFactor, Kron, SamplePoints, interpret_vector


def sample_points(kctx, args, rule_name):
    """``kronecker_expectation`` of ``monte_carlo``: the oracles move from the mean to samples W_k of q."""
    samples = args.count("samples")
    args.done()
    D = kctx.D
    m, S = kctx.base
    E = sp.MatrixSymbol("E", kctx.rows, kctx.cols)
    W_k = sp.MatrixSymbol("W_k", kctx.rows, kctx.cols)
    eps = sp.MatrixSymbol("epsilon_k", *m.shape)
    theta = sp.MatrixSymbol("theta_k", *m.shape)
    L_S = CholeskyFactor(S)
    full = sp.MatAdd(m, sp.MatMul(sp.Inverse(sp.Transpose(L_S)), eps))
    try:
        expr = interpret_vector(full, {**kctx.env, eps: E}, kctx.sym)
    except DerivationError as exc:
        raise kctx.fail(f"approximation '{rule_name}': cannot sample the Kronecker candidate: {exc}") from None
    D.symbol_names.update({E: r"\mathbf{E}_k", W_k: r"\mathbf{W}_k", eps: r"\epsilon_k", theta: r"\theta_k"})
    kctx.mean_point = W_k
    kctx.sampling = SamplePoints(samples, E, W_k, expr)
    chol = Kron([(sp.Integer(1), CholeskyFactor(kctx.A), CholeskyFactor(kctx.G))])
    D.add(rule_name, RULES[rule_name].equation, "Monte Carlo expectations at samples of q",
          "The expectations of the full-Gaussian BLR are averages over K samples θ_k of q (weight perturbation, "
          "Sec. 4.4); with the Cholesky factor S = L_S L_Sᵀ of the precision, θ_k = m + L_S⁻ᵀ ε_k, ε_k ~ N(0, I), has "
          f"covariance (L_S L_Sᵀ)⁻¹ = S⁻¹. K = {samples} sample(s) per step.",
          [(theta, full),
           (r"\mathbb{E}_q[\nabla_\theta\bar\ell]", r"\hat{g}", r"\approx"),
           (r"\hat{g}", r"\frac{1}{K}\sum_k \nabla_\theta\bar\ell(\theta_k)"),
           (r"\mathbb{E}_q[\nabla^2_\theta\bar\ell]", r"\hat{H}", r"\approx"),
           (r"\hat{H}", r"\frac{1}{K}\sum_k \nabla^2_\theta\bar\ell(\theta_k)")])
    D.add("kronecker_cholesky", RULES["kronecker_cholesky"].equation, "Samples of the matrix-normal candidate",
          "The Cholesky factor of A ⊗ G is L_A ⊗ L_G (a Kronecker product of lower-triangular factors with positive "
          "diagonals), and (L_A ⊗ L_G)⁻ᵀ vec(E) = vec(L_G⁻ᵀ E L_A⁻¹): a sample of q is the mean plus two triangular "
          "solves of a rows × cols matrix of independent standard normals; no P × P matrix is formed.",
          [(L_S, chol.sympy()), (W_k, expr)])


def average_samples(kctx, rule_name):
    """``kronecker_statistics`` of ``monte_carlo``: the oracles at W_k become per-sample values (``g_k``, ...), and the
    per-sample gradient and Hessian factors are averaged over the samples into statistics (``D.sampling``)."""
    sm = kctx.sampling
    if sm is None:
        return
    D = kctx.D
    calls = [c for c in D.oracle_calls if c.argument == sm.point]
    D.oracle_calls = [c for c in D.oracle_calls if c.argument != sm.point]
    per = {}
    for sym, _, _, _ in calls:
        k = sp.MatrixSymbol(f"{sym.name}_k", *sym.shape)
        per[sym] = k
        D.symbol_names[k] = D.symbol_names.get(sym, sym.name) + "_k"
    taken = {str(kctx.M), str(kctx.A), str(kctx.G), str(D.recipe.family.theta)} | \
        {h.name for h in D.recipe.hyper} | {str(s) for s in per}
    stats, at = {}, set(per.values()) | {sm.point}
    try:
        grad = _average(kctx.grad.xreplace(per), at, stats, taken, D)
        if kctx.hess is not None:
            kctx.hess = Kron([(c, _average(L.xreplace(per), at, stats, taken, D),
                               _average(R.xreplace(per), at, stats, taken, D)) for c, L, R in kctx.hess.terms])
    except DerivationError as exc:
        raise kctx.fail(f"approximation '{rule_name}': cannot average over the samples: {exc}") from None
    old_grad, kctx.grad = kctx.grad, grad
    D.sampling = Sampling(sm.samples, sm.eps, sm.point, sm.expr, [(per[s], o) for s, o, _, _ in calls],
                          [(avg, X) for X, avg in stats.items()], draw="normal")
    eqs = [(avg, TexForm(r"\frac{1}{K}\sum_k %s", (X,))) for X, avg in stats.items()]
    if kctx.hess is not None:
        eqs.append((sp.Symbol(r"\hat{H}"), kctx.hess.sympy(), r"\approx"))
    D.add(rule_name, RULES[rule_name].equation, "Averages over the samples",
          "The oracles are evaluated at each sample W_k; the gradient and each Kronecker factor of the Hessian are "
          "averaged over the samples term by term. The average of the Kronecker products is taken as the Kronecker "
          "product of the averaged factors, (1/K) Σ_k L_k ⊗ R_k ≈ L̄ ⊗ R̄ (K-FAC's independence of the factors, "
          "here also over the weight noise; exact for one sample).",
          [(r"\nabla_\theta\bar\ell(\mathbf{W}_k)", old_grad.xreplace(per), r"\approx")] + eqs
          + [(r"\frac{1}{K}\sum_k \nabla_\theta\bar\ell(\mathbf{W}_k)", grad)])


def _average(e, per_sample, stats, taken, D):
    """e with every term that depends on a sample replaced by its average over the samples (a statistic): a sum term
    by term, a term c·X (c scalars, X a product of matrices) by c·X̄."""
    if not e.has(*per_sample):
        return e
    if isinstance(e, sp.MatAdd):
        return sp.MatAdd(*[_average(a, per_sample, stats, taken, D) for a in e.args])
    args = list(e.args) if isinstance(e, sp.MatMul) else [e]
    scalars = [a for a in args if not getattr(a, "is_Matrix", False)]
    mats = [a for a in args if getattr(a, "is_Matrix", False)]
    if any(s.has(*per_sample) for s in scalars):
        raise DerivationError(f"{e} is not linear in the values at the samples")
    X = sp.MatMul(*mats) if len(mats) > 1 else mats[0]
    if X not in stats:
        name = _stat_name(X)
        if name in taken:
            name += "_bar"
        taken.add(name)
        stats[X] = sp.MatrixSymbol(name, *X.shape)
        D.symbol_names[stats[X]] = r"\overline{%s}" % D.latex(X)
    coeff = sp.Mul(*scalars)
    return stats[X] if coeff == 1 else sp.MatMul(coeff, stats[X])


def _stat_name(X):
    """An identifier for the average of X: ``g`` for g_k, ``aTa`` for a_kᵀa_k."""
    if isinstance(X, sp.MatMul):
        return "".join(_stat_name(f) for f in X.args)
    if isinstance(X, sp.Transpose):
        return _stat_name(X.arg) + "T"
    name = getattr(X, "name", "s")
    return name[:-2] if name.endswith("_k") else name

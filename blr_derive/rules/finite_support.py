"""E_q[ℓ] over a finite support (rule ``exact``): Σ_θ q(θ)ℓ(θ) is exact for any explicit loss; its natural gradient
in μ (Eq. 4) from the probabilities written in μ, or, without a closed-form μ → ordinary map, through covariances
over the support."""
from __future__ import annotations

import itertools
import math

import sympy as sp

from blr_derive.core.exprfuncs import function_depth
from blr_derive.core.matexpr import is_mat
from blr_derive.core.specialfns import logsumexp
from blr_derive.rules.base import RULES, NaturalGradient
from blr_derive.rules.fisher import state_lambda, transcendental_map
from blr_derive.rules.program import new_def


#: the most support points whose probabilities finite_sum simplifies one by one
FINITE_SIMPLIFY_POINTS = 64


#: natural parameters up to which a finite sum without a closed-form μ → ordinary map is differentiated through
#: covariances over the support (the inverse of a symbolic F of this size stays small)
COVARIANCE_MAX_DIM = 3


#: the most (n + 1)-point subsets of the support over which F(λ)⁻¹Cov_q(T, ℓ) is written by the Cauchy–Binet formula
#: (:func:`_cauchy_binet_solve`); a larger support keeps the explicit inverse of the covariance sums
CAUCHY_BINET_MAX_SUBSETS = 500


#: how deeply non-polynomial functions may nest in a loss before its value at each support point is a named quantity
NESTED_INLINE = 2


def point_losses(D, loss, points):
    """ℓ(θ_k) at each support point.  A loss whose functions nest deeper than :data:`NESTED_INLINE` is not evaluated
    at the points symbolically: substituting numbers makes sympy evaluate every nested argument numerically again,
    in time exponential in the depth (sigmoid eight deep took minutes), and so does every later rebuild of the
    tree (common subexpressions, printing).  Each point's coordinates are instead named quantities of the update
    program (``theta_pt = -1``) and ℓ at them another (``loss_pt``), computed by the generated code: the sums over
    the support and their derivatives in μ or λ see one symbol per point (E_q[ℓ] = Σ_k q_k ℓ_k is linear in
    the ℓ_k)."""
    if function_depth(loss) <= NESTED_INLINE:
        return [loss.xreplace(pt) for pt in points]
    out = []
    for pt in points:
        at = {c: new_def(D, f"{c}_pt", sp.sympify(v)) for c, v in pt.items() if loss.has(c)}
        out.append(new_def(D, "loss_pt", loss.xreplace(at)))
        D.verbatim.add(out[-1])
    return out


def covariance_natural_gradient(fam, D, points, loss):
    """∇_μ E_q[ℓ] = F(λ)⁻¹ Cov_q(T, ℓ) with F(λ) = Cov_q(T) (Eq. 4; ∇_λ E_q[ℓ] = Cov_q(T, ℓ) for an exponential
    family), by :func:`_cauchy_binet_solve` where the support has at most :data:`CAUCHY_BINET_MAX_SUBSETS` subsets
    of n + 1 points, else every sum over the finite support written once as a named quantity: the log-partition A,
    each point's probability q_k = h(θ_k) e^{<λ, T(θ_k)> − A} (A as a logsumexp, finite at large |λ|), the mean μ,
    the covariances.  Differentiating the closed form of E_q[ℓ] in λ and simplifying took minutes for five points
    with T = log θ (no closed-form μ → ordinary map)."""
    n = len(fam.lam)
    # λ at the state, named once where η is not rational in the ordinary parameters (rules/fisher.py):
    # written in them, sympy turns each point's e^{<η(r), T> + log h} into a power (e^{k log r} = r^k) and the
    # log-sum-exps below into sums of such powers, which lose digits where q is concentrated (a Poisson on 0..12 at
    # r = 40: 1.3e-11, at r = 4000: 9e-7)
    eta = ([state_lambda(D, fam, i) for i in range(n)] if transcendental_map(fam)
           else [sp.sympify(e) for e in fam.eta])
    T_at = [[sp.sympify(t).xreplace(pt) for t in fam.T] for pt in points]
    logh = [fam.log_h.xreplace(pt) for pt in points]
    expo = [sp.Add(*[e * t for e, t in zip(eta, T)]) + lh for T, lh in zip(T_at, logh)]
    if math.comb(len(points), n + 1) <= CAUCHY_BINET_MAX_SUBSETS:
        return _cauchy_binet_solve(D, expo, T_at, loss if isinstance(loss, list) else point_losses(D, loss, points), n)
    A = new_def(D, "A_q", logsumexp(*expo) if len(expo) > 1 else expo[0])     # stable for large |λ|
    q = [new_def(D, "q_pt", sp.exp(x - A)) for x in expo]
    mu = [new_def(D, "mu_q", sp.Add(*[qk * T[i] for qk, T in zip(q, T_at)])) for i in range(n)]
    ell = loss if isinstance(loss, list) else point_losses(D, loss, points)
    cov = [new_def(D, "cov_q", sp.Add(*[qk * (T[i] - mu[i]) * lk for qk, T, lk in zip(q, T_at, ell)]))
           for i in range(n)]
    F = sp.zeros(n, n)
    for i in range(n):
        for j in range(i, n):
            F[i, j] = F[j, i] = new_def(D, "F_q", sp.Add(*[qk * (T[i] - mu[i]) * (T[j] - mu[j])
                                                        for qk, T in zip(q, T_at)]))
    return [sp.simplify(g) if n > 1 else g for g in F.inv() * sp.Matrix(cov)]


def _cauchy_binet_solve(D, expo, T_at, ell, n):
    """F(λ)⁻¹Cov_q(T, ℓ) by Cramer's rule, both determinants written by the Cauchy–Binet formula over the
    (n + 1)-point subsets S of the support, with no mean subtracted anywhere.  With Q = diag(q_k) and the rows
    (1, T(θ_k)) of the matrix U, UᵀQU = [[1, μᵀ], [μ, E_q[TTᵀ]]], whose determinant is that of its Schur complement
    E_q[TTᵀ] − μμᵀ = F (Σ_k q_k = 1); with column i + 1 of U replaced by ℓ_k (U_i), det(UᵀQU_i) is the determinant of
    F with its column i replaced by Cov_q(T, ℓ).  So

        g_i = Σ_S w_S det(U_S) det(U_{i,S}) / Σ_S w_S det(U_S)²,   w_S ∝ Π_{k∈S} q_k,

    (one coordinate: g = Σ_{j<k} w_jk (T_k − T_j)(ℓ_k − ℓ_j) / Σ_{j<k} w_jk (T_k − T_j)²), the weights normalized by
    a log-sum-exp over the subsets (the largest is finite however concentrated q is).  The denominator is a sum of
    nonnegative terms and no term subtracts μ, which rounds to a support point where q is concentrated on it: the
    sums of :func:`covariance_natural_gradient`'s fallback, F₁₁F₂₂ − F₁₂² and T_k − μ, are rounding noise there (a
    lattice with T = (k, k²) off by 59 % at q_1 = 1e-13, a Bernoulli in its logit off by 20 % at λ = 30 and NaN at
    |λ| ≥ 400), where this form keeps full precision.  Each determinant is a named quantity: a later expansion of
    their products into monomials would cancel again."""
    subsets = list(itertools.combinations(range(len(T_at)), n + 1))
    log_w = [sp.Add(*[expo[k] for k in S]) for S in subsets]
    norm = new_def(D, "A_sub", logsumexp(*log_w))
    den, num = [], [[] for _ in range(n)]
    for S, lw in zip(subsets, log_w):
        US = sp.Matrix([[1] + list(T_at[k]) for k in S])
        det = US.det(method="berkowitz")
        if det == 0:
            continue
        w = new_def(D, "w_sub", sp.exp(lw - norm))
        det = new_def(D, "det_sub", det)
        den.append(w * det ** 2)
        for i in range(n):
            Ui = US.copy()
            Ui[:, i + 1] = sp.Matrix([ell[k] for k in S])
            num[i].append(w * det * new_def(D, "det_sub", Ui.det(method="berkowitz")))
    det_f = new_def(D, "detF_q", sp.Add(*den))
    return [new_def(D, "ngrad_q", sp.Add(*num[i]) / det_f) for i in range(n)]


def finite_sum(recipe, D, points):
    """E_q[ℓ] = Σ_θ q(θ) ℓ(θ) over a finite support (exact for any explicit loss), then ∇_μ.

    With a closed-form μ → ordinary map the sum is written in μ and differentiated; otherwise it is
    written in λ and ∇_μ = F(λ)⁻¹ ∇_λ (Eq. 4)."""
    fam = recipe.family
    logq = fam.log_density()
    ell = point_losses(D, recipe.loss, points)
    terms = [(sp.exp(logq.xreplace(pt)), l) for pt, l in zip(points, ell)]
    if fam.ord_from_mu:
        e_loss = sp.Integer(0)
        # each probability is simplified on a small support; on a large one (the multinomial's hundreds of count
        # vectors) a simplify per point dominates and the expansion below does the same work once
        tidy_q = sp.simplify if len(points) <= FINITE_SIMPLIFY_POINTS else (lambda e: e)
        for q, l in terms:
            e_loss += tidy_q(q.xreplace(fam.ord_from_mu)) * l
        e_loss = sp.expand(e_loss)
        grads = [sp.expand(sp.diff(e_loss, u)) for u in fam.mu]
        D.expected_loss = e_loss
        how = "the support probabilities written in μ"
    elif len(fam.lam) <= COVARIANCE_MAX_DIM and not any(is_mat(l) for l in fam.lam):
        grads = covariance_natural_gradient(fam, D, points, ell)
        e_loss = sum((q * l for q, l in terms), sp.Integer(0))
        D.expected_loss = e_loss
        how = ("the support probabilities q(θ) as named quantities: ∇_λ E_q[ℓ] = Cov_q(T, ℓ) and F(λ) = Cov_q(T), "
               "sums over the support, and ∇_μ = F(λ)⁻¹∇_λ (Eq. 4)")
    else:
        lam_of = dict(zip(fam.lam, fam.eta))
        e_lam = sum((q.xreplace(fam.ord_from_nat) * l for q, l in terms), sp.Integer(0))
        F = fam.fisher_matrix()
        d = sp.Matrix([sp.diff(e_lam, l) for l in fam.lam])
        grads = [sp.simplify(sp.simplify(g.rewrite(sp.exp)).xreplace(lam_of)) for g in F.inv() * d]
        e_loss = sp.simplify(e_lam.xreplace(lam_of))
        how = "the support probabilities written in λ; ∇_μ = F(λ)⁻¹∇_λ (Eq. 4)"
    D.natural_gradient = NaturalGradient(list(grads))
    D.add("exact", RULES["exact"].equation, "Exact expected loss: a finite sum over the support",
          f"The support of q is finite ({len(points)} points), so E_q[ℓ] = Σ_θ q(θ)ℓ(θ) is exact for any loss; "
          f"it is differentiated with {how}.",
          [((r"\mathbb{E}_q[\bar\ell]"), e_loss)]
          + [((r"\nabla_{\mu^{(%d)}}\mathbb{E}_q[\bar\ell]" % (i + 1)), g) for i, g in enumerate(grads)])
    return grads

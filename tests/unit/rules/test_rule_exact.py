"""Rule ``exact`` (Sec. 1.3.3, Eq. 14): the closed-form E_q[ℓ] of an explicit loss and ∇_μ E_q[ℓ] read off it.

Three branches of the rule, each against an independent computation of E_q[ℓ] as a function of μ:
a quartic loss under a full Gaussian (tensor Gauss–Hermite quadrature, exact for polynomials), a loss linear in
the statistics of a Gamma candidate (scipy quadrature, μ → (α, β) inverted numerically), and a finite sum over
the support of a categorical candidate (written out by hand).  The generated steps are Eq. 6 with those
gradients."""
from functools import lru_cache

import numpy as np
from scipy import integrate, optimize, special, stats

from blr_derive import api
from blr_derive.families.symbolic import evaluate


@lru_cache(maxsize=None)
def derived(text):
    return api.derive(text)


GH_X, GH_W = np.polynomial.hermite_e.hermegauss(10)     # probabilists' Gauss–Hermite: exact to degree 19
GH_W = GH_W / GH_W.sum()

# ---------------------------------------------------------------------------- polynomial, full Gaussian

QUARTIC = """
name: exact_quartic
family: gaussian_full
loss:
  expression: (theta.T*theta)**2 + b.T*theta
  data: {b: {shape: [P]}}
hyperparameters: {rho: 0.5}
approximations: [exact]
"""
B_VEC = np.array([0.5, -1.0, 0.25])


def quartic(T):                     # T: (..., 3)
    return np.sum(T ** 2, axis=-1) ** 2 + T @ B_VEC


def expect_quadrature(U1, U2):
    """E_q[ℓ] for q = N(U1, U2 − U1U1ᵀ) by a 10³-point tensor Gauss–Hermite rule (exact: ℓ has degree 4)."""
    C = U2 - np.outer(U1, U1)
    C = (C + C.T) / 2
    L = np.linalg.cholesky(C)
    Z = np.stack(np.meshgrid(GH_X, GH_X, GH_X, indexing="ij"), -1).reshape(-1, 3)
    W = np.einsum("i,j,k->ijk", GH_W, GH_W, GH_W).ravel()
    return W @ quartic(U1 + Z @ L.T)


def test_quartic_expected_loss_and_natural_gradient_match_quadrature():
    d = derived(QUARTIC)
    fam, r = d.recipe.family, d.recipe
    mu1, mu2 = fam.mu
    dims = {fam.dim: 3}
    m = np.array([0.3, -0.7, 0.5])
    C = np.array([[0.6, 0.1, -0.2], [0.1, 0.4, 0.05], [-0.2, 0.05, 0.8]])
    U1, U2 = m, C + np.outer(m, m)
    env = {mu1: U1, mu2: U2, r.data[0].symbol: B_VEC}
    np.testing.assert_allclose(evaluate(d.expected_loss, env, dims), expect_quadrature(U1, U2), rtol=1e-12)
    g1 = evaluate(d.natural_gradient.grads[0], env, dims).ravel()
    g2 = evaluate(d.natural_gradient.grads[1], env, dims)
    h = 1e-4
    # E_q[ℓ] is a polynomial of degree 2 in U2 and 4 in U1: central differences are exact in U2 and carry an
    # O(h²) error (~1e-7 relative here) in U1
    fd1 = np.array([(expect_quadrature(U1 + h * e, U2) - expect_quadrature(U1 - h * e, U2)) / (2 * h)
                    for e in np.eye(3)])
    np.testing.assert_allclose(g1, fd1, rtol=1e-6, atol=1e-7)
    for i in range(3):
        for j in range(i, 3):
            D = np.zeros((3, 3))
            D[i, j] = D[j, i] = h       # a symmetric perturbation measures G_ij + G_ji (G_ii on the diagonal)
            fd = (expect_quadrature(U1, U2 + D) - expect_quadrature(U1, U2 - D)) / (2 * h)
            want = g2[i, i] if i == j else g2[i, j] + g2[j, i]
            np.testing.assert_allclose(want, fd, rtol=1e-7, atol=1e-8)


def test_quartic_generated_step_is_eq_6():
    d = derived(QUARTIC)
    mod = d.compile("numpy")
    m = np.array([0.3, -0.7, 0.5])
    S = np.linalg.inv(np.array([[0.6, 0.1, -0.2], [0.1, 0.4, 0.05], [-0.2, 0.05, 0.8]]))
    rho = 0.3
    C = np.linalg.inv(S)
    # natural gradient by hand: E_q[ℓ] = tr(μ2)² + 2 tr(μ2²) − 2 (μ1ᵀμ1)² + bᵀμ1 (Isserlis)
    G1 = B_VEC - 8 * (m @ m) * m
    U2 = C + np.outer(m, m)
    G2 = 2 * np.trace(U2) * np.eye(3) + 4 * U2
    lam1, lam2 = (1 - rho) * S @ m - rho * G1, -(1 - rho) * S / 2 - rho * G2
    S_ref = -2 * lam2
    out = mod.step(mod.init(m=m, S=S), data={"b": B_VEC}, rho=rho)
    np.testing.assert_allclose(out["S"], S_ref, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(out["m"], np.linalg.solve(S_ref, lam1), rtol=1e-10, atol=1e-12)


# ---------------------------------------------------------------------------- conjugate, Gamma candidate

GAMMA = """
name: exact_gamma
family: gamma
loss: {expression: 'b*theta - a*log(theta)'}
hyperparameters: {rho: 0.5, a: 2.0, b: 3.0}
approximations: [exact]
"""


def gamma_expected_loss(alpha, beta, a, b):
    """E_q[bθ − a log θ] under Gamma(α, rate β), by scipy quadrature (relative error ~1e-12)."""
    dist = stats.gamma(alpha, scale=1 / beta)
    val, _ = integrate.quad(lambda t: (b * t - a * np.log(t)) * dist.pdf(t), 0, np.inf, epsabs=0, epsrel=1e-13,
                            limit=200)
    return val


def gamma_from_mu(mu1, mu2):
    """(α, β) with E[log θ] = ψ(α) − log β = μ1 and E[θ] = α/β = μ2 (ψ(α) − log α is increasing)."""
    alpha = optimize.brentq(lambda a: special.digamma(a) - np.log(a) - (mu1 - np.log(mu2)), 1e-3, 1e4,
                            xtol=1e-15, rtol=1e-15)
    return alpha, alpha / mu2


def test_conjugate_gamma_natural_gradient_matches_finite_differences_in_mu():
    d = derived(GAMMA)
    r = d.recipe
    a, b = 1.7, 2.4
    alpha, beta = 2.5, 1.5
    mu1, mu2 = special.digamma(alpha) - np.log(beta), alpha / beta
    env = {r.hyper_symbol("a"): a, r.hyper_symbol("b"): b}
    got = [evaluate(g, env) for g in d.natural_gradient.grads]
    F = lambda u1, u2: gamma_expected_loss(*gamma_from_mu(u1, u2), a, b)
    h = 1e-4
    # E_q[ℓ] is linear in μ, so the central difference carries only the quadrature and root-finding errors
    # (~1e-12 relative on E ≈ 1, i.e. ~1e-8 after dividing by 2h)
    fd = [(F(mu1 + h, mu2) - F(mu1 - h, mu2)) / (2 * h), (F(mu1, mu2 + h) - F(mu1, mu2 - h)) / (2 * h)]
    np.testing.assert_allclose(got, fd, rtol=1e-6, atol=1e-6)
    np.testing.assert_allclose(got, [-a, b], rtol=1e-14)
    # the generated step: λ = (α − 1, −β) ← (1 − ρ)λ − ρ∇_μE_q[ℓ] (Eq. 6, h(θ) = 1)
    rho = 0.3
    out = d.compile("numpy").step({"alpha": np.array(alpha), "beta": np.array(beta)}, a=a, b=b, rho=rho)
    lam1 = (1 - rho) * (alpha - 1) - rho * fd[0]
    lam2 = (1 - rho) * (-beta) - rho * fd[1]
    np.testing.assert_allclose([out["alpha"], out["beta"]], [lam1 + 1, -lam2], rtol=1e-6)


# ---------------------------------------------------------------------------- finite support, categorical

CATEGORICAL = """
name: exact_categorical
family: {name: categorical, K: 4}
loss: {expression: 'exp(c*theta1) + log(1 + theta2 + 2*theta3) + c*theta3**2'}
hyperparameters: {rho: 0.5, c: 0.7}
approximations: [exact]
"""


def cat_loss(k, c):
    """ℓ at the one-hot vector of class k (0-based; class 3 is the reference class, all statistics 0)."""
    th = np.zeros(3)
    if k < 3:
        th[k] = 1.0
    return np.exp(c * th[0]) + np.log(1 + th[1] + 2 * th[2]) + c * th[2] ** 2


def test_categorical_finite_sum_natural_gradient_and_step():
    d = derived(CATEGORICAL)
    r, fam = d.recipe, d.recipe.family
    c = 0.9
    ell = np.array([cat_loss(k, c) for k in range(4)])

    def E(mu):                       # Σ_k q(k) ℓ(k), μ_k = q(k) for the first K − 1 classes
        return mu @ ell[:3] + (1 - mu.sum()) * ell[3]
    p = np.array([0.1, 0.25, 0.4])
    env = {r.hyper_symbol("c"): c, **{fam.params[f"p{k + 1}"].symbol: p[k] for k in range(3)},
           **{u: v for u, v in zip(fam.mu, p)}}
    got = np.array([evaluate(g, env) for g in d.natural_gradient.grads])
    h = 1e-5
    fd = np.array([(E(p + h * e) - E(p - h * e)) / (2 * h) for e in np.eye(3)])   # E is linear in μ
    np.testing.assert_allclose(got, fd, rtol=1e-9, atol=1e-10)
    # Eq. 6 in λ_k = log(p_k/p_K), then back to probabilities by a softmax
    rho = 0.4
    p4 = 1 - p.sum()
    lam = (1 - rho) * np.log(p / p4) - rho * fd
    w = np.exp(np.append(lam, 0.0))
    p_ref = (w / w.sum())[:3]
    out = d.compile("numpy").step({f"p{k + 1}": np.array(p[k]) for k in range(3)}, c=c, rho=rho)
    np.testing.assert_allclose([out[f"p{k + 1}"] for k in range(3)], p_ref, rtol=1e-8)

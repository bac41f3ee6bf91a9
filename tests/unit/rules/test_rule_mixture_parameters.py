"""Identity ``mixture_parameters`` (Sec. 3.2, Eq. 27): the joint q(θ, z = k) = π_k q_k(θ) is a conditional
exponential family whose natural parameters are component k's λ_k and whose expectation parameters are
μ_k = E_q[1[z = k] T(θ)] = π_k E_{q_k}[T(θ)].

The step the engine records (``derive(...).step("mixture_parameters")``) is evaluated numerically for the
mean-field and the full Gaussian components and checked against:

* λ_k: log q_k(θ) − ⟨λ_k, T(θ)⟩ is the same number at every θ (the density from scipy.stats), i.e. λ_k are the
  natural parameters of N(m_k, S_k⁻¹);
* μ_k: a Monte Carlo estimate of E_q[1[z = k] T(θ)] from draws of the *joint* (z ~ π, then θ ~ q_z), within 5
  standard errors, and the deterministic π_k E_{q_k}[T] by Gauss-Hermite quadrature.
"""
import functools

import numpy as np
import scipy.stats
import sympy as sp

from blr_derive import api
from blr_derive.families.symbolic import evaluate


@functools.lru_cache(maxsize=None)
def step_of(base):
    d = api.derive(family={"mixture": base, "components": 2, "weights": [0.3]}, approximations=["delta"],
                   hyperparameters={"rho": 0.5}, name=f"mp_{base}")
    st = d.step("mixture_parameters")
    eqs = {str(lhs): rhs for lhs, rhs in st.equations}
    syms = {str(s): s for e in eqs.values() for s in e.free_symbols}
    dims = {d_ for s in syms.values() if isinstance(s, sp.MatrixSymbol) for d_ in s.shape if d_.is_Symbol}
    return st, eqs, syms, dims


def test_the_step_cites_eq_27_and_lists_lambda_k_and_mu_k():
    for base in ("gaussian_diag", "gaussian_full"):
        st, eqs, _, _ = step_of(base)
        assert st.equation == "Eq. 27"
        assert set(eqs) == {"lambda1_k", "lambda2_k", "mu1_k", "mu2_k"}


PI, M, S = 0.3, 0.7, 2.5                 # component k; the other component is N(−1, 1) with weight 0.7


def test_diag_natural_parameters_make_log_q_k_minus_lambda_T_constant():
    _, eqs, syms, _ = step_of("gaussian_diag")
    vals = {syms["m_k"]: M, syms["s_k"]: S}
    lam1, lam2 = evaluate(eqs["lambda1_k"], vals), evaluate(eqs["lambda2_k"], vals)
    th = np.linspace(-4, 4, 17)
    rest = scipy.stats.norm.logpdf(th, M, 1 / np.sqrt(S)) - (lam1 * th + lam2 * th ** 2)
    # −A(λ) at every θ: the spread is rounding of O(10) numbers, ~1e-14
    assert np.ptp(rest) < 1e-12


def test_diag_expectation_parameters_are_the_joint_moments_monte_carlo():
    _, eqs, syms, _ = step_of("gaussian_diag")
    vals = {syms["m_k"]: M, syms["s_k"]: S, syms["pi_k"]: PI}
    mu = np.array([evaluate(eqs["mu1_k"], vals), evaluate(eqs["mu2_k"], vals)])
    rng = np.random.default_rng(0)
    n = 400_000
    z = rng.random(n) < PI                                   # draws of the joint: z first, then θ | z
    theta = np.where(z, M + rng.standard_normal(n) / np.sqrt(S), -1.0 + rng.standard_normal(n))
    samples = np.stack([z * theta, z * theta ** 2])          # 1[z = k] T(θ)
    est, se = samples.mean(axis=1), samples.std(axis=1) / np.sqrt(n)
    # a z-test per coordinate at 5 standard errors (fixed seed); a missing π_k would be off by > 100 σ
    assert np.all(np.abs(mu - est) < 5 * se), (mu, est, se)
    x, w = np.polynomial.hermite_e.hermegauss(20)            # π_k E_{q_k}[T] exactly (degree ≤ 2)
    w = w / np.sqrt(2 * np.pi)
    th = M + x / np.sqrt(S)
    np.testing.assert_allclose(mu, PI * np.array([w @ th, w @ th ** 2]), rtol=1e-13)


M_F = np.array([0.5, -1.0])
S_F = np.array([[2.0, 0.6], [0.6, 1.0]])


def test_full_natural_parameters_make_log_q_k_minus_lambda_T_constant():
    _, eqs, syms, dims = step_of("gaussian_full")
    (P,) = dims
    vals = {syms["m_k"]: M_F, syms["S_k"]: S_F}
    lam1 = evaluate(eqs["lambda1_k"], vals, {P: 2}).ravel()
    lam2 = evaluate(eqs["lambda2_k"], vals, {P: 2})
    th = np.random.default_rng(1).normal(size=(25, 2)) * 2
    logq = scipy.stats.multivariate_normal(M_F, np.linalg.inv(S_F)).logpdf(th)
    rest = logq - (th @ lam1 + np.einsum("ni,ij,nj->n", th, lam2, th))       # ⟨λ₂, θθᵀ⟩ = θᵀλ₂θ
    assert np.ptp(rest) < 1e-12


def test_full_expectation_parameters_are_the_joint_moments_monte_carlo():
    _, eqs, syms, dims = step_of("gaussian_full")
    (P,) = dims
    vals = {syms["m_k"]: M_F, syms["S_k"]: S_F, syms["pi_k"]: PI}
    mu1 = evaluate(eqs["mu1_k"], vals, {P: 2}).ravel()
    mu2 = evaluate(eqs["mu2_k"], vals, {P: 2})
    rng = np.random.default_rng(2)
    n = 400_000
    z = rng.random(n) < PI
    L = np.linalg.cholesky(np.linalg.inv(S_F))
    theta = np.where(z[:, None], M_F + rng.standard_normal((n, 2)) @ L.T,
                     np.array([1.0, 2.0]) + 0.5 * rng.standard_normal((n, 2)))
    t1 = z[:, None] * theta
    t2 = (z[:, None, None] * theta[:, :, None] * theta[:, None, :]).reshape(n, 4)
    for mu, s in ((mu1, t1), (mu2.ravel(), t2)):
        est, se = s.mean(axis=0), s.std(axis=0) / np.sqrt(n)
        assert np.all(np.abs(mu - est) < 5 * se), (mu, est, se)             # 5-σ z-test, fixed seed
    # and exactly: π_k (m, S⁻¹ + mmᵀ) — the moments of N(m, S⁻¹), here from a 2-D Gauss-Hermite rule
    x, w = np.polynomial.hermite_e.hermegauss(6)
    X1, X2 = np.meshgrid(x, x, indexing="ij")
    W = np.outer(w, w).ravel() / (2 * np.pi)
    pts = M_F + np.stack([X1.ravel(), X2.ravel()], axis=1) @ L.T
    np.testing.assert_allclose(mu1, PI * W @ pts, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(mu2, PI * np.einsum("n,ni,nj->ij", W, pts, pts), rtol=1e-12, atol=1e-14)

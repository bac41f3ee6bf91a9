"""Hand-written references for latent-variable models written as factors (tests/unit/candidates/
test_latent_factors.py): closed-form EM and variational coordinate-ascent updates from Bishop, PRML (2006), Chs. 9,
10 and 12, and Tipping & Bishop (1999), in plain numpy.  Nothing here is derived: every formula is typed from the
book, so that the generated steps are compared with an independent computation."""
from __future__ import annotations

import numpy as np
from scipy.special import logsumexp


def ppca_em_step(Y, w, mu, sigma2):
    """One EM step of probabilistic PCA with one latent dimension and a known noise variance σ² (PRML Eqs.
    12.54-12.56 with M = 1, M = wᵀw + σ²), the M-step taken coordinate-wise: w first (with the current μ), then
    μ with the new w.  Returns (w, mu, E[z_n], 1/Var[z_n])."""
    M = w @ w + sigma2
    Ez = (Y - mu) @ w / M                               # E[z_n] = M⁻¹ wᵀ(y_n − μ)
    Ezz = sigma2 / M + Ez ** 2                          # E[z_n²] = σ² M⁻¹ + E[z_n]²
    w_new = Ez @ (Y - mu) / Ezz.sum()                   # Σ E[z_n](y_n − μ) / Σ E[z_n²]
    mu_new = (Y.sum(axis=0) - w_new * Ez.sum()) / len(Y)
    return w_new, mu_new, Ez, np.full(len(Y), M / sigma2)


def ppca_ml_covariance_part(Y, sigma2):
    """w wᵀ at the maximum-likelihood solution of one-dimensional PPCA with a known σ² (Tipping & Bishop 1999, Eq. 7;
    PRML Eq. 12.45): (λ₁ − σ²) u₁u₁ᵀ from the leading eigenpair of the sample covariance (divided by N)."""
    C = np.cov(Y.T, bias=True)
    lam, U = np.linalg.eigh(C)
    return (lam[-1] - sigma2) * np.outer(U[:, -1], U[:, -1])


def factor_model_step(Y, w1, w2, mu, alpha, beta, a0, b0):
    """One coordinate-ascent step of a linear-Gaussian model with two latent factors z_n ~ N(0, I),
    y_n | z_n ~ N(W z_n + μ, τ⁻¹ I), W = [w1 w2], and q(τ) = Gamma(α, β) (prior Gamma(a0, b0)); W and μ point
    estimates updated one after the other, then q(τ) (PRML Eqs. 12.54-12.56 with E[τ] for 1/σ², and Eq. 10.29-10.30
    for the precision).  Returns the new parameters and the rows' posterior (mean (N, 2), precision (2, 2))."""
    N, P = Y.shape
    tau = alpha / beta
    W = np.stack([w1, w2], axis=1)
    S = np.eye(2) + tau * W.T @ W                       # posterior precision of z_n (the same for every row)
    Sinv = np.linalg.inv(S)
    m = tau * (Y - mu) @ W @ Sinv                       # rows: E[z_n] = S⁻¹ τ Wᵀ(y_n − μ)
    Ezz = N * Sinv + m.T @ m                            # Σ_n E[z_n z_nᵀ]
    w1 = ((Y - mu).T @ m[:, 0] - Ezz[0, 1] * w2) / Ezz[0, 0]
    w2 = ((Y - mu).T @ m[:, 1] - Ezz[0, 1] * w1) / Ezz[1, 1]
    W = np.stack([w1, w2], axis=1)
    mu = (Y.sum(axis=0) - W @ m.sum(axis=0)) / N
    R = Y - mu
    sq = (R * R).sum() - 2 * np.sum((R @ W) * m) + np.trace(W.T @ W @ Ezz)     # Σ_n E‖y_n − W z_n − μ‖²
    return w1, w2, mu, a0 + N * P / 2, b0 + sq / 2, m, S


def conjugate_regression(X, y, alpha, tau):
    """The exact posterior N(m, S⁻¹) of Bayesian linear regression with prior N(0, α⁻¹I) and noise precision τ
    (PRML Eqs. 3.53-3.54): S = αI + τXᵀX, m = τ S⁻¹Xᵀy."""
    S = alpha * np.eye(X.shape[1]) + tau * X.T @ X
    return np.linalg.solve(S, tau * X.T @ y), S


def vb_regression_step(X, y, alpha, a, b, a0, b0):
    """One coordinate-ascent step of variational Bayesian linear regression with a Gamma(a0, b0) prior on the noise
    precision τ (mean field q(θ)q(τ), PRML Sec. 10.1): q(θ) is the posterior of Eqs. 3.53-3.54 with E[τ] for β, then
    q(τ) = Gamma(a0 + N/2, b0 + E‖y − Xθ‖²/2) with E‖y − Xθ‖² = ‖y − Xm‖² + tr(XᵀX S⁻¹)."""
    m, S = conjugate_regression(X, y, alpha, a / b)
    r = y - X @ m
    sq = r @ r + np.trace(X.T @ X @ np.linalg.inv(S))
    return m, S, a0 + len(y) / 2, b0 + sq / 2


def mixture_of_regressions_step(x, y, pi, beta, s2):
    """One EM step of a mixture of linear regressions with a noise variance per component (PRML Sec. 14.5.1, there
    with one shared variance): responsibilities, then the weights, each component's weighted least squares and its
    residual variance at the new coefficients."""
    mean = x @ beta.T                                                    # (N, K)
    logp = np.log(pi) - 0.5 * np.log(2 * np.pi * s2) - (y[:, None] - mean) ** 2 / (2 * s2)
    r = np.exp(logp - logsumexp(logp, axis=1, keepdims=True))
    nk = r.sum(axis=0)
    beta = np.stack([np.linalg.solve((x * r[:, k, None]).T @ x, (x * r[:, k, None]).T @ y) for k in range(len(nk))])
    s2 = np.array([r[:, k] @ (y - x @ beta[k]) ** 2 / nk[k] for k in range(len(nk))])
    return r, nk / len(y), beta, s2

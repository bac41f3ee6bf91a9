"""matrix_normal (Gupta & Nagar Thm. 2.2.1): MN(M, A⁻¹, G⁻¹) is the Gaussian over vec(W) (column-major) with mean
vec(M) and precision A ⊗ G — the identity the Kronecker candidate starts from.

Checked numerically: the matrix-normal log density -½ tr(A (W-M)ᵀ G (W-M)) + (r/2) log|A| + (c/2) log|G| - (rc/2)
log 2π equals the Gaussian log density of vec(W) with precision A ⊗ G; and Monte Carlo draws
W = M + G⁻¹ chol(G) E chol(A)ᵀ A⁻¹ have covariance (A ⊗ G)⁻¹ (entrywise z-tests)."""
import numpy as np

from blr_derive import api
from kronecker_recipes import FULL, recipe_text

R_, C_ = 2, 3


def vec(W):
    return W.reshape(-1, order="F")


def spd(rng, d):
    Q = rng.normal(size=(d, d))
    return Q @ Q.T / d + np.eye(d)


def test_matrix_normal_density_is_the_gaussian_over_vec_with_kronecker_precision():
    rng = np.random.default_rng(0)
    A, G, M = spd(rng, C_), spd(rng, R_), rng.normal(size=(R_, C_))
    for _ in range(3):
        W = rng.normal(size=(R_, C_))
        D = W - M
        mn = (-0.5 * np.trace(A @ D.T @ G @ D) + R_ / 2 * np.linalg.slogdet(A)[1] + C_ / 2 * np.linalg.slogdet(G)[1]
              - R_ * C_ / 2 * np.log(2 * np.pi))
        S = np.kron(A, G)
        d = vec(D)
        gauss = -0.5 * d @ S @ d + 0.5 * np.linalg.slogdet(S)[1] - R_ * C_ / 2 * np.log(2 * np.pi)
        np.testing.assert_allclose(mn, gauss, rtol=1e-12)


def test_draws_of_the_matrix_normal_have_the_kronecker_covariance():
    rng = np.random.default_rng(1)
    A, G, M = spd(rng, C_), spd(rng, R_), rng.normal(size=(R_, C_))
    LA, LG = np.linalg.cholesky(A), np.linalg.cholesky(G)
    n = 40000
    E = rng.normal(size=(n, R_, C_))
    W = M + np.linalg.solve(G, LG) @ E @ LA.T @ np.linalg.inv(A)
    w = W.transpose(0, 2, 1).reshape(n, -1)              # column-major vec of each draw
    cov = np.linalg.inv(np.kron(A, G))
    d = w - vec(M)
    prods = d[:, :, None] * d[:, None, :]
    z = (prods.mean(0) - cov) / (prods.std(0) / np.sqrt(n))
    assert np.abs(z).max() < 4.5


def test_the_candidate_state_is_M_A_G():
    d = api.derive(recipe_text(FULL))
    mod = d.compile("numpy")
    assert mod.STATE == ("M", "A", "G")
    assert mod.SHAPES["M"] == ("d_out", "d_in") and mod.SHAPES["A"] == ("d_in", "d_in")
    assert set(mod.SYMMETRIC) == {"A", "G"}

"""catalog/evon.yaml's generated numpy EVON at its fixed point on binary logistic regression (issue 41: "check the
paper's claim that it recovers the exact Gaussian posterior ... (and binary logistic regression at its fixed
point)"), against independent computations of the fixed point the BLR predicts.

Which fixed point.  EVON is the BLR (Khan & Rue 2023, Eq. 6) over q = N(M, Q diag(1/s) Qᵀ), Q = Q_R ⊗ Q_L fixed
(no refresh within the run), with the Gaussian's natural gradients in the rotated coordinates (Eqs. 10-11: the
mean-field Gaussian's update, Sec. 4.4, Eq. 46 with Price's estimate) and the improved-BLR correction of the
precision (App. F), the slides' Algorithm 2 lines 1-8.  A stationary point of lines 5-8 with deterministic
estimates has Ḡ = E[G°] (line 5), U = 0 (line 7: E[G°] + δ Qᵀ M = 0 rotated, i.e. E_q[∇ℓ] + δ M = 0 — N ℓ̄ is
the data term and N δ the prior precision), and Ĥ = H (line 6: H' − H = (1−β2)x(1 + (1−β2)x/(2(H + δ))) with
x = Ĥ − H vanishes at x = 0; its other root makes H + δ negative), i.e. s = N(diag(Qᵀ E_q[∇²ℓ] Q) + δ) by
Price's theorem (Eq. 44/46: E[E ⊙ G°/V] is the diagonal of the rotated expected Hessian).  So the BLR predicts:

* mean: E_q[∇ℓ(θ)] + δ m = 0;
* precision in the basis: the DIAGONAL OF THE ROTATED PRECISION, s = N diag(Qᵀ (E_q[∇²ℓ] + δ I) Q) — not the
  inverse of the covariance's diagonal (the mean-field fixed point, Eq. 11 restricted to the diagonal);
* with the delta method (expectations at the mean, Sec. 4.2), m = the MAP and s = N diag(Qᵀ (∇²ℓ(m) + δ I) Q):
  the Laplace approximation restricted to covariances Q diag(·) Qᵀ.  Where Q is an eigenbasis of ∇²ℓ(MAP) (always
  possible when W is a column: Q_L is then a full d × d rotation), this is the full Laplace posterior.

The expectations.  The generated module's Monte Carlo over q is replaced by a deterministic cubature: its draws
are the 2D points ±√D e_j (D = the number of weights) with mc_samples = 2D, the spherical rule exact for
polynomials of degree ≤ 3 under N(0, I).  Then every step is deterministic, Price's estimate for entry j is the
central difference of the rotated gradient along Q e_j with step √D σ_j, and the run has a fixed point: the
cubature version of the two equations above.  It is computed independently here (``cubature_fixed_point``: the
equations in vec form with Q = kron(Q_R, Q_L) solved by scipy.optimize.root), and the delta-method fixed point
by scipy.optimize.minimize (MAP) and the closed-form Hessian at it (``laplace``).  The cubature and the delta
method differ by O(σ²) = O(1/N): the test measures that gap and its 1/N scaling, it does not hide it.
Against the fixed point with exact Gaussian expectations (``exact_vi_fixed_point``: Gauss-Hermite on each logit's
1-D Gaussian), the cubature's fixed point is nearer than the delta method's.

Not tested here (measured once, scratch script): with true Gaussian draws (mc_samples 8 or 32, beta2 0.99, the last
half of 4000 / 2000 steps averaged) the mean is within 8e-4 / 3.8e-4 of the exact VI fixed point, but the
precision is 2.0e-2 / 8.3e-3 above it: the improved-BLR correction's quadratic term ½(1−β2)²(Ĥ − H)²/(H + δ)
(line 6) has a positive mean under a noisy Ĥ, a bias that falls with the number of samples.
"""
from __future__ import annotations

import numpy as np
import pytest
from scipy import optimize
from scipy.special import expit

from conftest import load_generated
from evon_reference import eig_desc


class Cubature:
    """A stand-in for the generator: ``standard_normal(shape)`` returns +√D e_1, −√D e_1, +√D e_2, ... in turn
    (e_j in column-major order of ``shape``), so mc_samples = 2D draws per step are the spherical cubature rule."""

    def __init__(self):
        self.k = 0

    def standard_normal(self, shape):
        D = int(np.prod(shape))
        j, sign = divmod(self.k % (2 * D), 2)
        self.k += 1
        z = np.zeros(D)
        z[j] = np.sqrt(D) * (1.0 if sign == 0 else -1.0)
        return z.reshape(shape, order="F")


def problem(shape, n=120, seed=11):
    """Binary logistic regression on W of ``shape``: logit_i = ⟨X_i, W⟩_F, ℓ̄(W) = (1/n) Σ log(1 + exp(−y_i logit_i))
    with y_i ∈ {−1, +1} drawn from a logistic model with correlated features."""
    rng = np.random.default_rng(seed)
    D = int(np.prod(shape))
    C = rng.standard_normal((D, D)) / np.sqrt(D)
    X = rng.standard_normal((n, D)) @ (np.eye(D) + C)            # rows: vec(X_i), column-major
    w_true = rng.standard_normal(D)
    y = np.where(rng.random(n) < expit(X @ w_true), 1.0, -1.0)
    return X, y


def grad_vec(X, y, w):
    return -X.T @ (y * expit(-y * (X @ w))) / len(y)


def hess_vec(X, y, w):
    p = expit(X @ w)
    return (X * (p * (1 - p))[:, None]).T @ X / len(y)


def laplace(X, y, delta):
    """The MAP of ℓ̄(w) + δ|w|²/2 by scipy (BFGS from zero, then Newton polish) and ℓ̄'s Hessian there."""
    f = lambda w: np.mean(np.logaddexp(0, -y * (X @ w))) + 0.5 * delta * w @ w
    g = lambda w: grad_vec(X, y, w) + delta * w
    w = optimize.minimize(f, np.zeros(X.shape[1]), jac=g, method="BFGS", options={"gtol": 1e-13}).x
    for _ in range(3):
        w = w - np.linalg.solve(hess_vec(X, y, w) + delta * np.eye(len(w)), g(w))
    return w, hess_vec(X, y, w)


def cubature_fixed_point(X, y, delta, N, Q, start_m, start_s):
    """The fixed point of the BLR with the spherical cubature over q = N(m, Q diag(1/s) Qᵀ), solved as a root of
    [E_cub ∇ℓ̄ + δ m ; s/N − δ − diag-Price] in (m, log s)."""
    D = len(start_m)
    c = np.sqrt(D)

    def residual(x):
        m, s = x[:D], np.exp(x[D:])
        sigma = 1 / np.sqrt(s)
        mean_grad, price = np.zeros(D), np.zeros(D)
        for j in range(D):
            step = c * sigma[j] * Q[:, j]
            gp, gm = grad_vec(X, y, m + step), grad_vec(X, y, m - step)
            mean_grad += (gp + gm) / (2 * D)
            price[j] = Q[:, j] @ (gp - gm) / (2 * c * sigma[j])
        return np.concatenate([mean_grad + delta * m, s / N - delta - price])

    sol = optimize.root(residual, np.concatenate([start_m, np.log(start_s)]), method="hybr", tol=1e-14)
    # the residual is the criterion: with scipy 1.17 hybr reports 'xtol is too small' once it is at 1e-17, as below
    assert np.abs(residual(sol.x)).max() < 1e-13, sol.message
    return sol.x[:D], np.exp(sol.x[D:])


@pytest.fixture(scope="module")
def evon():
    return load_generated("evon", "numpy")


def run_evon(evon, shape, X, y, delta, N, QL, QR, steps):
    D = int(np.prod(shape))
    hyper = dict(lr=0.7, ess=float(N), weight_decay=delta, beta1=0.3, beta2=0.3, shampoo_beta=0.9, hess_init=0.2,
                 debias=False, clip_radius=np.inf, precondition_frequency=10**9, mc_samples=2 * D)
    grads = lambda W: grad_vec(X, y, W.reshape(-1, order="F")).reshape(shape, order="F")
    m0, n0 = shape
    state = evon.init(hyper, M=np.zeros(shape), L=np.eye(m0), R=np.eye(n0), Q_L=QL, Q_R=QR)
    rng = Cubature()
    for _ in range(steps):
        state = evon.step(state, oracles={"grad": grads}, rng=rng, **hyper)
    after = evon.step(state, oracles={"grad": grads}, rng=rng, **hyper)
    moved = max(np.abs(after["M"] - state["M"]).max(), np.abs(after["h"] - state["h"]).max())
    m = state["M"].reshape(-1, order="F")
    s = (N * (state["h"] + delta)).reshape(-1, order="F")       # the precision in the rotated coordinates
    return m, s, moved


def kron_basis(shape, H):
    """A Kronecker basis for W of ``shape``: Q_L, Q_R the eigenbases of H's two partial traces (for a column W,
    Q_L is H's own eigenbasis and Q_R = [1])."""
    m0, n0 = shape
    H4 = H.reshape(n0, m0, n0, m0)                               # vec column-major: index = col*m0 + row
    return eig_desc(np.einsum("aiaj->ij", H4)), eig_desc(np.einsum("iaja->ij", H4))


DELTA = 0.05


@pytest.mark.parametrize("shape", [(6, 1), (3, 2)])
def test_evon_reaches_the_blr_fixed_point_of_its_cubature(evon, shape):
    """The generated module's fixed point = the independently solved cubature fixed point (mean and the rotated
    precision), and it is a fixed point (one more step moves nothing)."""
    X, y = problem(shape)
    N = 200.0
    w_map, H = laplace(X, y, DELTA)
    QL, QR = kron_basis(shape, H)
    Q = np.kron(QR, QL)
    m, s, moved = run_evon(evon, shape, X, y, DELTA, N, QL, QR, steps=300)
    m_ref, s_ref = cubature_fixed_point(X, y, DELTA, N, Q, w_map, N * (np.diag(Q.T @ H @ Q) + DELTA))
    assert moved < 1e-13
    assert np.abs(m - m_ref).max() < 1e-10 * np.abs(m_ref).max()
    assert np.abs(s / s_ref - 1).max() < 1e-10


def laplace_gap(evon, shape, N, QL=None, QR=None):
    X, y = problem(shape)
    w_map, H = laplace(X, y, DELTA)
    if QL is None:
        QL, QR = kron_basis(shape, H)
    Q = np.kron(QR, QL)
    m, s, moved = run_evon(evon, shape, X, y, DELTA, N, QL, QR, steps=300)
    assert moved < 1e-12
    s_delta = N * np.diag(Q.T @ (H + DELTA * np.eye(len(m))) @ Q)   # the delta method's precision in the basis
    cov = Q @ np.diag(1 / s) @ Q.T
    cov_laplace = np.linalg.inv(N * (H + DELTA * np.eye(len(m))))
    rel = lambda a, b: np.abs(a - b).max() / np.abs(b).max()
    return rel(m, w_map), np.abs(s / s_delta - 1).max(), rel(cov, cov_laplace)


def test_in_the_hessian_eigenbasis_the_fixed_point_is_the_full_laplace_posterior_up_to_o_1_over_n(evon):
    """W a column (6 × 1): Q_L = the eigenbasis of ∇²ℓ̄(MAP) makes Q diag(1/s) Qᵀ able to hold the full Laplace
    covariance.  EVON's fixed point approaches N(MAP, (N(∇²ℓ̄ + δI))⁻¹) as O(1/N): the gap is the cubature's
    (Gaussian expectation vs value at the mean), and N × gap stays about constant from N = 2e2 to 2e6."""
    gaps = {N: laplace_gap(evon, (6, 1), N) for N in (2e2, 2e4, 2e6)}
    mean_gap, prec_gap, cov_gap = gaps[2e6]
    assert mean_gap < 1e-5 and prec_gap < 1e-5 and cov_gap < 1e-5
    for k in range(3):
        scaled = [N * gaps[N][k] for N in gaps]
        assert max(scaled) < 3 * min(scaled), (k, gaps)          # O(1/N), not a bias that stays
    assert gaps[2e2][2] > 1e-3                                     # at N = 200 the VI and Laplace differ visibly


def test_in_a_kronecker_basis_the_precision_is_the_rotated_diagonal_not_the_full_covariance(evon):
    """W 3 × 2: no Kronecker basis diagonalizes the logistic Hessian, so EVON's covariance is not the Laplace one;
    the BLR predicts its rotated precision = the diagonal of the rotated precision (the mean-field fixed point),
    which holds to O(1/N), while the full covariance stays off by a fixed amount."""
    small = laplace_gap(evon, (3, 2), 2e6)
    assert small[0] < 1e-5 and small[1] < 1e-5
    assert small[2] > 1e-2


def exact_vi_fixed_point(X, y, delta, N, Q, start_m, start_s, nodes=80):
    """The BLR's fixed point with exact Gaussian expectations (no estimate: Eq. 6's stationary point over the
    family q = N(m, Q diag(1/s) Qᵀ)): each logit a_i = ⟨x_i, θ⟩ is N(x_iᵀm, x_iᵀΣx_i) under q, so E_q[∇ℓ̄] and
    E_q[∇²ℓ̄] are 1-D Gaussian expectations of σ(a) and σ'(a), by Gauss-Hermite with ``nodes`` nodes."""
    from numpy.polynomial.hermite_e import hermegauss
    z, wq = hermegauss(nodes)
    wq = wq / wq.sum()
    D, yt = len(start_m), (y + 1) / 2

    def residual(x):
        m, s = x[:D], np.exp(x[D:])
        S = Q @ np.diag(1 / s) @ Q.T
        a = (X @ m)[:, None] + np.sqrt(np.einsum("ij,jk,ik->i", X, S, X))[:, None] * z[None]
        p = expit(a)
        H = (X * ((p * (1 - p)) @ wq)[:, None]).T @ X / len(y)
        return np.concatenate([X.T @ (p @ wq - yt) / len(y) + delta * m, s / N - delta - np.diag(Q.T @ H @ Q)])

    sol = optimize.root(residual, np.concatenate([start_m, np.log(start_s)]), method="hybr", tol=1e-14)
    assert np.abs(residual(sol.x)).max() < 1e-13     # (hybr may say xtol is too small once it is at 1e-16)
    return sol.x[:D], np.exp(sol.x[D:])


@pytest.mark.parametrize("shape", [(6, 1), (3, 2)])
def test_the_cubature_fixed_point_is_nearer_the_exact_vi_fixed_point_than_laplace(evon, shape):
    """What the deterministic draws cost: against the fixed point with exact Gaussian expectations, EVON's
    (cubature) mean is off O(1/N²) (7e-5 / 1.6e-4 at N = 200, 8e-9 / 2e-8 at N = 2e4 for 6x1 / 3x2) and its
    precision O(1/N) (4.7e-3 / 6.1e-3, then 5.0e-5 / 7.1e-5), each well inside the delta method's (Laplace's)
    own gap to it (mean 1.8e-2 / 2.0e-2, precision 2.4e-2 / 2.6e-2 at N = 200)."""
    X, y = problem(shape)
    w_map, H = laplace(X, y, DELTA)
    QL, QR = kron_basis(shape, H)
    Q = np.kron(QR, QL)
    for N, mean_tol, prec_tol in ((2e2, 1e-3, 1e-2), (2e4, 1e-7, 1e-4)):
        m, s, _ = run_evon(evon, shape, X, y, DELTA, N, QL, QR, steps=300)
        s_lap = N * np.diag(Q.T @ (H + DELTA * np.eye(len(m))) @ Q)
        m_vi, s_vi = exact_vi_fixed_point(X, y, DELTA, N, Q, w_map, s_lap)
        mean_gap = np.abs(m - m_vi).max() / np.abs(m_vi).max()
        prec_gap = np.abs(s / s_vi - 1).max()
        assert mean_gap < mean_tol and prec_gap < prec_tol
        assert mean_gap < 0.1 * np.abs(w_map - m_vi).max() / np.abs(m_vi).max()
        assert prec_gap < 0.5 * np.abs(s_lap / s_vi - 1).max()

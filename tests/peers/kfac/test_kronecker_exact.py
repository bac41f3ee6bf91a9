"""When the Kronecker update IS the full-Gaussian BLR (Khan & Rue Eq. 12 over vec(W)), and when it is not.

Problem: one linear layer with a quadratic loss whose Hessian is exactly Kronecker,
ℓ̄(W) = ½ Σ_n ‖W a_n - y_n‖²_B (B SPD), so ∇²ℓ̄ = (Σ_n a_n a_nᵀ) ⊗ B = (XᵀX) ⊗ B (column-major vec).  The generated
noisy_kfac module gets the mini-batch-mean oracles with N = n (the whole data set) and the square-root output
gradients b = chol(B)ᵀ/√n (bᵀb = B/n, K-FAC's factors are then exact); the exact full-Gaussian BLR is the generated
catalog/newton.yaml module on vec(W) with grad = ∇ℓ̄ (+ δ vec(M)) and hess = ∇²ℓ̄ (+ δI).

Conditions (derived in blr_derive/rules/kronecker_ema.py and factored_tikhonov.py), all tested here:
* ρ = 1, δ = 0: equal for any state (A_{t+1} ⊗ G_{t+1} = ∇²ℓ̄ and the mean lands on the minimiser, Newton);
* ρ < 1, δ = 0: A_{t+1} ⊗ G_{t+1} = S_{t+1} - ρ(1-ρ)(A - L) ⊗ (G - R) with L = N XᵀX, R = bᵀb: equal when one
  state factor already equals its target (A = L or G = R), not when only the Kronecker product is right
  (A = cL, G = R/c, c ≠ 1) nor in general;
* δ > 0: never exactly equal: A_{t+1} ⊗ G_{t+1} - (∇²ℓ̄ + δI) = √δ (π I ⊗ R + L ⊗ I / π) at ρ = 1.
"""
import numpy as np
import pytest

from conftest import load_generated

TOL = 1e-10
D_OUT, D_IN, N = 3, 4, 9


def problem(seed=1):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N, D_IN))
    Y = rng.normal(size=(N, D_OUT))
    Q = rng.normal(size=(D_OUT, D_OUT))
    B = Q @ Q.T / D_OUT + np.eye(D_OUT)
    b = np.linalg.cholesky(B).T / np.sqrt(N)
    kron_oracles = {"grad": lambda W: B @ (W @ X.T - Y.T) @ X / N,      # ∇ of the mean loss ℓ̄/N
                    "activations": lambda W: X, "output_grads": lambda W: b}
    hess = np.kron(X.T @ X, B)
    return rng, X, Y, B, b, kron_oracles, hess


def vec(W):
    return W.reshape(-1, order="F")


def spd(rng, d):
    Q = rng.normal(size=(d, d))
    return Q @ Q.T / d + np.eye(d)


def both_steps(rho, delta, A, G, M, split=1.0):
    rng, X, Y, B, b, oracles, hess = problem()
    kfac, newton = load_generated("noisy_kfac"), load_generated("newton")
    k = kfac.step(kfac.init(M=M, A=A, G=G), oracles=oracles, rho=rho, ess=float(N), prior_precision=delta,
                  damping_split=split)
    full = {"grad": lambda m: N * vec(oracles["grad"](m.reshape((D_OUT, D_IN), order="F"))) + delta * m,
            "hess": lambda m: hess + delta * np.eye(D_OUT * D_IN)}
    f = newton.step(newton.init(m=vec(M), S=np.kron(A, G)), oracles=full, rho=rho)
    return k, f, X, b


def state(seed=5):
    rng = np.random.default_rng(seed)
    return spd(rng, D_IN), spd(rng, D_OUT), rng.normal(size=(D_OUT, D_IN))


def test_rho_one_no_prior_equals_the_exact_full_gaussian_blr_for_any_state():
    A, G, M = state()
    k, f, X, b = both_steps(1.0, 0.0, A, G, M)
    np.testing.assert_allclose(np.kron(k["A"], k["G"]), f["S"], rtol=0, atol=TOL * np.abs(f["S"]).max())
    np.testing.assert_allclose(vec(k["M"]), f["m"], rtol=0, atol=TOL)
    _, X, Y, B, _, oracles, _ = problem()
    np.testing.assert_allclose(oracles["grad"](k["M"]), 0, atol=TOL)      # Newton lands on the minimiser


@pytest.mark.parametrize("which", ["A", "G"])
def test_rho_below_one_equals_the_blr_when_one_factor_matches_its_target(which):
    _, X, Y, B, b, _, _ = problem()
    L, R = N * X.T @ X, b.T @ b
    A, G, M = state()
    k, f, _, _ = both_steps(0.3, 0.0, L if which == "A" else A, R if which == "G" else G, M)
    np.testing.assert_allclose(np.kron(k["A"], k["G"]), f["S"], rtol=0, atol=TOL * np.abs(f["S"]).max())
    np.testing.assert_allclose(vec(k["M"]), f["m"], rtol=0, atol=TOL)


@pytest.mark.parametrize("c", [None, 4.0])
def test_rho_below_one_differs_otherwise(c):
    """A random state, or the right Kronecker product split differently between the factors (c ≠ 1)."""
    _, X, Y, B, b, _, _ = problem()
    A, G, M = state() if c is None else (c * N * X.T @ X, b.T @ b / c, state()[2])
    k, f, _, _ = both_steps(0.3, 0.0, A, G, M)
    gap = np.abs(np.kron(k["A"], k["G"]) - f["S"]).max() / np.abs(f["S"]).max()
    assert gap > 1e-2
    assert np.abs(vec(k["M"]) - f["m"]).max() > 1e-3


def test_a_prior_adds_exactly_the_dropped_cross_terms_at_rho_one():
    delta, pi = 0.5, 1.7
    A, G, M = state()
    k, f, X, b = both_steps(1.0, delta, A, G, M, split=pi)
    L, R = N * X.T @ X, b.T @ b
    cross = np.sqrt(delta) * (pi * np.kron(np.eye(D_IN), R) + np.kron(L, np.eye(D_OUT)) / pi)
    np.testing.assert_allclose(np.kron(k["A"], k["G"]) - f["S"], cross, rtol=0, atol=TOL * np.abs(f["S"]).max())
    assert np.abs(cross).max() > 0.1
    assert np.abs(vec(k["M"]) - f["m"]).max() > 1e-3

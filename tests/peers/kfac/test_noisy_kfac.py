"""catalog/noisy_kfac.yaml against (1) a reference written from Zhang, Sun, Duvenaud & Grosse, "Noisy Natural
Gradient as Variational Inference", ICML 2018, Alg. 1 (noisy K-FAC), and (2) the exact full-Gaussian BLR (the
generated catalog/newton.yaml module on vec(W)).

Reference (Alg. 1, one layer, T_stats = T_inv = 1, zero momentum, KL weight λ = 1, prior variance η = 1/δ, no
extrinsic damping γ_ex = 0, oracles at the mean M instead of a weight sample: the recipe uses the delta method),
in Zhang's orientation W_z = Wᵀ (d_in × d_out):

    Ā ← (1-β) Ā + β E[a aᵀ],   S̄ ← (1-β) S̄ + β E[Ds Dsᵀ]                    (Eq. 17)
    γ = λ/(Nη),  Ā^γ = Ā + π√γ I,  S̄^γ = S̄ + (√γ/π) I                        (Eq. 18)
    V = ∇_W log p(y|x, W) - γ W,   M_z ← M_z + α (Ā^γ)⁻¹ V (S̄^γ)⁻¹

with E over the mini-batch of n examples and Ds the per-example gradients of the log-likelihood in the layer's
outputs.  The generated module's state relates to it by M = M_zᵀ, A = N n Ā^γ, G = S̄^γ / n (so that A ⊗ G =
N Ā^γ ⊗ S̄^γ, the posterior precision of Zhang's q), with α = β = ρ and damping_split = π n √N; its oracles
return the mean-loss gradient g = -(∇ log p)ᵀ and the output gradients of the mean loss b = -Ds / n.
"""
import numpy as np
import pytest

from conftest import load_generated

RTOL = 1e-12
D_OUT, D_IN, N_BATCH = 3, 4, 7


def problem(seed=0):
    """A linear layer s = W a with independent Bernoulli outputs (a non-quadratic loss): per-example loss
    Σ_j softplus(s_j) - y_j s_j, the mini-batch mean of n examples."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_BATCH, D_IN))
    Y = (rng.random(size=(N_BATCH, D_OUT)) < 0.5).astype(float)

    def dloss_ds(W):                              # per-example ∂ℓ_i/∂s_i, one row per example
        return 1 / (1 + np.exp(-X @ W.T)) - Y

    oracles = {"grad": lambda W: dloss_ds(W).T @ X / N_BATCH,          # ∇_W of the mini-batch mean loss
               "activations": lambda W: X,
               "output_grads": lambda W: dloss_ds(W) / N_BATCH}
    return rng, oracles, X, dloss_ds


def spd(rng, d, scale=1.0):
    Q = rng.normal(size=(d, d))
    return scale * (Q @ Q.T / d + np.eye(d))


def zhang_step(Mz, Abar, Sbar, X, Ds, gz, alpha, beta, N, eta, pi, lam=1.0):
    """One iteration of Zhang et al. Alg. 1 (see the module docstring); gz = ∇_W log p (d_in × d_out)."""
    n = X.shape[0]
    Abar = (1 - beta) * Abar + beta * (X.T @ X / n)
    Sbar = (1 - beta) * Sbar + beta * (Ds.T @ Ds / n)
    gamma = lam / (N * eta)
    Ag = Abar + pi * np.sqrt(gamma) * np.eye(Abar.shape[0])
    Sg = Sbar + np.sqrt(gamma) / pi * np.eye(Sbar.shape[0])
    V = gz - gamma * Mz
    Mz = Mz + alpha * np.linalg.solve(Ag, V) @ np.linalg.inv(Sg)
    return Mz, Abar, Sbar, Ag, Sg


@pytest.mark.parametrize("rho", [0.3, 1.0])
def test_generated_noisy_kfac_equals_zhang_alg1_step_for_step(rho):
    mod = load_generated("noisy_kfac")
    rng, oracles, X, dloss_ds = problem()
    N, delta, pi = 50.0, 0.7, 1.3
    n = N_BATCH
    Mz = rng.normal(size=(D_IN, D_OUT))
    Abar, Sbar = spd(rng, D_IN), spd(rng, D_OUT, 0.01)
    gamma = 1.0 / (N * (1 / delta))
    state = mod.init(M=Mz.T, A=N * n * (Abar + pi * np.sqrt(gamma) * np.eye(D_IN)),
                     G=(Sbar + np.sqrt(gamma) / pi * np.eye(D_OUT)) / n)
    hp = dict(rho=rho, ess=N, prior_precision=delta, damping_split=pi * n * np.sqrt(N))
    for _ in range(5):
        Ds = -dloss_ds(Mz.T)                       # ∂ log p_i / ∂s_i at the mean
        gz = Ds.T @ X / n                          # ∇_W log p (mean over the mini-batch), d_out × d_in
        Mz, Abar, Sbar, Ag, Sg = zhang_step(Mz, Abar, Sbar, X, Ds, gz.T, rho, rho, N, 1 / delta, pi)
        state = mod.step(state, oracles=oracles, **hp)
        np.testing.assert_allclose(state["M"], Mz.T, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(state["A"], N * n * Ag, rtol=RTOL)
        np.testing.assert_allclose(state["G"], Sg / n, rtol=RTOL)
    assert np.abs(Mz).max() > 0.1                  # the steps moved the mean


def test_init_rejects_an_asymmetric_factor():
    mod = load_generated("noisy_kfac")
    A = np.eye(D_IN)
    A[0, 1] = 0.5
    with pytest.raises(ValueError, match="A must be symmetric"):
        mod.step(mod.init(M=np.zeros((D_OUT, D_IN)), A=A, G=np.eye(D_OUT)), oracles=problem()[1])

"""catalog/noisy_kfac_mc.yaml (noisy K-FAC with weight noise: monte_carlo on the Kronecker candidate) against a
reference written from Zhang, Sun, Duvenaud & Grosse, "Noisy Natural Gradient as Variational Inference", ICML 2018,
Alg. 1, fed the same weight noise.

Reference (Alg. 1, one layer, T_stats = T_inv = 1, zero momentum, KL weight λ = 1, prior variance η = 1/δ, no
extrinsic damping γ_ex = 0), in Zhang's orientation W_z = Wᵀ (d_in × d_out):

    W_z ~ MN(M_z, (λ/N) [Ā^γ]⁻¹, [S̄^γ]⁻¹)                                      (the factors of the last step)
    Ā ← (1-β) Ā + β E[a aᵀ],   S̄ ← (1-β) S̄ + β E[Ds Dsᵀ]            (Eq. 17, Ds at the sample W_z)
    γ = λ/(Nη),  Ā^γ = Ā + π√γ I,  S̄^γ = S̄ + (√γ/π) I                        (Eq. 18)
    V = ∇_W log p(y|x, W_z) - γ W_z,   M_z ← M_z + α (Ā^γ)⁻¹ V (S̄^γ)⁻¹

The paper draws one sample per step; with K samples the reference averages E[a aᵀ], E[Ds Dsᵀ] and V over the K
draws (the generated module's factor-by-factor averages).  The paper does not fix the square roots of the
matrix-normal's covariances; the reference uses the draw W_z = M_z + √(λ/N) L_Ā⁻ᵀ E_z L_S⁻¹ (L the lower Cholesky
factors of Ā^γ, S̄^γ; P Pᵀ = (λ/N)[Ā^γ]⁻¹ for P = √(λ/N) L_Ā⁻ᵀ and Q Qᵀ = [S̄^γ]⁻¹ for Qᵀ = L_S⁻¹) with
E_z = Eᵀ, E the d_out × d_in standard normals that the module draws from the same generator.  The state relates to
Zhang's as in test_noisy_kfac.py: M = M_zᵀ, A = N n Ā^γ, G = S̄^γ / n, α = β = ρ, damping_split = π n √N.
"""
import numpy as np
import pytest

from conftest import load_generated

RTOL = 1e-12
D_OUT, D_IN, N_BATCH = 3, 4, 7


def problem(seed=0):
    """A linear layer s = W a with independent Bernoulli outputs, the mini-batch mean loss of n examples
    Σ_j softplus(s_j) - y_j s_j per example; the oracles record the weights they are called at."""
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(N_BATCH, D_IN))
    Y = (rng.random(size=(N_BATCH, D_OUT)) < 0.5).astype(float)
    seen = []

    def dloss_ds(W):
        return 1 / (1 + np.exp(-X @ W.T)) - Y

    def grad(W):
        seen.append(np.array(W))
        return dloss_ds(W).T @ X / N_BATCH

    oracles = {"grad": grad, "activations": lambda W: X, "output_grads": lambda W: dloss_ds(W) / N_BATCH}
    return rng, oracles, X, dloss_ds, seen


def spd(rng, d, scale=1.0):
    Q = rng.normal(size=(d, d))
    return scale * (Q @ Q.T / d + np.eye(d))


def zhang_step(Mz, Abar, Sbar, Ag, Sg, X, dlogp_ds, noise, alpha, beta, N, eta, pi, lam=1.0):
    """One iteration of Zhang et al. Alg. 1 with len(noise) samples (see the module docstring); noise holds the
    E_z (d_in × d_out) of the samples; dlogp_ds(W_z) = ∂ log p_i / ∂s_i, one row per example."""
    n = X.shape[0]
    P = np.sqrt(lam / N) * np.linalg.inv(np.linalg.cholesky(Ag)).T
    Qt = np.linalg.inv(np.linalg.cholesky(Sg))
    Ws = [Mz + P @ Ez @ Qt for Ez in noise]
    Ds = [dlogp_ds(W) for W in Ws]
    Abar = (1 - beta) * Abar + beta * np.mean([X.T @ X / n for _ in Ws], axis=0)
    Sbar = (1 - beta) * Sbar + beta * np.mean([D.T @ D / n for D in Ds], axis=0)
    gamma = lam / (N * eta)
    Ag = Abar + pi * np.sqrt(gamma) * np.eye(Abar.shape[0])
    Sg = Sbar + np.sqrt(gamma) / pi * np.eye(Sbar.shape[0])
    V = np.mean([X.T @ D / n - gamma * W for W, D in zip(Ws, Ds)], axis=0)
    Mz = Mz + alpha * np.linalg.solve(Ag, V) @ np.linalg.inv(Sg)
    return Mz, Abar, Sbar, Ag, Sg, Ws


@pytest.mark.parametrize("samples", [1, 3])
@pytest.mark.parametrize("rho", [0.3, 1.0])
def test_generated_noisy_kfac_mc_equals_zhang_alg1_with_the_same_noise(rho, samples):
    mod = load_generated("noisy_kfac_mc")
    rng, oracles, X, dloss_ds, seen = problem()
    N, delta, pi = 50.0, 0.7, 1.3
    n = N_BATCH
    Mz = rng.normal(size=(D_IN, D_OUT))
    Abar, Sbar = spd(rng, D_IN), spd(rng, D_OUT, 0.01)
    gamma = 1.0 / (N * (1 / delta))
    Ag = Abar + pi * np.sqrt(gamma) * np.eye(D_IN)
    Sg = Sbar + np.sqrt(gamma) / pi * np.eye(D_OUT)
    state = mod.init(M=Mz.T, A=N * n * Ag, G=Sg / n)
    hp = dict(rho=rho, ess=N, prior_precision=delta, damping_split=pi * n * np.sqrt(N), mc_samples=samples)
    draws, noise_rng = np.random.default_rng(11), np.random.default_rng(11)
    moved = 0.0
    for _ in range(5):
        noise = [noise_rng.standard_normal((D_OUT, D_IN)).T for _ in range(samples)]
        before = Mz
        Mz, Abar, Sbar, Ag, Sg, Ws = zhang_step(Mz, Abar, Sbar, Ag, Sg, X, lambda Wz: -dloss_ds(Wz.T), noise,
                                                 rho, rho, N, 1 / delta, pi)
        del seen[:]
        state = mod.step(state, oracles=oracles, rng=draws, **hp)
        assert len(seen) == samples
        for W_mod, Wz in zip(seen, Ws):                 # the module's samples are the reference's
            np.testing.assert_allclose(W_mod, Wz.T, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(state["M"], Mz.T, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(state["A"], N * n * Ag, rtol=RTOL)
        np.testing.assert_allclose(state["G"], Sg / n, rtol=RTOL)
        moved = max(moved, np.abs(Ws[0] - before).max())
    assert np.abs(Mz).max() > 0.1 and moved > 1e-3     # the steps moved the mean and the samples are not it


def test_one_sample_at_zero_noise_is_the_delta_update():
    """With E = 0 the sample is the mean, and the step is noisy_kfac's (the oracles at M)."""
    mc, delta_mod = load_generated("noisy_kfac_mc"), load_generated("noisy_kfac")
    rng, oracles, _, _, _ = problem(3)
    M = rng.normal(size=(D_OUT, D_IN))
    A, G = spd(rng, D_IN, 5.0), spd(rng, D_OUT, 0.2)

    class Zero:
        def standard_normal(self, shape):
            return np.zeros(shape)

    hp = dict(rho=0.4, ess=20.0, prior_precision=0.5, damping_split=2.0)
    got = mc.step(mc.init(M=M, A=A, G=G), oracles=oracles, rng=Zero(), mc_samples=1, **hp)
    want = delta_mod.step(delta_mod.init(M=M, A=A, G=G), oracles=oracles, **hp)
    for k in ("M", "A", "G"):
        np.testing.assert_allclose(got[k], want[k], rtol=1e-13, atol=1e-15)
    assert np.abs(got["M"] - M).max() > 1e-3


def test_step_needs_a_generator():
    mod = load_generated("noisy_kfac_mc")
    with pytest.raises(TypeError, match="pass rng"):
        mod.step(mod.init(M=np.zeros((D_OUT, D_IN)), A=np.eye(D_IN), G=np.eye(D_OUT)), oracles=problem()[1])

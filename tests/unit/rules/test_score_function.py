"""The score-function natural gradient F(λ)⁻¹ Cov_q(ℓ, T) for a non-Gaussian candidate (exponential)."""
import numpy as np

from blr_derive.families.library import load_family
from conftest import load_generated

loss = lambda t: (t - 2.0) ** 2      # E_q[loss] = 2/r² − 4/r + 4 under Exp(r), so ∇_μ E_q[loss] = 4/r − 4


class Draws:
    def __init__(self, u):
        self.u = list(u)

    def random(self, shape):
        return np.full(shape, self.u.pop(0))


def test_generated_step_equals_handwritten_score_function_blr():
    mod = load_generated("score_function_exponential")
    rng = np.random.default_rng(0)
    r, rho, S = 1.7, 0.2, 50
    for _ in range(5):
        u = rng.random(S)
        theta = -np.log(u) / r                                  # inverse CDF sampler
        cov = np.mean(loss(theta) * (theta - 1 / r))            # ∇_λ E_q[loss] = Cov(loss, T), T = θ, μ = 1/r
        nat = r ** 2 * cov                                      # F(λ)⁻¹ = 1/A''(λ) = λ² = r²
        lam = (1 - rho) * (-r) - rho * nat                      # Eq. 6, h = 1
        r_ref = -lam
        out = mod.step({"r": np.array(r)}, oracles={"loss": loss}, rng=Draws(u), rho=rho, mc_samples=S)
        np.testing.assert_allclose(out["r"], r_ref, rtol=1e-12)
        r = r_ref


def test_estimator_is_unbiased_for_the_exact_natural_gradient():
    mod = load_generated("score_function_exponential")
    r, rho, S = 1.3, 0.5, 200_000
    rng = np.random.default_rng(1)
    out = mod.step({"r": np.array(r)}, oracles={"loss": loss}, rng=rng, rho=rho, mc_samples=S)
    nat = (out["r"] - (1 - rho) * r) / (rho * r ** 2) * r ** 2     # r' = (1-ρ) r + ρ r² ĉ, natural gradient r² ĉ
    exact = 4 / r - 4
    theta = -np.log(np.random.default_rng(2).random(S)) / r
    se = r ** 2 * np.std(loss(theta) * (theta - 1 / r)) / np.sqrt(S)
    assert abs(nat - exact) < 5 * se


def test_blr_reaches_the_optimal_exponential_candidate():
    mod = load_generated("score_function_exponential")
    rng = np.random.default_rng(3)
    state = {"r": np.array(1.0)}
    rs = []
    for t in range(300):
        state = mod.step(state, oracles={"loss": loss}, rng=rng, rho=0.05, mc_samples=4000)
        rs.append(float(state["r"]))
    r_star = 2 * np.sqrt(2) - 2            # minimiser of E_q[loss] − H(q) = 2/r² − 4/r + 3 + log r
    assert abs(np.mean(rs[-100:]) - r_star) < 0.01


def test_declared_sampler_matches_the_expectation_parameter():
    fam = load_family("exponential")
    import sympy as sp
    f = sp.lambdify((sp.Symbol("u", positive=True), fam.params["r"].symbol), fam.sampler, "numpy")
    r = 0.7
    x = f(np.random.default_rng(4).random(400_000), r)
    assert abs(x.mean() - 1 / r) < 5 * x.std() / np.sqrt(len(x))


dloss = lambda t: 2 * (t - 2.0)


def test_reparameterization_step_equals_handwritten_and_has_lower_variance():
    mod = load_generated("reparameterization_exponential")
    rng = np.random.default_rng(5)
    r, rho, S = 1.7, 0.2, 50
    u = rng.random(S)
    theta = -np.log(u) / r
    dlam = np.mean(dloss(theta) * (-np.log(u)) / r ** 2)       # ∂θ/∂λ for θ = log(u)/λ, λ = −r
    r_ref = (1 - rho) * r + rho * r ** 2 * dlam
    out = mod.step({"r": np.array(r)}, oracles={"grad": dloss}, rng=Draws(u), rho=rho, mc_samples=S)
    np.testing.assert_allclose(out["r"], r_ref, rtol=1e-12)
    # both estimators target ∇_λ E_q[loss] = (4/r − 4)/r²; the pathwise one is far less noisy here
    u = np.random.default_rng(6).random(200_000)
    theta = -np.log(u) / r
    path = dloss(theta) * (-np.log(u)) / r ** 2
    score = loss(theta) * (theta - 1 / r)
    exact = (4 / r - 4) / r ** 2
    assert abs(path.mean() - exact) < 5 * path.std() / np.sqrt(len(u))
    assert abs(score.mean() - exact) < 5 * score.std() / np.sqrt(len(u))
    assert path.var() < 0.5 * score.var()

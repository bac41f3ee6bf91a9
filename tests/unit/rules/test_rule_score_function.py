"""score_function (Eq. 4, ∇_λ E_q[ℓ] = E_q[ℓ(θ)(T(θ) − μ)] and ∇_μ = F(λ)⁻¹∇_λ; the BLR step Eq. 6; the Bernoulli
candidate of Sec. 4.5, Eq. 49): the natural gradient from loss values at samples θ_k = sampler(u_k) of q.

Independent of tests/unit/rules/test_score_function.py (the exponential candidate), checked numerically for the
Bernoulli candidate on {−1, +1} in its natural parameter (``bernoulli_logit``) and in its probability
(``bernoulli``), and for a Beta(a, 1) candidate declared inline:

* same draws: the step is Eq. 6 with the estimator written by hand from the inverse CDF (not the sampler text);
* unbiasedness: many independent replicas (mean-field coordinates, or blocks of them under a loss that couples
  the coordinates) average to the exact natural gradient, which is the derivative in μ of the closed-form E_q[ℓ]
  (a finite sum over {−1, +1}^P, or Beta moments), within 5 standard errors;
* the parameterization does not matter: the ``bernoulli`` step in p is the ``bernoulli_logit`` step in λ;
* the BLR's fixed point is the minimizer of E_q[ℓ] − H(q) (found here by scipy's scalar minimizer).
"""
import functools
import itertools

import numpy as np
import yaml
from scipy import optimize, special

from blr_derive import api

POWER = {"name": "power", "variable": "theta", "support": "unit_interval",
         "parameters": {"a": {"domain": "positive"}}, "sufficient_statistics": ["log(theta)"],
         "natural_parameters": ["a - 1"], "sampler": "u**(1/a)"}     # Beta(a, 1): CDF θ^a, inverse CDF u^(1/a)


@functools.lru_cache(maxsize=None)
def compiled(family):
    fam = POWER if family == "power" else family
    text = yaml.safe_dump({"name": "sf_test", "family": fam, "loss": "abstract",
                           "hyperparameters": {"rho": 0.1, "S": {"default": 3, "type": "int"}},
                           "approximations": [{"score_function": {"samples": "S"}}]}, sort_keys=False)
    return api.derive(text).compile("numpy")


C = np.array([0.8, -0.5, 1.4])          # ℓ_j(θ) = exp(c_j θ) per coordinate (its values on ±1 are what matter)


def bern_loss(c):
    return lambda t: np.exp(c * t)


def exact_bernoulli_natural_gradient(c):
    """E_q[ℓ] = (1 + μ)/2 ℓ(+1) + (1 − μ)/2 ℓ(−1) on {−1, +1} (μ = E[θ] = 2p − 1): its μ-derivative."""
    return (np.exp(c) - np.exp(-c)) / 2


def test_bernoulli_logit_same_draws_by_hand():
    mod = compiled("bernoulli_logit")
    lam = np.array([-0.7, 0.2, 1.3, 0.0])
    c = np.array([0.8, -0.5, 1.4, 0.3])
    rho, S = 0.3, 5
    out = mod.step(mod.init(lam=lam), oracles={"loss": bern_loss(c)}, rng=np.random.default_rng(8), rho=rho, S=S)
    draws = np.random.default_rng(8)
    est = np.zeros_like(lam)
    for _ in range(S):
        u = draws.random(lam.shape)
        theta = np.where(u > special.expit(-2 * lam), 1.0, -1.0)      # P(θ = +1) = sigmoid(2λ)
        est += np.exp(c * theta) * (theta - np.tanh(lam)) / S           # Cov(ℓ, T), T = θ, μ = tanh λ
    ref = (1 - rho) * lam - rho * np.cosh(lam) ** 2 * est               # F(λ)⁻¹ = 1/A''(λ) = cosh²λ, Eq. 6
    # the same sums in a different order (online mean): a few roundings
    np.testing.assert_allclose(out["lam"], ref, rtol=1e-12, atol=1e-14)


def test_bernoulli_logit_is_unbiased_for_the_exact_natural_gradient():
    mod = compiled("bernoulli_logit")
    R, rho, S = 4000, 0.5, 4
    lam_g = np.array([-0.7, 0.2, 1.3])
    lam = np.repeat(lam_g, R)
    c = np.repeat(C, R)
    out = mod.step(mod.init(lam=lam), oracles={"loss": bern_loss(c)}, rng=np.random.default_rng(1), rho=rho, S=S)
    nat = (((1 - rho) * lam - out["lam"]) / rho).reshape(3, R)         # the estimated ∇_μ E_q[ℓ], per replica
    se = nat.std(axis=1, ddof=1) / np.sqrt(R)
    # 5 standard errors: a false alarm has probability < 1e-6 per group (and the seed is fixed)
    assert np.all(np.abs(nat.mean(axis=1) - exact_bernoulli_natural_gradient(C)) < 5 * se)


def test_mean_field_with_a_coupled_loss_is_unbiased():
    """Mean field over 3 coordinates with ℓ(θ) = exp(aᵀθ): ∇_{λ_j} E_q[ℓ] = E_q[ℓ(θ)(θ_j − μ_j)], so the oracle
    returns the block's loss for each of its coordinates.  Exact: central differences in μ of E_q[ℓ] summed over
    the 8 points of {−1, +1}³ (multilinear in μ: exact up to rounding ~1e-10)."""
    mod = compiled("bernoulli_logit")
    a = np.array([0.5, -0.3, 0.8])
    lam0 = np.array([0.4, -1.0, 0.1])
    R, rho, S = 4000, 0.5, 4
    block_loss = lambda t: np.repeat(np.exp(t.reshape(-1, 3) @ a), 3)
    out = mod.step(mod.init(lam=np.tile(lam0, R)), oracles={"loss": block_loss}, rng=np.random.default_rng(10),
                   rho=rho, S=S)
    nat = (((1 - rho) * np.tile(lam0, R) - out["lam"]) / rho).reshape(R, 3)
    support = np.array(list(itertools.product([-1.0, 1.0], repeat=3)))
    values = np.exp(support @ a)

    def expected(mu):
        p = (1 + mu) / 2
        return np.prod(np.where(support > 0, p, 1 - p), axis=1) @ values
    mu, h = np.tanh(lam0), 1e-6
    exact = np.array([(expected(mu + h * e) - expected(mu - h * e)) / (2 * h) for e in np.eye(3)])
    se = nat.std(axis=0, ddof=1) / np.sqrt(R)
    assert np.all(np.abs(nat.mean(axis=0) - exact) < 5 * se)            # 5σ, as above


def test_probability_parameterization_gives_the_same_step():
    """q is the same distribution in p and in λ = logit(p)/2: the natural gradient, and so λ_{t+1}, agree."""
    lam = np.array([-0.7, 0.2, 1.3, -2.0])
    c = np.array([0.8, -0.5, 1.4, 0.6])
    p = special.expit(2 * lam)
    rho, S = 0.25, 6
    a = compiled("bernoulli_logit")
    b = compiled("bernoulli")
    out_l = a.step(a.init(lam=lam), oracles={"loss": bern_loss(c)}, rng=np.random.default_rng(4), rho=rho, S=S)
    out_p = b.step(b.init(p=p), oracles={"loss": bern_loss(c)}, rng=np.random.default_rng(4), rho=rho, S=S)
    # the p-form is a long closed form through exp/log: agreement to ~1e-14 relative, 1e-11 is a wide margin
    np.testing.assert_allclose(out_p["p"], special.expit(2 * out_l["lam"]), rtol=1e-11)


def test_bernoulli_fixed_point_minimises_the_variational_objective():
    """Iterates from λ = 0 settle (after 0.8^60 ≈ 1e-6 of the transient) at the minimiser of
    E_q[ℓ] − H(q) = pℓ(1) + (1−p)ℓ(−1) + p log p + (1−p) log(1−p); replicas give the standard error."""
    mod = compiled("bernoulli_logit")
    R, rho, S = 2000, 0.2, 20
    c = np.repeat(C, R)
    rng = np.random.default_rng(6)
    state = mod.init(lam=np.zeros(3 * R))
    for _ in range(60):
        state = mod.step(state, oracles={"loss": bern_loss(c)}, rng=rng, rho=rho, S=S)
    lam = state["lam"].reshape(3, R)

    def objective(x, cj):
        p = special.expit(2 * x)
        return p * np.exp(cj) + (1 - p) * np.exp(-cj) + special.xlogy(p, p) + special.xlogy(1 - p, 1 - p)
    star = np.array([optimize.minimize_scalar(objective, args=(cj,), bracket=(-3, 3), tol=1e-12).x for cj in C])
    se = lam.std(axis=1, ddof=1) / np.sqrt(R)
    # 5σ as above; the minimiser's tolerance (~1e-6 in x) is far below the standard error (~1e-3)
    assert np.all(np.abs(lam.mean(axis=1) - star) < 5 * se + 1e-5)


def power_loss(t):
    return (t - 0.3) ** 2


def power_expected(mu):
    """E_q[(θ − 0.3)²] for Beta(a, 1), with a = −1/μ (μ = E[log θ] = −1/a): E[θ] = a/(a+1), E[θ²] = a/(a+2)."""
    a = -1 / mu
    return a / (a + 2) - 0.6 * a / (a + 1) + 0.09


def test_power_family_same_draws_and_unbiased():
    mod = compiled("power")
    rho = 0.5
    # same draws: θ = u^{1/a}, T = log θ, μ = −1/a, F(λ)⁻¹ = a² (A(λ) = −log(λ + 1))
    a0 = np.array([0.6, 1.0, 2.5])
    out = mod.step(mod.init(a=a0), oracles={"loss": power_loss}, rng=np.random.default_rng(2), rho=rho, S=7)
    draws = np.random.default_rng(2)
    est = np.zeros(3)
    for _ in range(7):
        th = draws.random(3) ** (1 / a0)
        est += power_loss(th) * (np.log(th) + 1 / a0) / 7
    np.testing.assert_allclose(out["a"], 1 + (1 - rho) * (a0 - 1) - rho * a0 ** 2 * est, rtol=1e-12, atol=1e-14)
    # unbiased: the exact ∇_μ E_q[ℓ] by central differences (O(h²) ≈ 1e-10)
    R = 4000
    a = np.repeat(a0, R)
    out = mod.step(mod.init(a=a), oracles={"loss": power_loss}, rng=np.random.default_rng(3), rho=rho, S=3)
    nat = ((1 + (1 - rho) * (a - 1) - out["a"]) / rho).reshape(3, R)
    h = 1e-5
    exact = (power_expected(-1 / a0 + h) - power_expected(-1 / a0 - h)) / (2 * h)
    se = nat.std(axis=1, ddof=1) / np.sqrt(R)
    assert np.all(np.abs(nat.mean(axis=1) - exact) < 5 * se)            # 5σ, as above

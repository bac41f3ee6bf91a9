"""reparameterization (Eq. 4 through the sampler: ∇_λ E_q[ℓ] = E_u[∇ℓ(θ) ∂θ/∂λ] with θ = sampler(u; λ), then
∇_μ = F(λ)⁻¹∇_λ; the BLR step Eq. 6): the natural gradient from gradients at samples of q.

Independent of tests/unit/rules/test_score_function.py, checked numerically for a Beta(a, 1) candidate declared
inline (sampler u^(1/a), T = log θ) and for the exponential candidate (sampler −log(u)/r):

* same draws: the step is Eq. 6 with ∂θ/∂λ taken by central differences of the sampler in λ (not the engine's
  symbolic derivative);
* unbiasedness: many independent replicas average to the exact natural gradient, the μ-derivative of the
  closed-form E_q[ℓ], within 5 standard errors;
* on the same problem and the same draws the pathwise estimator has a smaller variance than the score function
  (both unbiased), and a sampler through a hard threshold is refused.
"""
import functools
import math

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

POWER = {"name": "power", "variable": "theta", "support": "unit_interval",
         "parameters": {"a": {"domain": "positive"}}, "sufficient_statistics": ["log(theta)"],
         "natural_parameters": ["a - 1"], "sampler": "u**(1/a)"}     # Beta(a, 1): CDF θ^a, inverse CDF u^(1/a)


def recipe(family, rule="reparameterization"):
    return yaml.safe_dump({"name": "rp_test", "family": POWER if family == "power" else family, "loss": "abstract",
                           "hyperparameters": {"rho": 0.1, "S": {"default": 3, "type": "int"}},
                           "approximations": [{rule: {"samples": "S"}}]}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(family, rule="reparameterization"):
    return api.derive(recipe(family, rule)).compile("numpy")


# Beta(a, 1): λ = a − 1, A(λ) = −log(λ + 1), μ = E[log θ] = −1/a, F(λ) = 1/a²
def power_loss(t):
    return (t - 0.3) ** 2 + np.sin(3 * t)


def power_grad(t):
    return 2 * (t - 0.3) + 3 * np.cos(3 * t)


def power_expected(mu):
    """E_q[ℓ] for Beta(a, 1), a = −1/μ, from the moments E[θ^k] = a/(a + k): the quadratic part exactly, and
    E[sin 3θ] = Σ_j (−1)^j 3^{2j+1}/(2j+1)! · a/(a + 2j + 1), whose 30 terms reach rounding (the last is < 1e-40)."""
    a = -1 / mu
    j = np.arange(30)
    coef = (-1.0) ** j * 3.0 ** (2 * j + 1) / np.array([math.factorial(2 * k + 1) for k in j], dtype=float)
    return a / (a + 2) - 0.6 * a / (a + 1) + 0.09 + np.sum(coef * a / (a + 2 * j + 1))


def test_power_family_same_draws_with_finite_difference_jacobian():
    mod = compiled("power")
    a0 = np.array([0.6, 1.0, 2.5, 4.0])
    rho, S = 0.4, 6
    out = mod.step(mod.init(a=a0), oracles={"grad": power_grad}, rng=np.random.default_rng(5), rho=rho, S=S)
    draws = np.random.default_rng(5)
    lam = a0 - 1
    sampler = lambda u, l: u ** (1 / (l + 1))
    h = 1e-6
    dlam = np.zeros_like(a0)
    for _ in range(S):
        u = draws.random(a0.shape)
        dtheta = (sampler(u, lam + h) - sampler(u, lam - h)) / (2 * h)     # ∂θ/∂λ, error ~1e-10 relative
        dlam += power_grad(sampler(u, lam)) * dtheta / S
    lam_ref = (1 - rho) * lam - rho * a0 ** 2 * dlam                       # Eq. 6 with F⁻¹ = a²
    # the central difference is good to ~1e-9 relative (O(h²) and ~1e-16/h rounding); 1e-7 is a wide margin
    np.testing.assert_allclose(out["a"] - 1, lam_ref, rtol=1e-7, atol=1e-9)


def test_power_family_is_unbiased_and_beats_the_score_function():
    rp, sf = compiled("power"), compiled("power", "score_function")
    R, rho, S = 4000, 0.5, 2
    a0 = np.array([1.2, 2.5, 4.0])
    a = np.repeat(a0, R)
    nat = {}
    for name, mod, oracles in [("rp", rp, {"grad": power_grad}), ("sf", sf, {"loss": power_loss})]:
        out = mod.step(mod.init(a=a), oracles=oracles, rng=np.random.default_rng(9), rho=rho, S=S)
        nat[name] = ((1 + (1 - rho) * (a - 1) - out["a"]) / rho).reshape(3, R)    # estimated ∇_μ E_q[ℓ]
    h = 1e-5
    # exact ∇_μ E_q[ℓ] by central differences of the closed form in μ: O(h²) ≈ 1e-10, far below the errors below
    exact = np.array([(power_expected(-1 / ai + h) - power_expected(-1 / ai - h)) / (2 * h) for ai in a0])
    for est in nat.values():
        se = est.std(axis=1, ddof=1) / np.sqrt(R)
        # 5 standard errors: a false alarm has probability < 1e-6 per group (and the seed is fixed)
        assert np.all(np.abs(est.mean(axis=1) - exact) < 5 * se)
    # with the same uniform draws the pathwise estimator is less noisy on this smooth loss (variance ratios here
    # are 0.5 and below; a variance estimated from 4000 replicas is good to a few per cent, so 0.75 is safe)
    assert np.all(nat["rp"].var(axis=1) < 0.75 * nat["sf"].var(axis=1))


def test_exponential_family_is_unbiased():
    """Exp(r): λ = −r, μ = 1/r; ℓ(θ) = (θ − 2)² + sin θ, E_q[ℓ] = 2μ² − 4μ + 4 + r/(1 + r²) in closed form."""
    mod = compiled("exponential")
    R, rho, S = 4000, 0.3, 2
    r0 = np.array([0.5, 1.3, 3.0])
    r = np.repeat(r0, R)
    out = mod.step(mod.init(r=r), oracles={"grad": lambda t: 2 * (t - 2) + np.cos(t)},
                   rng=np.random.default_rng(12), rho=rho, S=S)
    # λ_{t+1} = −r_{t+1} = (1 − ρ)(−r) − ρ ∇_μ E_q[ℓ]
    nat = ((out["r"] - (1 - rho) * r) / rho).reshape(3, R)

    def expected(mu):
        rr = 1 / mu
        return 2 * mu ** 2 - 4 * mu + 4 + rr / (1 + rr ** 2)
    h = 1e-6
    exact = (expected(1 / r0 + h) - expected(1 / r0 - h)) / (2 * h)
    se = nat.std(axis=1, ddof=1) / np.sqrt(R)
    assert np.all(np.abs(nat.mean(axis=1) - exact) < 5 * se)            # 5σ, as above


def test_a_hard_threshold_sampler_is_refused():
    with pytest.raises(SpecError, match="concrete_relaxation"):
        api.derive(recipe("bernoulli_logit"))

"""monte_carlo (Sec. 4.4, Eq. 46; weight perturbation): E_q[∇ℓ] and E_q[∇²ℓ] are averages of the oracles at
samples θ_k = m + ε_k/√s of the mean-field Gaussian q = N(m, 1/s).

Checked numerically:

* with the same draws (a generator with the same seed), the step is Eq. 46 written out here by hand;
* the step is an unbiased estimate of the exact BLR step (Eq. 6): the reference takes central differences in
  μ = (m, m² + 1/s) of the closed-form E_q[ℓ] of a non-polynomial loss (never Bonnet's or Price's formulas), and
  the mean of many independent replicas must lie within 5 standard errors of it; the same test sees the delta
  method's bias, so it has the power to tell the two apart;
* with a fixed precision (SGD, Eq. 40 without masks) only the gradient is sampled, m ← m − ρ E_q[∇ℓ]/s.
"""
import functools

import numpy as np
import yaml

from blr_derive import api


@functools.lru_cache(maxsize=None)
def compiled(family="gaussian_diag"):
    text = yaml.safe_dump({"name": "mc_test", "family": family, "loss": "abstract",
                           "hyperparameters": {"rho": 0.1, "S": {"default": 3, "type": "int"}},
                           "approximations": [{"monte_carlo": {"samples": "S"}}]}, sort_keys=False)
    return api.derive(text).compile("numpy")


# ℓ(θ) = Σ sin θ + 0.1 θ⁴ (separable, not a polynomial): its oracles, and its exact expectation under N(m, v):
# E[sin θ] = e^{-v/2} sin m, E[θ⁴] = m⁴ + 6m²v + 3v².
def grad(t):
    return np.cos(t) + 0.4 * t ** 3


def hess(t):
    return -np.sin(t) + 1.2 * t ** 2


def expected_loss(m, v):
    return np.exp(-v / 2) * np.sin(m) + 0.1 * (m ** 4 + 6 * m ** 2 * v + 3 * v ** 2)


def exact_natural_gradient(m, s, h=1e-5):
    """∇_μ E_q[ℓ] by central differences in μ = (m, m² + v): O(h²) ≈ 1e-10 truncation, rounding ~1e-16/h ≈ 1e-11."""
    u1, u2 = m, m ** 2 + 1 / s
    E = lambda a, b: expected_loss(a, b - a ** 2)
    return ((E(u1 + h, u2) - E(u1 - h, u2)) / (2 * h), (E(u1, u2 + h) - E(u1, u2 - h)) / (2 * h))


def test_same_draws_give_eq46_by_hand():
    mod = compiled()
    rng = np.random.default_rng(11)
    m0 = rng.normal(size=5)
    s0 = rng.uniform(0.5, 4.0, size=5)
    rho, S = 0.3, 4
    out = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, rng=np.random.default_rng(7),
                   rho=rho, S=S)
    draws = np.random.default_rng(7)
    theta = [m0 + draws.standard_normal(5) / np.sqrt(s0) for _ in range(S)]
    g_bar = np.mean([grad(t) for t in theta], axis=0)
    h_bar = np.mean([hess(t) for t in theta], axis=0)
    s1 = (1 - rho) * s0 + rho * h_bar                                   # Eq. 46
    m1 = m0 - rho * g_bar / s1
    # the step averages online (ḡ += (g_k − ḡ)/(k+1)), np.mean sums then divides: a few roundings apart
    np.testing.assert_allclose(out["s"], s1, rtol=1e-12, atol=1e-14)
    np.testing.assert_allclose(out["m"], m1, rtol=1e-12, atol=1e-14)


def replicas(R):
    """Three distinct (m, s), each repeated R times: the mean-field step treats every coordinate independently, so
    the R copies are R independent draws of the estimator."""
    m_g = np.array([0.4, -1.1, 0.8])
    s_g = np.array([2.0, 0.8, 5.0])
    return m_g, s_g, np.repeat(m_g, R), np.repeat(s_g, R)


def test_step_is_unbiased_for_the_exact_blr_step():
    mod = compiled()
    R, rho, S = 5000, 0.4, 2
    m_g, s_g, m0, s0 = replicas(R)
    out = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, rng=np.random.default_rng(3),
                   rho=rho, S=S)
    # the new natural parameters λ = (s m, −s/2) are linear in (ḡ, h̄), so their means are unbiased
    lam1 = (out["s"] * out["m"]).reshape(3, R)
    lam2 = (-out["s"] / 2).reshape(3, R)
    G1, G2 = exact_natural_gradient(m_g, s_g)
    ref1 = (1 - rho) * s_g * m_g - rho * G1                              # Eq. 6 (h = 1)
    ref2 = (1 - rho) * (-s_g / 2) - rho * G2
    se1 = lam1.std(axis=1, ddof=1) / np.sqrt(R)
    se2 = lam2.std(axis=1, ddof=1) / np.sqrt(R)
    # 5 standard errors: a false alarm has probability < 1e-6 per statistic (and the seed is fixed)
    assert np.all(np.abs(lam1.mean(axis=1) - ref1) < 5 * se1)
    assert np.all(np.abs(lam2.mean(axis=1) - ref2) < 5 * se2)
    # the test can see a wrong expectation: the delta method (oracles at m) is many standard errors off here
    d1 = (1 - rho) * s_g * m_g + rho * (hess(m_g) * m_g - grad(m_g))
    d2 = -((1 - rho) * s_g + rho * hess(m_g)) / 2
    assert np.all(np.abs(d1 - ref1) > 20 * se1) and np.all(np.abs(d2 - ref2) > 20 * se2)


def test_fixed_precision_samples_only_the_gradient_and_is_unbiased():
    mod = compiled("gaussian_diag_fixed_precision")
    assert set(mod.ORACLES) == {"grad"}
    R, rho, S = 5000, 0.5, 3
    m_g, s_g, m0, s0 = replicas(R)
    out = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad}, rng=np.random.default_rng(5), rho=rho, S=S)
    np.testing.assert_array_equal(out["s"], s0)                          # the known precision is not updated
    # same draws: m ← m − ρ ḡ/s
    draws = np.random.default_rng(5)
    g_bar = np.mean([grad(m0 + draws.standard_normal(m0.shape) / np.sqrt(s0)) for _ in range(S)], axis=0)
    np.testing.assert_allclose(out["m"], m0 - rho * g_bar / s0, rtol=1e-12, atol=1e-14)
    # unbiased: with λ = s m and h(θ) = exp(−sθ²/2), Eq. 6 gives λ ← sm − ρ ∇_m E_q[ℓ]; the exact ∇_m E_q[ℓ] is a
    # central difference of the closed form in m (μ = m here)
    h = 1e-5
    v = 1 / s_g
    exact = (expected_loss(m_g + h, v) - expected_loss(m_g - h, v)) / (2 * h)
    m1 = out["m"].reshape(3, R)
    ref = m_g - rho * exact / s_g
    se = m1.std(axis=1, ddof=1) / np.sqrt(R)
    assert np.all(np.abs(m1.mean(axis=1) - ref) < 5 * se)                # 5σ, as above

"""Rule ``family_prior`` (Eq. 1 with p₀ = q(·; λ₀) in the candidate's family; Sec. 5.1): ℓ̄ = ℓ − log p₀, and
since −log p₀ = −log h − ⟨λ₀, T⟩ + A(λ₀) is linear in T up to log h, its natural gradient is exactly −λ₀ (the
−log h cancels the base-measure term of Eq. 6): λ_{t+1} = (1 − ρ)λ_t − ρ(∇_μ E_q[ℓ] − λ₀).

Independent of tests/unit/rules/test_family_prior.py (Gauss-Hermite on a θ-dependent base measure), this module
checks:

* a Gaussian prior N(m₀, 1/s₀) given as λ₀ = (s₀m₀, −s₀/2) is the same step as the plain BLR on the oracles
  (g + s₀(θ − m₀), H + s₀) under the delta method, and under Monte Carlo as the plain BLR on oracles shifted by
  the *exact* expectations s₀(m − m₀) and s₀ (not their values at the samples);
* BayesBiNN's Bernoulli prior (Eq. 52 with a prior): under the same Concrete draws the step with the rule minus
  the step without it is exactly ρλ₀, and with no loss gradient q relaxes to the prior,
  λ_T = λ₀ + (1 − ρ)^T(λ_0 − λ₀);
* conjugate Beta-Bernoulli and Gamma-Poisson with the prior declared by the rule and ρ = 1: the posterior's mean
  and E[log θ] equal those of prior × likelihood integrated by adaptive quadrature (scipy).
"""
import functools
import math

import numpy as np
import scipy.integrate
import scipy.special
import yaml

from blr_derive import api

# both sides are a handful of double-precision operations grouped differently: a few roundings of ~1e-16
RTOL = 1e-12


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def gaussian(expectation="delta", with_rule=True):
    approx = [expectation if expectation != "mc" else {"monte_carlo": {"samples": "S"}}]
    if with_rule:
        approx.append({"family_prior": {"lambda1": "s0*m0", "lambda2": "-s0/2"}})
    hp = {"rho": 0.1, "s0": 1.0, "m0": 0.0}
    if expectation == "mc":
        hp["S"] = {"default": 4, "type": "int"}
    return compiled(yaml.safe_dump({"name": f"fp_gauss_{expectation}_{with_rule}", "family": "gaussian_diag",
                                    "loss": "abstract", "hyperparameters": hp, "approximations": approx},
                                   sort_keys=False))


def problem(seed=0, n=5):
    rng = np.random.default_rng(seed)
    a, c = rng.uniform(0.5, 2.0, size=n), rng.normal(size=n)
    grad = lambda t: a * (t - c) + 0.3 * np.sin(t)                  # noqa: E731
    hess = lambda t: a + 0.3 * np.cos(t)                            # noqa: E731
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess


S0, M0 = 0.7, np.array([0.5, -1.0, 2.0, 0.0, 0.3])


def test_gaussian_prior_is_the_plain_step_on_shifted_oracles_delta():
    with_, without = gaussian(), gaussian(with_rule=False)
    m0, s0, grad, hess = problem()
    a, b, plain = with_.init(m=m0, s=s0), without.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(6):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, rho=0.3, s0=S0, m0=M0)
        # −log N(θ | m₀, 1/s₀) has gradient s₀(θ − m₀) and Hessian s₀; delta: the oracles are called at m_t
        b = without.step(b, oracles={"grad": lambda t: grad(t) + S0 * (t - M0), "hess": lambda t: hess(t) + S0},
                         rho=0.3)
        plain = without.step(plain, oracles={"grad": grad, "hess": hess}, rho=0.3)
        for k in ("m", "s"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=1e-14)
    assert np.abs(a["m"] - plain["m"]).max() > 1e-2          # the prior really moved the iterates


def test_gaussian_prior_under_monte_carlo_is_exact_not_sampled():
    with_, without = gaussian("mc"), gaussian("mc", with_rule=False)
    m0, s0, grad, hess = problem(1)
    a = with_.step(with_.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, rng=np.random.default_rng(4),
                   rho=0.4, s0=S0, m0=M0)
    # E_q[s₀(θ − m₀)] = s₀(m − m₀): a constant shift at every sample θ_k (the same draws from the same seed)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": lambda t: grad(t) + S0 * (m0 - M0),
                                                        "hess": lambda t: hess(t) + S0},
                     rng=np.random.default_rng(4), rho=0.4)
    for k in ("m", "s"):
        np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=1e-14)


def test_gaussian_prior_alone_fixed_point_is_the_prior():
    """No loss gradient: λ_T = λ₀ + (1 − ρ)^T(λ_0 − λ₀), i.e. q → N(m₀, 1/s₀) geometrically."""
    mod = gaussian()
    m, s = np.array([3.0, -2.0, 1.0, 0.5, 4.0]), np.array([0.2, 5.0, 1.0, 2.0, 9.0])
    zero = {"grad": lambda t: 0 * t, "hess": lambda t: 0 * t}
    st, rho, T = mod.init(m=m, s=s), 0.25, 30
    for _ in range(T):
        st = mod.step(st, oracles=zero, rho=rho, s0=S0, m0=M0)
    decay = (1 - rho) ** T
    s_ref = S0 + decay * (s - S0)
    m_ref = (S0 * M0 + decay * (s * m - S0 * M0)) / s_ref
    # 30 steps of a contraction: accumulated roundings ~30·1e-16
    np.testing.assert_allclose(st["s"], s_ref, rtol=1e-12)
    np.testing.assert_allclose(st["m"], m_ref, rtol=1e-12, atol=1e-14)


# ------------------------------------------------------------------------------------ Bernoulli (BayesBiNN)
def bernoulli(with_rule):
    approx = [{"concrete_relaxation": {"temperature": "tau", "samples": "S"}}]
    if with_rule:
        approx.append({"family_prior": {"lambda1": "l0"}})
    return compiled(yaml.safe_dump({"name": f"fp_bern_{with_rule}", "family": "bernoulli_logit", "loss": "abstract",
                                    "hyperparameters": {"rho": 0.1, "tau": 1.0, "l0": 0.0,
                                                        "S": {"default": 2, "type": "int"}},
                                    "approximations": approx}, sort_keys=False))


def test_bernoulli_prior_adds_rho_lambda0_under_the_same_relaxed_samples():
    with_, without = bernoulli(True), bernoulli(False)
    rng = np.random.default_rng(2)
    W = rng.normal(size=(6, 6))
    grad = lambda t: W @ t + np.sin(t)                              # noqa: E731  at relaxed samples in (−1, 1)
    lam = rng.normal(size=6)
    for rho, l0 in ((0.1, 0.4), (0.5, -1.3)):
        a = with_.step(with_.init(lam=lam), oracles={"grad": grad}, rng=np.random.default_rng(11),
                       rho=rho, tau=0.7, l0=l0)
        b = without.step(without.init(lam=lam), oracles={"grad": grad}, rng=np.random.default_rng(11),
                         rho=rho, tau=0.7)
        np.testing.assert_allclose(a["lam"] - b["lam"], rho * l0, rtol=1e-12, atol=1e-14)


def test_bernoulli_prior_alone_relaxes_to_the_prior():
    mod = bernoulli(True)
    lam0, l0, rho, T = np.array([2.0, -0.5, 0.0]), 0.8, 0.2, 25
    st = mod.init(lam=lam0)
    for _ in range(T):
        st = mod.step(st, oracles={"grad": lambda t: 0 * t}, rng=np.random.default_rng(0), rho=rho, tau=1.0, l0=l0)
    # 25 steps of a contraction: accumulated roundings ~25·1e-16
    np.testing.assert_allclose(st["lam"], l0 + (1 - rho) ** T * (lam0 - l0), rtol=1e-12)


# ------------------------------------------------------------------------------------ conjugate priors
def conjugate(family, loss, data, prior):
    return compiled(yaml.safe_dump({"name": f"fp_conj_{family}", "family": family,
                                    "loss": {"expression": loss, "data": data},
                                    "hyperparameters": {"a0": 1.0, "b0": 1.0},
                                    "approximations": ["exact", {"family_prior": prior}, "unit_learning_rate"]},
                                   sort_keys=False))


QUAD = dict(epsabs=0, epsrel=1e-13, limit=200)


def moments(unnorm, lo, hi):
    """Posterior mean and E[log θ] of an unnormalised density by adaptive quadrature."""
    Z = scipy.integrate.quad(unnorm, lo, hi, **QUAD)[0]
    mean = scipy.integrate.quad(lambda t: t * unnorm(t), lo, hi, **QUAD)[0] / Z
    elog = scipy.integrate.quad(lambda t: math.log(t) * unnorm(t), lo, hi, **QUAD)[0] / Z
    return mean, elog


def test_beta_prior_by_the_rule_gives_the_quadrature_posterior():
    mod = conjugate("beta", "-n1*log(theta) - n0*log(1 - theta)", {"n1": {}, "n0": {}},
                    {"lambda1": "a0 - 1", "lambda2": "b0 - 1"})
    n1, n0, a0, b0 = 9, 4, 0.7, 3.2
    out = mod.step(mod.init(a=1.0, b=1.0), data={"n1": n1, "n0": n0}, a0=a0, b0=b0)
    a, b = float(out["a"]), float(out["b"])
    mean, elog = moments(lambda t: t ** (a0 - 1 + n1) * (1 - t) ** (b0 - 1 + n0), 0, 1)
    # QUADPACK to ~1e-12 relative on smooth (or integrably singular) integrands: 1e-9 is a safe margin; a
    # prior ignored or counted twice moves the mean by > 1e-2
    assert abs(a / (a + b) - mean) < 1e-9 * mean
    assert abs(scipy.special.digamma(a) - scipy.special.digamma(a + b) - elog) < 1e-9 * abs(elog)


def test_gamma_prior_by_the_rule_gives_the_quadrature_posterior():
    mod = conjugate("gamma", "n*theta - s*log(theta)", {"n": {}, "s": {}}, {"lambda1": "a0 - 1", "lambda2": "-b0"})
    y = np.random.default_rng(3).poisson(2.5, size=12)
    a0, b0 = 1.8, 0.6
    out = mod.step(mod.init(alpha=1.0, beta=1.0), data={"n": len(y), "s": y.sum()}, a0=a0, b0=b0)
    alpha, beta = float(out["alpha"]), float(out["beta"])
    # prior θ^(a0−1) e^(−b0 θ) times the Poisson likelihood Π θ^y_i e^(−θ), constants dropped; the mass beyond
    # θ = 60 is below e^(−500)
    lp = lambda t: (a0 - 1 + y.sum()) * math.log(t) - (b0 + len(y)) * t           # noqa: E731
    shift = lp((a0 - 1 + y.sum()) / (b0 + len(y)))                                 # the mode: avoids overflow
    mean, elog = moments(lambda t: math.exp(lp(t) - shift), 0, 60)
    assert abs(alpha / beta - mean) < 1e-9 * mean
    assert abs(scipy.special.digamma(alpha) - math.log(beta) - elog) < 1e-9 * abs(elog)

"""concrete_relaxation (Sec. 4.5, Eqs. 49-52): the binary sample sign(λ + δ(u)), δ(u) = log(u/(1 − u))/2, is
relaxed to θ̂ = tanh((λ + δ(u))/τ) (Eq. 50), and ∇_μ E_q[ℓ] ≈ s ∇ℓ(θ̂) with s = ∇_μ θ̂ (Eq. 51), averaged over the
draws; the BLR step is then BayesBiNN, λ ← (1 − ρ)λ − ρ s∘∇ℓ(θ̂) (Eq. 52).

Checked numerically:

* same draws: the step is Eq. 52 with the paper's s = (1 − θ̂²)/(τ(1 − tanh²λ)), evaluated in 50-digit mpmath;
* s is the derivative of θ̂ in μ = tanh λ (central differences of θ̂ and μ in λ, for fixed u), and the family
  parameterized by p = P(θ = +1) (chain rule through p) gives the same λ step;
* the estimator is unbiased for ∇_μ of the *relaxed* expected loss E_u[ℓ(θ̂)], computed by adaptive quadrature
  over the logistic noise and differentiated in μ by central differences (5 standard errors over replicas);
* where tanh saturates in double precision the step stays finite and exact (sech² instead of 1 − tanh²), and the
  ``eps`` floor is (num + ε)/(den + ε);
* as τ → 0 the relaxed samples become the hard ones, whose mean is μ = tanh λ.
"""
import functools

import mpmath
import numpy as np
import yaml
from scipy import integrate, special

from blr_derive import api

mpmath.mp.dps = 50


@functools.lru_cache(maxsize=None)
def compiled(family="bernoulli_logit", eps=False):
    args = {"temperature": "tau", "samples": "S"}
    hp = {"rho": 0.1, "tau": 1.0, "S": {"default": 1, "type": "int"}}
    if eps:
        args["eps"] = "eps"
        hp["eps"] = 1e-10
    text = yaml.safe_dump({"name": "cr_test", "family": family, "loss": "abstract", "hyperparameters": hp,
                           "approximations": [{"concrete_relaxation": args}]}, sort_keys=False)
    return api.derive(text).compile("numpy")


def delta(u):
    return np.log(u / (1 - u)) / 2


def paper_s(lam, u, tau, eps=0):
    """Eq. 51's s_j = (1 − θ̂²)/(τ(1 − tanh²λ)) in 50 digits (from the same double-precision u); with a floor ε
    on both factors, (num + ε)/(den + ε)."""
    out = []
    with mpmath.workdps(50):            # whatever precision another test module left global
        for l, uu in zip(np.ravel(lam), np.ravel(u)):
            l, uu = mpmath.mpf(float(l)), mpmath.mpf(float(uu))
            th = mpmath.tanh((l + mpmath.log(uu / (1 - uu)) / 2) / tau)
            num, den = (1 - th ** 2) / tau, 1 - mpmath.tanh(l) ** 2
            out.append(float((num + eps) / (den + eps)))
    return np.array(out).reshape(np.shape(lam))


def test_same_draws_give_eq52_with_the_papers_s():
    mod = compiled()
    lam = np.array([-0.7, 0.2, 1.3, 3.0, -2.2])
    c = np.array([0.8, -0.5, 1.4, 0.3, -1.0])
    grad = lambda t: c * np.exp(c * t)
    rho, tau, S = 0.3, 0.7, 3
    out = mod.step(mod.init(lam=lam), oracles={"grad": grad}, rng=np.random.default_rng(21), rho=rho, tau=tau, S=S)
    draws = np.random.default_rng(21)
    ngrad = np.zeros_like(lam)
    for _ in range(S):
        u = draws.random(lam.shape)
        theta = np.tanh((lam + delta(u)) / tau)                          # Eq. 50
        ngrad += paper_s(lam, u, tau) * grad(theta) / S                  # Eq. 51
    # s in double precision is a few roundings from the 50-digit value (|x| ≲ 10 here): 1e-12 relative is wide
    np.testing.assert_allclose(out["lam"], (1 - rho) * lam - rho * ngrad, rtol=1e-12, atol=1e-14)   # Eq. 52


def test_s_is_the_derivative_of_the_relaxed_sample_in_mu():
    mod = compiled()
    lam = np.array([-1.5, -0.3, 0.0, 0.4, 1.1, 2.0])
    rho, tau = 0.5, 0.6
    one = lambda t: np.ones_like(t)                                      # ∇ℓ ≡ 1: the step reveals s itself
    out = mod.step(mod.init(lam=lam), oracles={"grad": one}, rng=np.random.default_rng(2), rho=rho, tau=tau, S=1)
    s = ((1 - rho) * lam - out["lam"]) / rho
    u = np.random.default_rng(2).random(lam.shape)
    h = 1e-6
    th = lambda l: np.tanh((l + delta(u)) / tau)
    s_fd = (th(lam + h) - th(lam - h)) / (np.tanh(lam + h) - np.tanh(lam - h))      # dθ̂/dμ for fixed u
    # quotient of two central differences: O(h²) truncation and ~1e-16/h ≈ 1e-10 rounding relative; 1e-6 is wide
    np.testing.assert_allclose(s, s_fd, rtol=1e-6)


def test_probability_parameterization_gives_the_same_step():
    """In ``bernoulli`` (parameter p) s comes from the chain rule through p; λ = logit(p)/2 must move the same way."""
    lam = np.array([-1.5, -0.3, 0.4, 1.1, 2.0])
    grad = lambda t: 2 * (t - 0.4) + np.cos(t)
    rho, tau, S = 0.2, 0.8, 4
    a, b = compiled(), compiled("bernoulli")
    out_l = a.step(a.init(lam=lam), oracles={"grad": grad}, rng=np.random.default_rng(5), rho=rho, tau=tau, S=S)
    out_p = b.step(b.init(p=special.expit(2 * lam)), oracles={"grad": grad}, rng=np.random.default_rng(5),
                   rho=rho, tau=tau, S=S)
    # the p-form's closed form goes through exp/log of p: agreement to ~1e-14, so 1e-11 is a wide margin
    np.testing.assert_allclose(out_p["p"], special.expit(2 * out_l["lam"]), rtol=1e-11)


def relaxed_expected_loss(mu, tau, c):
    """E_u[ℓ(tanh((λ + δ)/τ))], λ = atanh μ, ℓ(θ) = exp(cθ), by adaptive quadrature over δ = logit(u)/2, whose
    density is 2σ(2δ)(1 − σ(2δ)) (to ~1e-13)."""
    lam = np.arctanh(mu)
    dens = lambda d: 2 * special.expit(2 * d) * special.expit(-2 * d)
    f = lambda d: np.exp(c * np.tanh((lam + d) / tau)) * dens(d)
    return integrate.quad(f, -np.inf, np.inf, epsabs=1e-14, epsrel=1e-13)[0]


def test_unbiased_for_the_gradient_of_the_relaxed_expected_loss():
    mod = compiled()
    R, rho, tau, S = 4000, 0.5, 0.7, 2
    lam_g = np.array([-0.7, 0.2, 1.3])
    c_g = np.array([0.8, -0.5, 1.4])
    lam, c = np.repeat(lam_g, R), np.repeat(c_g, R)
    out = mod.step(mod.init(lam=lam), oracles={"grad": lambda t: c * np.exp(c * t)}, rng=np.random.default_rng(7),
                   rho=rho, tau=tau, S=S)
    nat = (((1 - rho) * lam - out["lam"]) / rho).reshape(3, R)
    h = 1e-4
    mu = np.tanh(lam_g)
    # central differences of quadratures: O(h²) ≈ 1e-8 truncation, ~1e-13/h ≈ 1e-9 rounding; SE is ~1e-2
    relaxed = np.array([(relaxed_expected_loss(m + h, tau, cc) - relaxed_expected_loss(m - h, tau, cc)) / (2 * h)
                        for m, cc in zip(mu, c_g)])
    se = nat.std(axis=1, ddof=1) / np.sqrt(R)
    # 5 standard errors: a false alarm has probability < 1e-6 per group (and the seed is fixed)
    assert np.all(np.abs(nat.mean(axis=1) - relaxed) < 5 * se)
    # it is the relaxed objective that is estimated: the exact ∇_μ E_q[ℓ] = (ℓ(1) − ℓ(−1))/2 is far off at τ = 0.7
    exact = np.sinh(c_g)
    assert np.all(np.abs(exact - relaxed) > 10 * se)


def test_saturated_tanh_is_finite_and_exact_and_eps_floors_s():
    lam = np.array([25.0, -28.0, 22.0])
    rho, tau = 0.5, 1.0
    one = lambda t: np.ones_like(t)
    mod = compiled()
    out = mod.step(mod.init(lam=lam), oracles={"grad": one}, rng=np.random.default_rng(3), rho=rho, tau=tau, S=1)
    u = np.random.default_rng(3).random(lam.shape)
    with np.errstate(invalid="ignore", divide="ignore"):      # the paper's formula in doubles: 0/0 here
        naive = (1 - np.tanh((lam + delta(u)) / tau) ** 2) / (tau * (1 - np.tanh(lam) ** 2))
    assert not np.all(np.isfinite(naive))
    s = ((1 - rho) * lam - out["lam"]) / rho
    # sech² has no cancellation: s (0.2 to 11 here) is a few roundings from the 50-digit value; recovering it
    # from λ_{t+1} = (1 − ρ)λ − ρs loses about |λ|/|s| ≈ 100 ulps ≈ 2e-14, so 1e-9 is a wide margin
    np.testing.assert_allclose(s, paper_s(lam, u, tau), rtol=1e-9)
    # with a floor ε: s = (num + ε)/(den + ε); at λ = 400 both factors underflow to 0 and s is ε/ε = 1
    mod_e = compiled(eps=True)
    lam2 = np.array([25.0, 400.0, -0.3])
    out = mod_e.step(mod_e.init(lam=lam2), oracles={"grad": one}, rng=np.random.default_rng(4), rho=rho, tau=tau,
                     S=1, eps=1e-12)
    u = np.random.default_rng(4).random(lam2.shape)
    s = ((1 - rho) * lam2 - out["lam"]) / rho
    np.testing.assert_allclose(s, paper_s(lam2, u, tau, eps=mpmath.mpf(1e-12)), rtol=1e-9)


def test_zero_temperature_samples_have_mean_mu():
    """As τ → 0, θ̂ → sign(λ + δ(u)): P(θ = +1) = σ(2λ), so E[θ] = tanh λ = μ (the sampler of Eq. 50)."""
    mod = compiled()
    R = 20000
    lam_g = np.array([-0.8, 0.1, 1.2])
    lam = np.repeat(lam_g, R)
    seen = []
    with np.errstate(over="ignore"):            # s = sech²(x/τ)/…: cosh overflows to inf, sech to an exact 0
        mod.step(mod.init(lam=lam), oracles={"grad": lambda t: seen.append(t) or np.zeros_like(t)},
                 rng=np.random.default_rng(13), tau=1e-9, S=1)
    theta = seen[0].reshape(3, R)
    # θ̂ = ±1 unless |λ + δ| < ~2e-8 (probability ~1e-8 per draw)
    assert np.all(np.abs(theta) == 1.0)
    se = np.sqrt(1 - np.tanh(lam_g) ** 2) / np.sqrt(R)       # sd of a ±1 variable of mean μ
    assert np.all(np.abs(theta.mean(axis=1) - np.tanh(lam_g)) < 5 * se)     # 5σ

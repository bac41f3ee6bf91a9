"""The chi family with known degrees of freedom k (a fixed real parameter) and scale sigma: T = θ², h = θ^(k-1),
λ = -1/(2σ²); A(λ) derived by integration.  Against scipy.stats.chi(k, scale=sigma): μ = E[θ²], Fisher = Var[θ²],
entropy and log-density; `check`; and a conjugate BLR step (ρ = 1) against the closed form and against prior ×
likelihood integrated with scipy's density.  No sampler: a chi draw with a real k needs a gamma draw, not a
transformation of one u or z."""
import math

import numpy as np
import pytest
import yaml
from scipy import integrate, stats

from blr_derive import api
from blr_derive.families.library import load_family
from blr_derive.verify.family import check_family

POINTS = [(0.7, 1.0), (1.6, 3.0), (0.4, 7.5)]          # (sigma, k)
QUAD = {"epsabs": 0, "epsrel": 1e-12, "limit": 400}


@pytest.fixture(scope="module")
def fam():
    return load_family("chi")


def at(fam, sigma, k):
    return {fam.params["sigma"].symbol: sigma, fam.params["k"].symbol: k}


def expect(law, g):
    return integrate.quad(lambda t: g(t) * law.pdf(t), 0, np.inf, **QUAD)[0]


@pytest.mark.parametrize("sigma, k", POINTS)
def test_mu_fisher_entropy_density_match_scipy(fam, sigma, k):
    law, vals = stats.chi(k, scale=sigma), at(fam, sigma, k)
    mu = expect(law, lambda t: t**2)
    assert fam.evaluate(fam.mu_ord[0], vals) == pytest.approx(mu, rel=1e-10)
    lam = {fam.lam[0]: fam.evaluate(fam.eta[0], vals), fam.params["k"].symbol: k}
    assert fam.evaluate(fam.mu_of_lam[0], lam) == pytest.approx(mu, rel=1e-10)
    var = expect(law, lambda t: (t**2 - mu) ** 2)
    assert fam.fisher_at(lam)[0, 0] == pytest.approx(var, rel=1e-9)
    assert fam.evaluate(fam.entropy(), vals) == pytest.approx(float(law.entropy()), rel=1e-10)
    logq = fam.log_density()
    for t in (0.05, 0.6, 1.0, 2.7, 6.0):
        assert fam.evaluate(logq, {**vals, fam.theta: t}) == pytest.approx(law.logpdf(t), rel=1e-11, abs=1e-12)


def test_check_passes(fam):
    checks = check_family(fam, points=3, seed=0)
    assert len(checks) == 12 and all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert {"sampler_vs_density", "sampler_ks"} <= {c.name for c in checks}      # σ√(2·gammaincinv(k/2, u))


def test_conjugate_step_for_gaussian_data_with_unknown_scale():
    """A chi prior of scale s0 times exp(-cθ²) (a loss linear in T = θ², Sec. 5.1): the posterior is chi with the
    same k and 1/(2σ²) = 1/(2 s0²) + c, reached in one step with ρ = 1."""
    mod = api.derive(yaml.safe_dump({
        "name": "chi_conjugate", "family": "chi",
        "loss": {"expression": "c*theta**2", "data": {"c": {}}}, "hyperparameters": {"s0": 1.0},
        "approximations": ["exact", {"family_prior": {"lambda1": "-1/(2*s0**2)"}}, "unit_learning_rate"]},
        sort_keys=False)).compile("numpy")
    k, s0, c = 3.5, 1.3, 0.7
    out = mod.step(mod.init(sigma=1.0, k=k), data={"c": c}, s0=s0)
    sigma = 1 / math.sqrt(2 * (1 / (2 * s0**2) + c))
    assert float(out["sigma"]) == pytest.approx(sigma, rel=1e-14)
    assert float(out["k"]) == k
    # E[θ²] under prior × exp(-cθ²), integrated with scipy's chi density, equals k σ'²
    prior = stats.chi(k, scale=s0)
    w = lambda t: prior.pdf(t) * math.exp(-c * t**2)              # noqa: E731
    Z = integrate.quad(w, 0, np.inf, **QUAD)[0]
    m2 = integrate.quad(lambda t: t**2 * w(t), 0, np.inf, **QUAD)[0] / Z
    assert m2 == pytest.approx(k * float(out["sigma"]) ** 2, rel=1e-9)


def test_damped_step_keeps_the_base_measure_term():
    """Without a prior the BLR keeps ∇_μ E_q[log h] = ∇_μ (k-1)E[log θ]: Eq. 6 written by hand, with the gradient of
    E_q[log h] (by quad under scipy's density) taken by central differences in μ = E[θ²] = kσ²."""
    mod = api.derive(yaml.safe_dump({
        "name": "chi_damped", "family": "chi", "loss": {"expression": "c*theta**2", "data": {"c": {}}},
        "hyperparameters": {"rho": 0.5}, "approximations": ["exact"]}, sort_keys=False)).compile("numpy")
    k, sigma, c, rho = 3.0, 0.9, 0.4, 0.3

    def e_logh(mu):
        law = stats.chi(k, scale=math.sqrt(mu / k))
        return expect(law, lambda t: (k - 1) * math.log(t))
    mu, eps = k * sigma**2, 1e-4
    g = c + (e_logh(mu + eps) - e_logh(mu - eps)) / (2 * eps)
    lam = (1 - rho) * (-1 / (2 * sigma**2)) - rho * g
    out = mod.step(mod.init(sigma=sigma, k=k), data={"c": c}, rho=rho)
    assert float(out["sigma"]) == pytest.approx(1 / math.sqrt(-2 * lam), rel=1e-8)

"""Families whose log base measure is not in the span of their statistics (Rayleigh h = θ, Weibull h = kθ^{k−1},
chi-square h = e^{−θ/2}): E_q[log h] comes from the tilted log-partition d/ds log ∫ h^{1+s} exp(<λ, T>) dθ at s = 0
(App. B), so their entropy is in closed form.  Everything is compared with scipy.stats: E[T] by quad of scipy's
pdf, the entropy, the log-density and, where a sampler is declared, its law (moments z-test, Kolmogorov-Smirnov)."""
import math

import numpy as np
import pytest
import sympy as sp
from scipy import integrate, stats

from blr_derive.families.library import load_family

CASES = [
    ("rayleigh", {}, {"sigma": 0.7}, lambda o: stats.rayleigh(scale=o["sigma"]), lambda t: t ** 2),
    ("rayleigh", {}, {"sigma": 2.3}, lambda o: stats.rayleigh(scale=o["sigma"]), lambda t: t ** 2),
    ("weibull", {"k": 2}, {"lam": 1.4}, lambda o: stats.weibull_min(2, scale=o["lam"]), lambda t: t ** 2),
    ("weibull", {"k": 3}, {"lam": 0.6}, lambda o: stats.weibull_min(3, scale=o["lam"]), lambda t: t ** 3),
    ("weibull", {"k": 1}, {"lam": 2.0}, lambda o: stats.weibull_min(1, scale=o["lam"]), lambda t: t),
    ("chi_square", {}, {"k": 3.5}, lambda o: stats.chi2(o["k"]), np.log),
    ("chi_square", {}, {"k": 0.8}, lambda o: stats.chi2(o["k"]), np.log),
]
IDS = [f"{n}{''.join(f'-{k}{v}' for k, v in s.items())}-{list(o.values())[0]}" for n, s, o, _, _ in CASES]


def setup(case):
    name, sizes, o, law, T = case
    fam = load_family({"name": name, **sizes} if sizes else name)
    vals = {fam.params[k].symbol: v for k, v in o.items()}
    return fam, vals, law(o), T


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_entropy_in_closed_form_matches_scipy(case):
    fam, vals, law, _ = setup(case)
    H = fam.entropy()
    assert not H.has(sp.Integral)
    assert float(fam.evaluate(H, vals)) == pytest.approx(float(law.entropy()), rel=1e-12, abs=1e-13)


@pytest.mark.parametrize("case", CASES, ids=IDS)
def test_mean_statistic_and_log_density_match_scipy(case):
    fam, vals, law, T = setup(case)
    want = integrate.quad(lambda t: T(t) * law.pdf(t), 0, np.inf, epsabs=0, epsrel=1e-12, limit=200)[0]
    assert float(fam.evaluate(fam.mu_ord[0], vals)) == pytest.approx(want, rel=1e-9)
    logq = fam.log_density()
    for t in (0.3, 1.0, 2.7):
        got = float(fam.evaluate(logq, {**vals, fam.theta: t}))
        assert got == pytest.approx(float(law.logpdf(t)), rel=1e-12, abs=1e-12)


@pytest.mark.parametrize("case", [c for c in CASES if c[0] != "chi_square"],
                         ids=[i for c, i in zip(CASES, IDS) if c[0] != "chi_square"])
def test_sampler_draws_from_the_family(case):
    fam, vals, law, T = setup(case)
    u = next(s for s in fam.sampler.free_symbols if s.name == "u")
    params = list(vals)
    draw = sp.lambdify([u, *params], fam.sampler, "numpy")
    x = draw(np.random.default_rng(3).random(400_000), *vals.values())
    t = T(x)
    mu = float(fam.evaluate(fam.mu_ord[0], vals))
    assert abs(t.mean() - mu) / (t.std(ddof=1) / math.sqrt(t.size)) < 5          # z-test at 5σ
    assert stats.kstest(x, law.cdf).pvalue > 1e-4


def test_rayleigh_candidate_step_is_eq_6_with_the_base_measure_gradient_by_quadrature():
    """Eq. 6 over the Rayleigh family with ℓ = aθ²: λ ← (1 − ρ)λ − ρ(a + ∇_μE_q[log θ]), μ = E[θ²] = 2σ².  The
    reference differentiates E_q[log θ] (scipy quad of scipy's pdf) in μ by central differences."""
    import yaml

    from blr_derive import api
    mod = api.derive(yaml.safe_dump({"name": "rayleigh_step", "family": "rayleigh",
                                     "loss": {"expression": "a*theta**2"},
                                     "hyperparameters": {"a": 0.8, "rho": 0.3},
                                     "approximations": ["exact"]})).compile("numpy")
    sigma, a, rho = 1.3, 0.8, 0.3

    def e_log(mu):
        law = stats.rayleigh(scale=math.sqrt(mu / 2))
        return integrate.quad(lambda t: math.log(t) * law.pdf(t), 0, np.inf, epsabs=0, epsrel=1e-13, limit=200)[0]

    mu, h = 2 * sigma ** 2, 1e-4
    g_logh = (e_log(mu + h) - e_log(mu - h)) / (2 * h)
    lam = (1 - rho) * (-1 / (2 * sigma ** 2)) - rho * (a + g_logh)
    got = float(mod.step(mod.init(sigma=sigma), a=a, rho=rho)["sigma"])
    assert got == pytest.approx(math.sqrt(-1 / (2 * lam)), rel=1e-8)       # central differences: O(h²) ≈ 1e-9

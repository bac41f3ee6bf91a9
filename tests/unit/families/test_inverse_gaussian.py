"""The inverse Gaussian (Wald) family IG(mu, lam): T = (θ, 1/θ), h = (2πθ³)^(-1/2), λ = (-lam/(2mu²), -lam/2),
A(λ) derived by integration, and E_q[log h] declared (``expected_log_base_measure``) with the exponential integral
E₁: E[log θ] = log mu - e^{2lam/mu} E₁(2lam/mu).  Against scipy.stats.invgauss: μ, Fisher = Cov[T], entropy,
log-density; `check`; a conjugate BLR step (ρ = 1, the prior cancels log h) against the closed form and prior ×
likelihood by quadrature; and the damped exact step without a prior, whose base-measure term uses the declared
E_q[log h], against Eq. 6 with ∇_μ E_q[log h] by finite differences of scipy quadrature.  No sampler: the
Michael-Schucany-Haas transformation needs a normal and a uniform draw (a sampler takes one)."""
import math

import numpy as np
import pytest
import sympy as sp
import yaml
from scipy import integrate, stats

from blr_derive import api
from blr_derive.core.errors import SpecError
from blr_derive.core.resources import families_dir
from blr_derive.families.library import load_family
from blr_derive.verify.family import check_family

POINTS = [(1.0, 2.0), (0.5, 0.3), (3.0, 10.0)]          # (mu, lam)
QUAD = {"epsabs": 0, "epsrel": 1e-12, "limit": 400}


@pytest.fixture(scope="module")
def fam():
    return load_family("inverse_gaussian")


def law(mu, lam):
    return stats.invgauss(mu / lam, scale=lam)


def expect(d, g):
    """E[g(θ)] under scipy's law, in θ = e^z (the density is sharply peaked for large lam/mu)."""
    def f(z):
        lp = d.logpdf(math.exp(z)) + z if abs(z) < 700 else -np.inf
        return g(math.exp(z)) * math.exp(lp) if lp > -700 else 0.0     # 0 where the density underflows
    mode = math.log(d.mean())
    return sum(integrate.quad(f, a, b, **QUAD)[0] for a, b in ((-np.inf, mode), (mode, np.inf)))


@pytest.mark.parametrize("mu, lam", POINTS)
def test_mu_fisher_entropy_density_match_scipy(fam, mu, lam):
    d = law(mu, lam)
    vals = {fam.params["mu"].symbol: mu, fam.params["lam"].symbol: lam}
    T = [lambda t: t, lambda t: 1 / t]
    want = [expect(d, g) for g in T]
    np.testing.assert_allclose([fam.evaluate(m, vals) for m in fam.mu_ord], want, rtol=1e-10)
    lvals = {l: fam.evaluate(e, vals) for l, e in zip(fam.lam, fam.eta)}
    np.testing.assert_allclose([fam.evaluate(m, lvals) for m in fam.mu_of_lam], want, rtol=1e-10)
    cov = [[expect(d, lambda t, a=a, b=b: (T[a](t) - want[a]) * (T[b](t) - want[b])) for b in range(2)]
           for a in range(2)]
    np.testing.assert_allclose(fam.fisher_at(lvals), cov, rtol=1e-8)
    h_q = -expect(d, d.logpdf)
    assert fam.evaluate(fam.entropy(), vals) == pytest.approx(h_q, rel=1e-10)
    assert fam.evaluate(fam.entropy(), vals) == pytest.approx(float(d.entropy()), rel=1e-7)   # scipy: by quad
    logq = fam.log_density()
    for t in (0.02, 0.4, 1.0, 2.5, 9.0):
        assert fam.evaluate(logq, {**vals, fam.theta: t}) == pytest.approx(d.logpdf(t), rel=1e-11, abs=1e-11)


def test_declared_mean_of_log_h_is_the_closed_form_of_E_log_theta(fam):
    mu, lam = 0.5, 0.3
    vals = {fam.params["mu"].symbol: mu, fam.params["lam"].symbol: lam}
    e_log = expect(law(mu, lam), math.log)
    assert fam.evaluate(fam.expect_log_h(), vals) == pytest.approx(-math.log(2 * math.pi) / 2 - 1.5 * e_log,
                                                                   rel=1e-11)


def test_check_passes(fam):
    checks = check_family(fam, points=3, seed=0)
    assert len(checks) == 12 and all(c.passed for c in checks), [c for c in checks if not c.passed]
    assert {"sampler_vs_density", "sampler_ks"} <= {c.name for c in checks}      # two draws (z, u)


def test_a_wrong_declared_mean_of_log_h_fails_check(tmp_path):
    text = (families_dir() / "inverse_gaussian.yaml").read_text().replace("- 3*(log(mu)", "- 2*(log(mu)")
    p = tmp_path / "ig_wrong.yaml"
    p.write_text(text)
    failed = {c.name for c in check_family(load_family(str(p)), points=2, seed=0) if not c.passed}
    assert failed == {"entropy_vs_quadrature"}


def test_declared_mean_of_log_h_is_located_when_malformed(tmp_path):
    text = (families_dir() / "inverse_gaussian.yaml").read_text().replace("exp1(2*lam/mu))", "exp1(2*lam/mu, 1))")
    p = tmp_path / "ig_bad.yaml"
    p.write_text(text)
    with pytest.raises(SpecError) as e:
        load_family(str(p))
    assert e.value.line == text.splitlines().index(
        next(l for l in text.splitlines() if l.startswith("expected_log_base_measure"))) + 1


def test_conjugate_step():
    """A prior IG(m0, l0) times exp(-aθ - b/θ) is IG with λ = λ₀ - (a, b) (Sec. 5.1); the prior cancels log h."""
    mod = api.derive(yaml.safe_dump({
        "name": "ig_conjugate", "family": "inverse_gaussian",
        "loss": {"expression": "a*theta + b/theta", "data": {"a": {}, "b": {}}},
        "hyperparameters": {"m0": 1.0, "l0": 1.0},
        "approximations": ["exact", {"family_prior": {"lambda1": "-l0/(2*m0**2)", "lambda2": "-l0/2"}},
                           "unit_learning_rate"]}, sort_keys=False)).compile("numpy")
    m0, l0, a, b = 1.5, 2.0, 0.7, 0.2
    out = mod.step(mod.init(mu=1.0, lam=1.0), data={"a": a, "b": b}, m0=m0, l0=l0)
    l1, l2 = -l0 / (2 * m0**2) - a, -l0 / 2 - b
    assert float(out["lam"]) == pytest.approx(-2 * l2, rel=1e-14)
    assert float(out["mu"]) == pytest.approx(math.sqrt(l2 / l1), rel=1e-14)
    prior = law(m0, l0)
    Z = expect(prior, lambda t: math.exp(-a * t - b / t))
    for g, want in ((lambda t: t, float(out["mu"])), (lambda t: 1 / t, 1 / float(out["mu"]) + 1 / float(out["lam"]))):
        assert expect(prior, lambda t: g(t) * math.exp(-a * t - b / t)) / Z == pytest.approx(want, rel=1e-9)


def test_damped_step_through_the_declared_base_measure_term():
    """Without a prior, Eq. 6 keeps ∇_μ E_q[log h]; the derived update (symbolic, and the generated numpy module,
    which calls scipy.special.exp1) against λ' = (1-ρ)λ - ρ((a, b) + ∇_μ E_q[log h]), the gradient by central
    differences in μ = (E θ, E 1/θ) of E_q[log h] integrated with scipy's density."""
    d = api.derive(yaml.safe_dump({
        "name": "ig_damped", "family": "inverse_gaussian",
        "loss": {"expression": "a*theta + b/theta", "data": {"a": {}, "b": {}}},
        "hyperparameters": {"rho": 0.5}, "approximations": ["exact"]}, sort_keys=False))
    mu, lam, a, b, rho = 1.2, 2.5, 0.3, 0.4, 0.25
    syms = {s.name: s for e in d.update.values() for s in e.free_symbols}
    vals = {syms["mu"]: mu, syms["lam"]: lam, syms["a"]: a, syms["b"]: b, syms["rho"]: rho}
    got = {k: float(sp.lambdify(list(vals), e, modules=["scipy", "numpy"])(*vals.values()))
           for k, e in d.update.items()}

    def e_logh(m1, m2):                       # μ → (mu, lam): m1 = mu, m2 = 1/mu + 1/lam
        dd = law(m1, 1 / (m2 - 1 / m1))
        return expect(dd, lambda t: -0.5 * math.log(2 * math.pi * t**3))
    m1, m2, eps = mu, 1 / mu + 1 / lam, 1e-4
    g1 = (e_logh(m1 + eps, m2) - e_logh(m1 - eps, m2)) / (2 * eps)
    g2 = (e_logh(m1, m2 + eps) - e_logh(m1, m2 - eps)) / (2 * eps)
    l1 = (1 - rho) * (-lam / (2 * mu**2)) - rho * (a + g1)
    l2 = (1 - rho) * (-lam / 2) - rho * (b + g2)
    assert got["lam"] == pytest.approx(-2 * l2, rel=1e-7)
    assert got["mu"] == pytest.approx(math.sqrt(l2 / l1), rel=1e-7)
    mod = d.compile("numpy")
    out = mod.step(mod.init(mu=mu, lam=lam), data={"a": a, "b": b}, rho=rho)
    assert float(out["lam"]) == pytest.approx(got["lam"], rel=1e-12)
    assert float(out["mu"]) == pytest.approx(got["mu"], rel=1e-12)

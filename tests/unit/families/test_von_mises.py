"""The von Mises family on the circle (support `circular`, statistics cos θ and sin θ, A = log 2π I₀(|λ|)):
against scipy.stats.vonmises, and as a BLR candidate whose direction update is atan2 (defined on the axis λ₂ = 0,
where sympy's half-angle inverse is 0/0)."""
import numpy as np
import pytest
import yaml
from scipy import integrate, stats

from blr_derive import api
from blr_derive.families.library import load_family
from blr_derive.verify.family import check_family

POINTS = [(0.3, 2.0), (-2.5, 0.4), (1.0, 12.0)]


@pytest.fixture(scope="module")
def fam():
    return load_family("von_mises")


@pytest.mark.parametrize("a, kappa", POINTS)
def test_moments_entropy_and_density_match_scipy(fam, a, kappa):
    law = stats.vonmises(kappa, loc=a)
    vals = {fam.params["a"].symbol: a, fam.params["kappa"].symbol: kappa}
    want = [integrate.quad(lambda t: g(t) * law.pdf(t), -np.pi, np.pi, epsabs=0, epsrel=1e-12)[0]
            for g in (np.cos, np.sin)]
    got = [float(fam.evaluate(m, vals)) for m in fam.mu_ord]
    np.testing.assert_allclose(got, want, rtol=1e-10, atol=1e-12)
    assert float(fam.evaluate(fam.entropy(), vals)) == pytest.approx(float(law.entropy()), rel=1e-10)
    logq = fam.log_density()
    for t in (-3.0, -0.5, 0.0, 2.2):
        assert float(fam.evaluate(logq, {**vals, fam.theta: t})) == pytest.approx(law.logpdf(t), rel=1e-12)


def test_check_passes(fam):
    assert all(c.passed for c in check_family(fam, points=2, seed=3, mc_samples=5000))


@pytest.mark.parametrize("b", [0.0, 0.7, -2.9])
def test_conjugate_posterior_of_directions(b):
    """Prior vM(a₀, κ₀) times exp(c cos(θ − b)) is vM with λ = λ₀ + c(cos b, sin b): one step with ρ = 1 (Sec. 5.1).
    With a₀ = 0 and b = 0 the direction stays on the axis λ₂ = 0."""
    mod = api.derive(yaml.safe_dump({
        "name": "vm_directions", "family": "von_mises",
        "loss": {"expression": "-c*cos(theta - b)", "data": {"c": {}, "b": {}}},
        "hyperparameters": {"a0": 0.0, "k0": 1.5},
        "approximations": ["exact", {"family_prior": {"lambda1": "k0*cos(a0)", "lambda2": "k0*sin(a0)"}},
                           "unit_learning_rate"]})).compile("numpy")
    c, a0, k0 = 2.5, 0.0, 1.5
    out = mod.step(mod.init(a=1.0, kappa=3.0), data={"c": c, "b": b}, a0=a0, k0=k0)
    lam = np.array([k0 * np.cos(a0) + c * np.cos(b), k0 * np.sin(a0) + c * np.sin(b)])
    assert float(out["kappa"]) == pytest.approx(np.hypot(*lam), rel=1e-14)
    assert float(out["a"]) == pytest.approx(np.arctan2(lam[1], lam[0]), rel=1e-14, abs=1e-15)

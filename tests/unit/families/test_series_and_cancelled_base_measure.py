"""Infinite discrete supports (App. B): E_q[log h] as a series whose terms overflow in double precision is still
summed exactly (the terms are re-evaluated in 50 digits, never dropped), with a geometric tail bound; and a base
measure with no closed-form E_q[log h] is usable as a BLR candidate when a prior in the family cancels it."""
import mpmath
import numpy as np
import pytest
import sympy as sp
import yaml
from scipy import stats

from blr_derive import api
from blr_derive.core.errors import DerivationError
from blr_derive.families.library import load_family
from blr_derive.families.symbolic import numeric_infinite_sums

NB_REAL = """
name: nb_real_r
description: negative binomial with a real, known size r (h = Γ(θ + r)/(Γ(r) θ!))
variable: theta
support: nonnegative_integers
parameters:
  p: {domain: unit_interval, description: success probability}
  r: {domain: positive, fixed: true, description: known size}
sufficient_statistics:
  - theta
base_measure: gamma(theta + r)/(gamma(r)*factorial(theta))
natural_parameters:
  - log(1 - p)
log_partition: -r*log(1 - exp(lambda1))
expectation_parameters:
  - r*(1 - p)/p
"""


@pytest.mark.parametrize("p, r", [(0.946, 1.16), (0.3, 2.5), (0.05, 0.7)])
def test_entropy_of_a_series_with_overflowing_terms_matches_scipy(tmp_path, p, r):
    """At p = 0.946, r = 1.16 the float64 terms Γ(k + r)/Γ(k + 1)·q(k) overflow past k ≈ 171; dropping them gave
    an entropy off by 3e-5.  At p = 0.05 the series needs thousands of terms."""
    path = tmp_path / "nb_real_r.yaml"
    path.write_text(NB_REAL, encoding="utf-8")
    fam = load_family(str(path))
    vals = {fam.params["p"].symbol: p, fam.params["r"].symbol: r}
    got = float(fam.evaluate(fam.entropy(), vals))
    assert got == pytest.approx(reference_entropy(p, r), rel=1e-14)
    # scipy's entropy truncates its own series (1.6e-10 relative at p = 0.05): a coarser, independent check
    assert got == pytest.approx(float(stats.nbinom(r, p).entropy()), rel=1e-9)


def reference_entropy(p, r):
    """−Σ_k pmf(k) log pmf(k) in 30-digit arithmetic (mpmath's nsum with its own convergence acceleration)."""
    with mpmath.workdps(30):
        r, p = mpmath.mpf(r), mpmath.mpf(p)

        def logpmf(k):
            return (mpmath.loggamma(k + r) - mpmath.loggamma(r) - mpmath.loggamma(k + 1) + r * mpmath.log(p)
                    + k * mpmath.log(1 - p))
        return float(mpmath.nsum(lambda k: -mpmath.exp(logpmf(k)) * logpmf(k), [0, mpmath.inf]))


def test_a_series_that_does_not_settle_is_an_error_not_a_number():
    k = sp.Symbol("k", integer=True, nonnegative=True)
    with pytest.raises(DerivationError, match="did not settle"):
        numeric_infinite_sums(sp.Sum(1 / (k + 1), (k, 0, sp.oo)))           # the harmonic series diverges


def test_a_geometric_series_stops_at_its_tail_bound():
    k = sp.Symbol("k", integer=True, nonnegative=True)
    got = float(numeric_infinite_sums(sp.Sum(sp.Rational(9, 10) ** k * k, (k, 0, sp.oo))))
    assert got == pytest.approx(0.9 / 0.1 ** 2, rel=1e-14)                   # Σ k x^k = x/(1 − x)²


def test_poisson_candidate_with_a_gamma_free_prior_in_its_family():
    """E_q[log h] = −E_q[log θ!] has no closed form; the Poisson prior q(θ; λ₀) cancels it.  Loss c·θ tilts the
    prior: one step with ρ = 1 gives λ = λ₀ − c, i.e. rate r = r₀ e^{−c}; with ρ < 1, Eq. 6 is
    log r ← (1 − ρ) log r + ρ(log r₀ − c)."""
    text = yaml.safe_dump({"name": "tilted_poisson", "family": "poisson",
                           "loss": {"expression": "c*theta", "data": {"c": {}}},
                           "hyperparameters": {"r0": 2.0, "rho": 0.4},
                           "approximations": ["exact", {"family_prior": {"lambda1": "log(r0)"}}]})
    mod = api.derive(text).compile("numpy")
    (name,) = mod.STATE
    out = float(mod.step(mod.init(**{name: 5.0}), data={"c": 0.7}, r0=2.0, rho=0.4)[name])
    assert out == pytest.approx(np.exp(0.6 * np.log(5.0) + 0.4 * (np.log(2.0) - 0.7)), rel=1e-14)


def test_without_the_prior_the_refusal_names_the_way_out():
    text = yaml.safe_dump({"name": "poisson_alone", "family": "poisson",
                           "loss": {"expression": "c*theta", "data": {"c": {}}}, "approximations": ["exact"]})
    with pytest.raises(Exception, match="family_prior"):
        api.derive(text)

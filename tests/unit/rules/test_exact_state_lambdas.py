"""`exact` through the tilted log-partition for a family whose λ is not a rational function of its ordinary
parameters (the continuous Bernoulli's λ = log(p/(1 − p))): ∇_λE_q[ℓ] and F(λ) are kept as functions of λ, computed
once from p (``rules/fisher.py: state_lambdas``).  Written out in p they were expanded into terms that cancel near
p = 1 ((1 − p)⁻³ as 1/(1 − 3p + 3p² − p³)): the new p was wrong by 2.3e-9 at p = 0.99, 2.8e-6 at 0.999, 1.4e-3 at
0.9999, and from p = 1 − 1e-5 the step raised a false "rounded onto the boundary".

Reference, independent of the derivation: Eq. 6 of Khan & Rue (2023) in the natural parameter,
λ' = (1 − ρ)λ − ρ∇_μE_q[ℓ] (h = 1, no prior), with T = θ, so ∇_μE_q[θ²] = Cov(θ², θ)/Var θ (Eq. 4: F = Var T,
∇_λE_q[θ²] = Cov(θ², T)), the moments by mpmath quadrature at 40 digits; p' = σ(λ')."""
import mpmath as mp
import numpy as np
import pytest
import yaml

from blr_derive import api

LOSS, C, RHO = "c*theta + (theta - 0.3)**2", 0.7, 0.5


def reference(p, c=C, rho=RHO):
    """The new p of one step from p, at 40 digits."""
    with mp.workdps(40):
        p = mp.mpf(p)
        lam = mp.log(p / (1 - p))
        shift = lam if lam > 0 else 0             # e^{λ(θ − 1)} on (0, 1) where λ > 0: no overflow

        def moment(k):
            return mp.quad(lambda t: t ** k * mp.exp(lam * t - shift), [0, 1])
        z = moment(0)
        m1, m2, m3 = moment(1) / z, moment(2) / z, moment(3) / z
        grad = c - mp.mpf("0.6") + (m3 - m2 * m1) / (m2 - m1 ** 2)       # ∇_μ E_q[cθ + (θ − 0.3)²]
        new = (1 - rho) * lam - rho * grad
        return 1 / (1 + mp.exp(-new))


def module(family, tmp_path=None):
    if tmp_path is not None:
        src = tmp_path / "logit_cb.yaml"
        src.write_text("name: logit_cb\nvariable: theta\nsupport: unit_interval\n"
                       "parameters:\n  q: {domain: unit_interval}\nsufficient_statistics: [theta]\n"
                       "base_measure: 1\nnatural_parameters: [log(q) - log(1 - q)]\n", encoding="utf-8")
        family = str(src)
    return api.derive(yaml.safe_dump({"name": "cb_exact" if tmp_path is None else "cb_user", "family": family,
                                      "loss": {"expression": LOSS, "data": {"c": {}}},
                                      "hyperparameters": {"rho": RHO}, "approximations": ["exact"]})
                      ).compile("numpy")


POINTS = [0.5, 0.99, 0.999, 0.9999, 1 - 1e-5, 1 - 1e-6, 0.45, 0.55, 1e-4]


def check(mod, name):
    got = mod.step(mod.init(**{name: np.array(POINTS)}), data={"c": C}, rho=RHO)[name]
    want = [float(reference(p)) for p in POINTS]
    # within the removable-singularity guard's promise next to λ = 0 (p = 0.45, 0.55: 1e-12), 1e-14 elsewhere
    np.testing.assert_allclose(got, want, rtol=2e-12, atol=0)
    far = [i for i, p in enumerate(POINTS) if abs(p - 0.5) > 0.1]
    np.testing.assert_allclose(got[far], np.array(want)[far], rtol=1e-14, atol=0)


def test_the_reference_reproduces_the_reported_values():
    assert float(reference(0.9999)) == pytest.approx(0.977441336269418, abs=1e-15)
    assert float(reference(1 - 1e-5)) == pytest.approx(0.992457401293908, abs=1e-15)


def test_continuous_bernoulli_step_near_the_boundary():
    check(module("continuous_bernoulli"), "p")


def test_a_user_family_with_a_logit_natural_parameter(tmp_path):
    """The same law written by a user as log(q) − log(1 − q): the same numbers (nothing specific to one family)."""
    check(module(None, tmp_path), "q")


def test_lambda_is_computed_once_only_for_a_transcendental_map():
    """λ is named where η is not rational (log p/(1 − p)); a beta's (a − 1, b − 1) stays substituted (λ + 1 = a
    cancels exactly, where the number λ + 1 would lose the digits of a small a)."""
    cb = api.derive(yaml.safe_dump({"name": "cb", "family": "continuous_bernoulli", "loss": {"expression": "theta**2"},
                                    "hyperparameters": {"rho": RHO}, "approximations": ["exact"]}))
    beta = api.derive(yaml.safe_dump({"name": "b", "family": "beta", "loss": {"expression": "theta**2"},
                                      "hyperparameters": {"rho": RHO}, "approximations": ["exact"]}))
    assert "lambda1 = " in cb.code("numpy") and "lambda1 = " not in beta.code("numpy")


def test_a_gradient_rational_in_the_state_is_written_in_it():
    """Poisson (λ = log r): ∇_μE_q[θ² + log θ!] = 1 + 2e^λ = 1 + 2r is written in r, not from λ recomputed (whose
    rounding, times 2r, moved the new r by 4e-14 at r = 100); the step is λ' = (1 − ρ)log r − ρ(1 + 2r)."""
    d = api.derive(yaml.safe_dump({"name": "pois", "family": "poisson",
                                   "loss": {"expression": "theta**2 + lgamma(theta + 1)"},
                                   "hyperparameters": {"rho": RHO}, "approximations": ["exact"]}))
    assert "lambda1 = " not in d.code("numpy")
    r = np.array([1e-8, 0.5, 3.0, 100.0])
    got = d.compile("numpy").step({"r": r}, rho=RHO)["r"]
    want = [float(mp.exp((1 - RHO) * mp.log(x) - RHO * (1 + 2 * mp.mpf(x)))) for x in r]
    # the exponent's own rounding at r = 100 (|λ'| ≈ 98: ε·98 = 2e-14) bounds any float64 evaluation; measured 9.5e-15
    np.testing.assert_allclose(got, want, rtol=2e-14, atol=0)

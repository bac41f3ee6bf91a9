"""The approximation ``family_prior`` (a prior p₀ = q(·; λ₀) in the candidate's family, Eq. 1; Sec. 5.1).

-log p₀ = -log h - <λ₀, T> + A(λ₀), so Eq. 6 with ℓ̄ = ℓ - log p₀ needs ∇_μE_q[ℓ̄ + log h] = ∇_μE_q[ℓ] - λ₀: the
prior's -log h cancels the base-measure term of Eq. 6.  These tests check the derived step against Eq. 6
evaluated numerically (Gauss-Hermite expectations, central differences in μ) for a family whose base
measure depends on θ, where a missing cancellation changes the update."""
import math

import numpy as np
import pytest

from blr_derive import api as blr
from blr_derive.core.errors import SpecError

A, B = 1.7, 0.4                 # the loss ℓ(θ) = A(θ - B)²/2: the delta method is exact for it


def grad(theta):
    return A * (np.asarray(theta) - B)


def eq6_step_by_quadrature(m, s, lam0, rho):
    """λ_{t+1} = (1 - ρ)λ - ρ ∇_μ E_q[ℓ - log p₀ + log h] for q = N(m, 1/s) (λ = s m, μ = m), with E_q by
    Gauss-Hermite quadrature and ∇_μ by central differences; returns m_{t+1} = λ_{t+1}/s."""
    z, w = np.polynomial.hermite_e.hermegauss(40)
    w = w / math.sqrt(2 * math.pi)

    def log_h(th):
        return 0.5 * math.log(s / (2 * math.pi)) - s * th ** 2 / 2

    def log_p0(th):               # h(θ) exp(λ₀θ - A(λ₀)), A(λ) = λ²/(2s)
        return log_h(th) + lam0 * th - lam0 ** 2 / (2 * s)

    def expected(mu):
        th = mu + z / math.sqrt(s)
        return float(np.dot(w, A * (th - B) ** 2 / 2 - log_p0(th) + log_h(th)))

    h = 1e-5
    g_mu = (expected(m + h) - expected(m - h)) / (2 * h)
    return ((1 - rho) * s * m - rho * g_mu) / s


def prior_recipe(extra=()):
    return blr.derive(family="gaussian_diag_fixed_precision", approximations=["delta", {"family_prior": {
        "lambda1": "lam0"}}, *extra], hyperparameters={"rho": 0.3, "lam0": 0.0}, name="prior_fixed_precision")


def test_family_prior_with_a_theta_dependent_base_measure_is_eq_6_with_the_prior():
    mod = prior_recipe().compile("numpy")
    rng = np.random.default_rng(3)
    for _ in range(5):
        m, s = rng.normal(size=4), rng.uniform(0.5, 3.0, size=4)
        lam0, rho = float(rng.normal()), float(rng.uniform(0.1, 0.9))
        out = mod.step(mod.init(m=m, s=s), oracles={"grad": grad}, rho=rho, lam0=lam0)
        want = [eq6_step_by_quadrature(mi, si, lam0, rho) for mi, si in zip(m, s)]
        np.testing.assert_allclose(out["m"], want, rtol=1e-8, atol=1e-8)
        # the fixed point is the MAP of ℓ(θ) - log p₀(θ): (A B + λ₀)/(A + s)
        st = mod.init(m=m, s=s)
        for _ in range(200):
            st = mod.step(st, oracles={"grad": grad}, rho=rho, lam0=lam0)
        np.testing.assert_allclose(st["m"], (A * B + lam0) / (A + s), rtol=1e-10)


def test_family_prior_on_vector_natural_parameters_is_a_located_error():
    with pytest.raises(SpecError, match="family_prior takes scalar ones") as exc:
        blr.derive(family="gaussian_fixed_cov", approximations=["delta", {"family_prior": {"lambda1": "c"}}],
                   hyperparameters={"c": 0.5})
    assert exc.value.line is not None


def test_family_prior_without_entropy_needs_a_constant_base_measure():
    with pytest.raises(SpecError, match="does not cancel"):
        prior_recipe(extra=["no_entropy"])


def test_the_notebook_api_takes_a_mixture_family_mapping():
    """blr.derive(family={mixture: ...}) is the recipe key's mixture declaration (it was read as a family file)."""
    d = blr.derive(family={"mixture": "gaussian_diag", "components": 2}, approximations=["delta", "separated_components"],
                   hyperparameters={"rho": 0.1})
    assert set(d.update) == {"m1", "s1", "m2", "s2"}
    with pytest.raises(SpecError, match="does not apply to a mixture"):
        blr.derive(family={"mixture": "gaussian_diag", "components": 2},
                   approximations=["delta", {"family_prior": {"lambda1": "0"}}])

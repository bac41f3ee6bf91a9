"""Generated modules of families without a closed-form μ → λ map solve it by Newton's method."""
import numpy as np
import pytest

from conftest import FUNCTION_TARGETS, load_generated

CASES = {
    "beta_bernoulli": [dict(a=2.5, b=0.7), dict(a=0.3, b=9.0)],
    "gamma_poisson": [dict(alpha=3.0, beta=0.5), dict(alpha=0.4, beta=7.0)],
    "dirichlet_categorical_unrolled": [dict(a1=0.5, a2=2.0, a3=7.0)],
    "normal_gamma": [dict(m=0.3, kappa=2.0, alpha=1.7, beta=0.6)],
}


@pytest.mark.parametrize("name,params", [(n, p) for n, ps in CASES.items() for p in ps])
def test_round_trip_through_expectation_parameters(name, params):
    mod = load_generated(name)
    lam = mod.natural_parameters(**params)
    mu = mod.expectation_parameters(lam)
    back = mod.ordinary_from_expectation(mu)
    for k, v in params.items():
        assert back[k] == pytest.approx(v, rel=1e-9)
    # μ = ∇A: the generated Fisher information is the Jacobian of the generated μ(λ)
    h = 1e-6
    J = np.array([(mod.expectation_parameters(lam + h * e) - mod.expectation_parameters(lam - h * e)) / (2 * h)
                  for e in np.eye(len(lam))]).T
    np.testing.assert_allclose(mod.fisher_information(lam), J, rtol=1e-6, atol=1e-8)


def test_matches_the_engine_and_scipy_for_the_beta():
    import scipy.special as sps
    mod = load_generated("beta_bernoulli")
    a, b = 1.7, 4.2
    mu = [sps.digamma(a) - sps.digamma(a + b), sps.digamma(b) - sps.digamma(a + b)]   # E[log θ], E[log(1-θ)]
    back = mod.ordinary_from_expectation(mu)
    assert back["a"] == pytest.approx(a, rel=1e-10) and back["b"] == pytest.approx(b, rel=1e-10)


def test_outside_the_expectation_space_is_an_error():
    mod = load_generated("beta_bernoulli")
    with pytest.raises(ArithmeticError):
        mod.ordinary_from_expectation([0.5, 0.5])       # E[log θ] must be negative


#: E_q[T] of the normal-gamma at m = 1 + 1e-8, κ = α = β = 1 by the check's quadrature: 1e-8 from μ at the
#: solver's start (m = κ = α = β = 1), where the decrease of A(λ) − <λ, μ> (1e-16) is below the rounding of A
NEAR_START_MU = ["0x1.0000002af3265p+0", "0x1.0000002af3046p+1", "0x1.000000000008bp+0", "-0x1.2788cfc6fa80ap-1"]


@pytest.mark.parametrize("target", FUNCTION_TARGETS)
def test_newton_converges_from_a_start_next_to_the_solution(target):
    """The jax module's ordinary_from_expectation raised 'did not converge (|∇A(λ) - μ| = 6.99e-09)' here (found by
    check's hunt): the Armijo test could not see the decrease below A's rounding; a step that halves the gradient
    is now accepted near the solution."""
    if target == "jax":
        import jax
        old = jax.config.jax_enable_x64
        jax.config.update("jax_enable_x64", True)
    try:
        mod = load_generated("normal_gamma", target)
        mu = np.array([float.fromhex(x) for x in NEAR_START_MU])
        back = mod.ordinary_from_expectation(mu)
        assert float(back["m"]) == pytest.approx(1 + 1e-8, rel=1e-12)
        for k in ("kappa", "alpha", "beta"):
            assert float(back[k]) == pytest.approx(1.0, rel=1e-9)
        lam = mod.natural_parameters(*[float(back[k]) for k in ("m", "kappa", "alpha", "beta")])
        np.testing.assert_allclose(np.asarray(mod.expectation_parameters(lam), dtype=float), mu, rtol=1e-12)
    finally:
        if target == "jax":
            jax.config.update("jax_enable_x64", old)

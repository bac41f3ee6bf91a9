"""Closed-form Gaussian expectations beyond polynomials: E[P(θ) e^{aθ + b}] from the moment-generating function
(a Poisson log-link loss under the `exact` rule), checked against Gauss–Hermite quadrature, and the resulting BLR
step (Eq. 6) against finite differences of the quadrature E_q[ℓ](μ)."""
import numpy as np
import pytest
import sympy as sp
import yaml

from blr_derive import api
from blr_derive.core.errors import DerivationError
from blr_derive.core.expect import gaussian_expectation

x, m, v, a, b = sp.symbols("theta m v a b", real=True)
NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(80)


def quad(f, mean, var):
    return float(np.sum(WEIGHTS * f(mean + np.sqrt(var) * NODES)) / np.sqrt(2 * np.pi))


@pytest.mark.parametrize("expr, fn", [
    (sp.exp(x), np.exp),
    (sp.exp(2 * x - 1), lambda t: np.exp(2 * t - 1)),
    (x ** 2 * sp.exp(-x / 2) + 3 * x, lambda t: t ** 2 * np.exp(-t / 2) + 3 * t),
    (sp.exp(x) * (x - 1) ** 3, lambda t: np.exp(t) * (t - 1) ** 3),
])
def test_polynomial_times_exponential_against_quadrature(expr, fn):
    mean, var = 0.3, 0.7
    got = gaussian_expectation(expr, x, m, v + m ** 2)
    assert not got.has(x)
    value = float(got.xreplace({m: mean, v: var}))
    assert value == pytest.approx(quad(fn, mean, var), rel=1e-12)


def test_nonlinear_exponents_are_refused():
    with pytest.raises(DerivationError, match="linear exponent"):
        gaussian_expectation(sp.exp(x ** 2), x, m, v + m ** 2)


@pytest.mark.slow
def test_poisson_log_link_blr_step_is_eq_6():
    """ℓ(θ) = e^θ − yθ + θ²/2 under N(m, 1/s): the exact step equals λ ← (1 − ρ)λ − ρ∇_μ E_q[ℓ] with the gradient by
    central differences of the quadrature expectation in μ = (m, m² + 1/s)."""
    mod = api.derive(yaml.safe_dump({"name": "poisson_exact", "family": "gaussian_diag",
                                     "loss": {"expression": "exp(theta) - y*theta + 0.5*theta**2",
                                              "data": {"y": {}}},
                                     "hyperparameters": {"rho": 0.5}, "approximations": ["exact"]})).compile("numpy")
    m0, s0, y, rho = np.array([0.4, -1.2]), np.array([2.0, 0.7]), np.array([3.0, 0.0]), 0.5
    out = mod.step(mod.init(m=m0, s=s0), data={"y": y}, rho=rho)

    def e_loss(mu1, mu2, yy):
        return quad(lambda t: np.exp(t) - yy * t + 0.5 * t ** 2, mu1, mu2 - mu1 ** 2)

    for i in range(2):
        mu1, mu2, h = m0[i], m0[i] ** 2 + 1 / s0[i], 1e-5
        g1 = (e_loss(mu1 + h, mu2, y[i]) - e_loss(mu1 - h, mu2, y[i])) / (2 * h)
        g2 = (e_loss(mu1, mu2 + h, y[i]) - e_loss(mu1, mu2 - h, y[i])) / (2 * h)
        lam1 = (1 - rho) * s0[i] * m0[i] - rho * g1
        lam2 = (1 - rho) * (-s0[i] / 2) - rho * g2
        s_new = -2 * lam2
        assert out["s"][i] == pytest.approx(s_new, rel=1e-8)                # central differences: O(h²)
        assert out["m"][i] == pytest.approx(lam1 / s_new, rel=1e-8)

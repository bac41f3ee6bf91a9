"""The one μ → λ solver (blr_derive/core/newton.py): against closed forms, and embedded verbatim in the generated
modules that need it (the engine and the generated code cannot disagree)."""
import inspect

import numpy as np
import pytest
from scipy import special

from blr_derive.core import newton
from conftest import GENERATED, load_generated


def _beta():
    """Beta(a, b) in natural parameters λ = (a − 1, b − 1): A = lnB(a, b), μ = (ψ(a) − ψ(a+b), ψ(b) − ψ(a+b))."""
    def A(lam):
        a, b = lam + 1
        return special.betaln(a, b)

    def grad(lam):
        a, b = lam + 1
        return np.array([special.digamma(a) - special.digamma(a + b), special.digamma(b) - special.digamma(a + b)])

    def hess(lam):
        a, b = lam + 1
        t = special.polygamma(1, a + b)
        return np.array([[special.polygamma(1, a) - t, -t], [-t, special.polygamma(1, b) - t]])
    return A, grad, hess, lambda lam: bool(np.all(lam > -1))


@pytest.mark.parametrize("a,b", [(0.3, 0.7), (2.0, 5.0), (40.0, 0.9), (1e3, 2e3)])
def test_newton_dual_recovers_beta_parameters_from_their_mean_statistics(a, b):
    A, grad, hess, ok = _beta()
    mu = grad(np.array([a - 1, b - 1]))
    lam = newton.newton_dual(mu, np.zeros(2), A, grad, hess, ok)
    np.testing.assert_allclose(lam + 1, [a, b], rtol=1e-9)      # Newton converges quadratically: 1e-9 is loose


def test_newton_dual_refuses_an_expectation_outside_the_space():
    A, grad, hess, ok = _beta()
    with pytest.raises(ArithmeticError, match="did not converge|expectation-parameter space"):
        newton.newton_dual(np.array([0.5, 0.5]), np.zeros(2), A, grad, hess, ok)   # E[log θ] must be < 0


def test_generated_modules_embed_the_engine_solver():
    source = inspect.getsource(newton.newton_dual).replace("def newton_dual(", "def _newton_dual(", 1)
    users = [p for p in sorted((GENERATED / "numpy").glob("*.py")) if "def ordinary_from_expectation" in p.read_text()]
    assert {p.stem for p in users} >= {"beta_bernoulli", "gamma_poisson", "dirichlet_categorical_unrolled"}
    for p in users:
        assert source in p.read_text(encoding="utf-8"), p.name
    mod = load_generated("beta_bernoulli")
    a, b = 3.5, 0.4
    mu = [special.digamma(a) - special.digamma(a + b), special.digamma(b) - special.digamma(a + b)]
    out = mod.ordinary_from_expectation(mu)
    assert abs(out["a"] - a) < 1e-9 and abs(out["b"] - b) < 1e-9

"""A gamma candidate under a loss with an exponential, E_q[e^{−θ}] = (β/(β + 1))^α from the tilted log-partition
(App. B; rule exact), at a concentrated posterior: α = 500, β = 300 (mean 1.67, sd 0.07, what 500 observations
give).  The step printed β^α·(β + 1)^{−α−1}·… whose powers overflow separately (inf/inf: NaN, refused as 'the new
alpha is not a number'), and simplify had folded c·(β/(β + 1))^α·log(β/(β + 1)) into log((β/(β + 1))^{c(β/(β + 1))^α});
the tilt factor is now kept as e^{α log β − α log(β + 1)}.

Reference (mpmath, 50 digits): Eq. 6 in natural parameters, λ = (α − 1, −β), T = (log θ, θ), h = 1:
λ ← (1 − ρ)λ − ρF(λ)⁻¹∇_λE_q[ℓ], E_q[ℓ] = c(β/(β + 1))^α + 2α/β − 3(ψ(α) − log β) in closed form,
F = Cov_q[T] = [[ψ'(α), 1/β], [1/β, α/β²]]."""
import textwrap
from functools import lru_cache

import mpmath as mp
import numpy as np
import pytest

from blr_derive import api

RECIPE = """\
name: gamma_exp_tilt
family: gamma
loss:
  expression: c*exp(-theta) + 2*theta - 3*log(theta)
approximations: [exact]
hyperparameters:
  rho: 0.5
  c: 5.0
state_init: {alpha: 2.0, beta: 1.0}
"""


@lru_cache(maxsize=None)
def module():
    return api.derive(textwrap.dedent(RECIPE)).compile("numpy")


def expected_loss(a, b, c=5):
    return c * (b / (b + 1)) ** a + 2 * a / b - 3 * (mp.digamma(a) - mp.log(b))


def reference(a, b, rho=0.5):
    with mp.workdps(50):
        a, b = mp.mpf(a), mp.mpf(b)
        grad = mp.matrix([mp.diff(lambda x: expected_loss(x, b), a), -mp.diff(lambda x: expected_loss(a, x), b)])
        F = mp.matrix([[mp.psi(1, a), 1 / b], [1 / b, a / b ** 2]])
        ng = mp.lu_solve(F, grad)
        return float((1 - rho) * (a - 1) - rho * ng[0] + 1), float((1 - rho) * b + rho * ng[1])


@pytest.mark.parametrize("a, b, tol", [(2.0, 1.0, 1e-14), (0.5, 3.0, 1e-14), (50.0, 40.0, 1e-12),
                                       (500.0, 300.0, 1e-11), (2000.0, 1500.0, 1e-11)])
def test_gamma_exact_step_with_an_exponential_is_eq6_at_a_concentrated_posterior(a, b, tol):
    out = module().step({"alpha": np.array(a), "beta": np.array(b)})
    want = reference(a, b)
    assert np.isfinite(float(out["alpha"])) and np.isfinite(float(out["beta"]))
    assert abs(float(out["alpha"]) - want[0]) / want[0] < tol
    assert abs(float(out["beta"]) - want[1]) / want[1] < tol


def test_the_tilt_factor_is_printed_as_one_exponential():
    code = api.derive(textwrap.dedent(RECIPE)).code("numpy")
    assert "exp(alpha*log(beta) - alpha*log(beta + 1))" in code              # the derived update's comment
    assert "numpy.exp(alpha*numpy.log(beta) - alpha*numpy.log1p(beta))" in code    # the objective's E_q[ℓ]
    assert "beta**alpha" not in code and "beta^alpha" not in code and "log(beta**" not in code


def test_the_objective_is_finite_at_a_concentrated_posterior():
    """E_q[ℓ] of the objective (Eq. 2) at α = 500, β = 300 against the closed form in mpmath."""
    out = module().objective({"alpha": np.array(500.0), "beta": np.array(300.0)})
    with mp.workdps(50):
        want = float(expected_loss(mp.mpf(500), mp.mpf(300)))
    assert abs(out["expected_loss"] - want) / abs(want) < 1e-12

"""``exact`` on exponentials of projections under a full Gaussian: Poisson regression
ℓ = Σ_n exp(x_nᵀθ) − yᵀXθ + α/2 θᵀθ.  Each x_nᵀθ ~ N(x_nᵀm, x_nᵀS⁻¹x_n), so E_q[∇ℓ], E_q[∇²ℓ] (Bonnet and
Price, Eqs. 10-11) are closed forms by the moment-generating function; the reference here takes them by
one-dimensional Gauss-Hermite quadrature (numpy, 80 nodes; ``gauss_hermite`` with 20 nodes, which stays quadrature,
agrees to 1e-12 on these projections) and forms the BLR step (Eq. 6, App. D)
S ← (1−ρ)S + ρE[∇²ℓ], m ← m − ρS⁻¹E[∇ℓ] itself."""
import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

NODES, WEIGHTS = np.polynomial.hermite_e.hermegauss(80)


def e_exp(eta, var):
    """E[exp(x)] for x ~ N(eta, var), by Gauss-Hermite quadrature (elementwise)."""
    x = eta[:, None] + np.sqrt(var)[:, None] * NODES[None, :]
    return np.exp(x) @ WEIGHTS / np.sqrt(2 * np.pi)


def reference_step(m, S, X, y, alpha, rho):
    C = np.linalg.inv(S)
    w = e_exp(X @ m, np.einsum("np,pq,nq->n", X, C, X))
    g = alpha * m + X.T @ w - X.T @ y
    H = alpha * np.eye(len(m)) + (X.T * w) @ X
    S_new = (1 - rho) * S + rho * H
    return S_new, m - rho * np.linalg.solve(S_new, g)


def recipe(loss, data, approx="exact"):
    approx = {"gauss_hermite": {"gauss_hermite": {"nodes": 20}}}.get(approx, approx)
    return yaml.safe_dump({"name": "poisson_regression", "family": "gaussian_full",
                           "loss": {"expression": loss, "data": data},
                           "hyperparameters": {"rho": 0.3, "alpha": 0.5}, "approximations": [approx]})


@pytest.fixture
def problem():
    rng = np.random.default_rng(3)
    P, N = 4, 30
    X = 0.4 * rng.normal(size=(N, P))
    y = rng.poisson(1.5, size=N).astype(float)
    A = rng.normal(size=(P, P))
    return rng.normal(size=P) * 0.3, A @ A.T + P * np.eye(P), X, y


@pytest.mark.parametrize("approx", ["exact", "gauss_hermite"])
def test_poisson_regression_rows_equal_the_quadrature_reference(problem, approx):
    m, S, X, y = problem
    mod = api.derive(recipe("sum(exp(X*theta)) - y.T*X*theta + 0.5*alpha*theta.T*theta",
                            {"X": {"shape": ["N", "P"]}, "y": {"shape": ["N"]}}, approx)).compile("numpy")
    out = mod.step({"m": m, "S": S}, data={"X": X, "y": y}, rho=0.3, alpha=0.5)
    S_ref, m_ref = reference_step(m, S, X, y, 0.5, 0.3)
    np.testing.assert_allclose(out["S"], S_ref, rtol=1e-12)
    np.testing.assert_allclose(out["m"], m_ref, rtol=1e-12)


def test_one_exponential_of_a_projection_without_a_data_sum(problem):
    """exp(xᵀθ) − y xᵀθ for one data vector x: the same closed form over one row."""
    m, S, X, y = problem
    mod = api.derive(recipe("exp(x.T*theta) - y*x.T*theta + 0.5*alpha*theta.T*theta",
                            {"x": {"shape": ["P"]}, "y": {}})).compile("numpy")
    out = mod.step({"m": m, "S": S}, data={"x": X[0], "y": y[0]}, rho=0.3, alpha=0.5)
    S_ref, m_ref = reference_step(m, S, X[:1], y[:1], 0.5, 0.3)
    np.testing.assert_allclose(out["S"], S_ref, rtol=1e-12)
    np.testing.assert_allclose(out["m"], m_ref, rtol=1e-12)


def test_a_rate_and_a_scale_and_the_explanation(problem):
    """3 Σ exp(2 x_nᵀθ): E[3e^{2x}] = 3e^{2η + 2σ²}, f' and f'' scale by 2 and 4; the step names the
    moment-generating function."""
    m, S, X, _ = problem
    d = api.derive(recipe("3*sum(exp(2*X*theta)) + 0.5*alpha*theta.T*theta", {"X": {"shape": ["N", "P"]}}))
    out = d.compile("numpy").step({"m": m, "S": S}, data={"X": X}, rho=0.3, alpha=0.5)
    C = np.linalg.inv(S)
    w = 3 * e_exp(2 * X @ m, 4 * np.einsum("np,pq,nq->n", X, C, X))            # E[3 exp(2 x_n)]
    g, H = 0.5 * m + X.T @ (2 * w), 0.5 * np.eye(len(m)) + (X.T * (4 * w)) @ X
    S_ref = 0.7 * S + 0.3 * H
    np.testing.assert_allclose(out["S"], S_ref, rtol=1e-12)
    np.testing.assert_allclose(out["m"], m - 0.3 * np.linalg.solve(S_ref, g), rtol=1e-12)
    assert any("moment-generating function" in s.text for s in d.steps)


def test_exact_refuses_a_data_sum_without_a_closed_form_with_a_located_line():
    """softplus (logistic regression) has no closed-form Gaussian expectation: exact says to use gauss_hermite."""
    text = recipe("sum(softplus(X*theta)) - y.T*X*theta + 0.5*alpha*theta.T*theta",
                  {"X": {"shape": ["N", "P"]}, "y": {"shape": ["N"]}})
    with pytest.raises(SpecError, match="no closed form .*use 'gauss_hermite'") as exc:
        api.derive(text)
    assert exc.value.line is not None


def test_a_data_sum_free_of_theta_is_a_constant(problem):
    """Σ log y_n (the Poisson likelihood's log y! stand-in) does not depend on θ: the step is Poisson
    regression's, and a loss with only such a sum keeps its polynomial derivation."""
    m, S, X, y = problem
    y = y + 1.0
    data = {"X": {"shape": ["N", "P"]}, "y": {"shape": ["N"]}}
    mod = api.derive(recipe("sum(log(y)) + sum(exp(X*theta)) - y.T*X*theta + 0.5*alpha*theta.T*theta",
                            data)).compile("numpy")
    out = mod.step({"m": m, "S": S}, data={"X": X, "y": y}, rho=0.3, alpha=0.5)
    S_ref, m_ref = reference_step(m, S, X, y, 0.5, 0.3)
    np.testing.assert_allclose(out["S"], S_ref, rtol=1e-12)
    np.testing.assert_allclose(out["m"], m_ref, rtol=1e-12)
    ridge = api.derive(recipe("sum(log(y)) + 0.5*alpha*theta.T*theta", data)).compile("numpy")
    out = ridge.step({"m": m, "S": S}, data={"X": X, "y": y}, rho=1.0, alpha=0.5)
    np.testing.assert_allclose(out["S"], 0.5 * np.eye(len(m)), atol=1e-14)      # one step, ρ = 1: the prior
    np.testing.assert_allclose(out["m"], 0 * m, atol=1e-14)

"""``exact`` on a data sum of a polynomial of degree ≤ 2 in its argument, ``sum(X*theta)`` (f(u) = u), under a full
Gaussian.  For x_n = x_nᵀθ + b_n ~ N(η_n, σ_n²), E[f'(x)] = f'(η) and E[f''] = f'' (f' is affine), so the Bonnet
and Price expectations (Eqs. 10-11) are exact without quadrature.  Before, `exact` refused the log-variance
regression ℓ = ½Σ_n x_nᵀθ + ½Σ_n exp(b_n − x_nᵀθ) + δ/2 θᵀθ (residuals r_n with variance e^{x_nᵀθ}, b = log r²) at
the rule's line ("no closed form for f(u) = u"), though its first term is linear in θ.  The reference forms the BLR
step (Eq. 6) in the natural parameters λ = (Sm, −S/2) from E[∇ℓ], E[∇²ℓ] written here with the log-normal moment
E[e^{b − x}] = e^{b − η + σ²/2}, and L(q) = E_q[ℓ] − H(q) (Eq. 2) with H = P/2 (1 + log 2π) − ½ log det S."""
import numpy as np
import yaml

from blr_derive import api
from blr_derive.verify.recipe import check_recipe_updates

RECIPE = yaml.safe_dump({
    "name": "log_variance_regression", "family": "gaussian_full",
    "loss": {"expression": "0.5*sum(X*theta) + 0.5*sum(exp(b - X*theta)) + 0.5*delta*theta.T*theta",
             "data": {"X": {"shape": ["N", "P"]}, "b": {"shape": ["N"]}}},
    "approximations": ["exact"], "hyperparameters": {"rho": 0.4, "delta": 1.0}})


def reference(m, S, X, b, delta, rho):
    C = np.linalg.inv(S)
    w = np.exp(b - X @ m + np.einsum("np,pq,nq->n", X, C, X) / 2)
    Eg = delta * m + 0.5 * X.sum(0) - 0.5 * X.T @ w
    EH = delta * np.eye(len(m)) + 0.5 * (X.T * w) @ X
    lam1 = (1 - rho) * S @ m - rho * (Eg - EH @ m)
    lam2 = (1 - rho) * (-S / 2) - rho * EH / 2
    S_new = -2 * lam2
    return np.linalg.solve(S_new, lam1), S_new


def objective(m, S, X, b, delta):
    C = np.linalg.inv(S)
    eta, var = X @ m, np.einsum("np,pq,nq->n", X, C, X)
    expected = 0.5 * eta.sum() + 0.5 * np.exp(b - eta + var / 2).sum() + 0.5 * delta * (m @ m + np.trace(C))
    return expected - (len(m) / 2 * (1 + np.log(2 * np.pi)) - 0.5 * np.linalg.slogdet(S)[1])


def test_log_variance_regression_steps_are_eq6_and_its_objective_is_exact():
    rng = np.random.default_rng(4)
    N, P = 40, 3
    X = 0.4 * rng.standard_normal((N, P))
    b = np.log((rng.standard_normal(N) * np.exp(0.5 * X @ np.array([1.0, -0.5, 0.3]))) ** 2)
    mod = api.derive(RECIPE).compile("numpy")
    state, m, S = mod.init(m=np.zeros(P), S=np.eye(P)), np.zeros(P), np.eye(P)
    for _ in range(10):
        m, S = reference(m, S, X, b, 1.0, 0.4)
        state = mod.step(state, data={"X": X, "b": b})
        np.testing.assert_allclose(state["m"], m, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(state["S"], S, rtol=1e-12)
        np.testing.assert_allclose(mod.objective(state, data={"X": X, "b": b})["objective"],
                                   objective(m, S, X, b, 1.0), rtol=1e-12)
    assert abs(m[0]) > 0.5                     # moved towards the log-variance slope


def test_check_passes_for_a_linear_data_sum_under_exact():
    checks = {c.name: c for c in check_recipe_updates(api.recipe(RECIPE))}
    assert checks["generated update vs symbolic update"].value < 1e-12
    assert checks["natural gradient vs finite differences"].value < 1e-6
    assert all(c.passed for c in checks.values() if c.kind != "na"), {n: c.value for n, c in checks.items()}

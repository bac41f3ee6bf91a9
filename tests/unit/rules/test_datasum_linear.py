"""Gauss-Hermite expectations of data sums whose derivative is constant (a linear term sum(X*theta)).

E_q[f'] of a linear f is a constant per row; the generated numpy helpers must broadcast it over the
quadrature nodes.  The generated step is checked against the closed-form lognormal moments of the
exp term (E[e^x] = e^(η + σ²/2) for x ~ N(η, σ²)), written here independently of the engine."""
import numpy as np

from blr_derive import api as blr

RECIPE = """
name: linear_and_exp_sums
family: gaussian_full
loss:
  expression: sum(exp(X*theta)) + sum(X*theta) + 0.5*theta.T*theta
  data:
    X: {shape: [N, P]}
hyperparameters:
  rho: {default: 0.5}
  nodes: {default: 40, type: int}
approximations:
  - gauss_hermite: {nodes: nodes}
"""


def test_linear_data_sum_under_gauss_hermite_equals_closed_form_moments():
    mod = blr.derive(RECIPE).compile("numpy")
    rng = np.random.default_rng(5)
    X = 0.4 * rng.normal(size=(7, 3))
    m = rng.normal(size=3)
    A = rng.normal(size=(3, 3))
    S = A @ A.T + 2 * np.eye(3)
    rho = 0.5
    out = mod.step(mod.init(m=m, S=S), data={"X": X}, rho=rho)
    C = np.linalg.inv(S)
    eta, var = X @ m, np.einsum("ij,jk,ik->i", X, C, X)
    e = np.exp(eta + var / 2)                         # E[exp(x_n)], x_n = a_nᵀθ ~ N(η_n, σ_n²)
    g = X.T @ e + X.T @ np.ones(len(X)) + m           # E_q[∇ℓ] (Bonnet)
    H = X.T @ (e[:, None] * X) + np.eye(3)            # E_q[∇²ℓ] (Price)
    S_new = (1 - rho) * S + rho * H
    m_new = m - rho * np.linalg.solve(S_new, g)
    np.testing.assert_allclose(out["S"], S_new, rtol=1e-12)
    np.testing.assert_allclose(out["m"], m_new, rtol=1e-12)


def test_linear_data_sum_under_the_delta_method_equals_derivatives_at_the_mean():
    mod = blr.derive(RECIPE.replace("  - gauss_hermite: {nodes: nodes}", "  - delta")).compile("numpy")
    rng = np.random.default_rng(6)
    X = 0.4 * rng.normal(size=(7, 3))
    m = rng.normal(size=3)
    S = 3 * np.eye(3)
    out = mod.step(mod.init(m=m, S=S), data={"X": X}, rho=1.0)
    e = np.exp(X @ m)
    g = X.T @ e + X.sum(axis=0) + m                   # ∇ℓ(m)
    H = X.T @ (e[:, None] * X) + np.eye(3)            # ∇²ℓ(m): the linear sum adds nothing
    np.testing.assert_allclose(out["S"], H, rtol=1e-12)
    np.testing.assert_allclose(out["m"], m - np.linalg.solve(H, g), rtol=1e-12)   # Newton's step (rho = 1)

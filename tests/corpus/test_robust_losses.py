"""User-written robust and count regressions over the full Gaussian with the delta method, from the docs alone
(docs/recipe-format.md: data sums ``sum(f(X*theta))``), compared with Newton's method written here from Eq. 8/12 of
Khan & Rue (2023): S ← (1 − ρ)S + ρ∇²ℓ(m), m ← m − ρS⁻¹∇ℓ(m), with the derivatives differentiated by hand.

* Cauchy (Student-t with ν = 1) regression ℓ(θ) = Σ_n log(1 + (y_n − x_nᵀθ)²) + δ‖θ‖²/2: the step equals the hand
  Newton step, and where the Hessian is indefinite the step refuses the precision (the loss is not convex) instead of
  returning it; the generated docstring states the loss with its parentheses (it printed sum(log(-X*m + y**2 + 1))).
* Poisson regression with large counts: the step equals the hand Newton step at margins up to about 100.
"""
import sys
import textwrap
from functools import lru_cache

import numpy as np
import pytest
import sympy as sp

from blr_derive import api
from blr_derive.core.nodes import DataSum, Elementwise, RowFunction

CAUCHY = """\
name: cauchy_newton
family: gaussian_full
loss:
  expression: sum(log(1 + (y - X*theta)**2)) + 0.5*delta*theta.T*theta
  data:
    X: {shape: [N, P], description: inputs}
    y: {shape: [N], description: targets}
approximations: [delta]
hyperparameters:
  rho: 1.0
  delta: 1.0
"""

POISSON = """\
name: poisson_newton
family: gaussian_full
loss:
  expression: sum(exp(X*theta)) - y.T*X*theta + 0.5*delta*theta.T*theta
  data:
    X: {shape: [N, P], description: inputs}
    y: {shape: [N], description: counts}
approximations: [delta]
hyperparameters:
  rho: 1.0
  delta: 1.0
"""


@lru_cache(maxsize=None)
def module(text):
    return api.derive(textwrap.dedent(text)).compile("numpy")


def rel(a, b):
    return float(np.max(np.abs(np.asarray(a) - b) / np.maximum(1.0, np.abs(b))))


def cauchy_newton(X, y, m, S, rho, delta):
    r = y - X @ m
    g = delta * m - X.T @ (2 * r / (1 + r ** 2))
    H = delta * np.eye(len(m)) + X.T @ ((2 * (1 - r ** 2) / (1 + r ** 2) ** 2)[:, None] * X)
    S_new = (1 - rho) * S + rho * H
    return m - rho * np.linalg.solve(S_new, g), S_new


@pytest.mark.parametrize("scale, rho", [(0.1, 1.0), (1.0, 1.0), (1.0, 0.1), (1e3, 0.1), (1e8, 1.0)])
def test_cauchy_regression_step_is_newtons(scale, rho):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    y = scale * rng.normal(size=50)
    m0, S0 = np.array([0.3, -0.2, 0.1]), 10 * np.eye(3)
    out = module(CAUCHY).step({"m": m0, "S": S0}, data={"X": X, "y": y}, rho=rho)
    m_ref, S_ref = cauchy_newton(X, y, m0, S0, rho, 1.0)
    assert rel(out["S"], S_ref) < 1e-13
    assert rel(out["m"], m_ref) < 1e-13


def test_cauchy_regression_refuses_an_indefinite_precision():
    """Residuals of √3 make every Hessian weight 2(1 − r²)/(1 + r²)² = −1/4: with ρ = 1 the hand Newton precision
    I − XᵀX/4 has a negative eigenvalue, and the step refuses it."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    m0, S0 = np.array([0.3, -0.2, 0.1]), 10 * np.eye(3)
    y = X @ m0 + np.sqrt(3.0)
    _, S_ref = cauchy_newton(X, y, m0, S0, 1.0, 1.0)
    assert np.linalg.eigvalsh(S_ref).min() < -0.1
    with pytest.raises(FloatingPointError, match="not positive definite") as info:
        module(CAUCHY).step({"m": m0, "S": S0}, data={"X": X, "y": y}, rho=1.0)
    assert "within rounding" not in str(info.value) and "convexity" in str(info.value)


@pytest.mark.parametrize("target", ["numpy", "jax"])
def test_a_hessian_singular_to_working_precision_is_named_so_not_indefinite(target, x64):
    """Poisson regression from margins up to about 540: δI + Xᵀdiag(e^{Xm})X is positive definite (eigenvalues ≥ δ = 1)
    but its eigenvalues span 1e252 down to 1, beyond float64: Cholesky fails and the computed smallest eigenvalue is
    −6.8e235.  The refusal says that this is rounding of a singular-to-working-precision matrix (it blamed the loss's
    convexity alone)."""
    rng = np.random.default_rng(1)
    X = rng.normal(size=(50, 3))
    m0 = np.full(3, 300 / np.sqrt(3))
    mod = api.derive(textwrap.dedent(POISSON)).compile(target)
    with pytest.raises(FloatingPointError) as info:
        mod.step({"m": m0, "S": np.eye(3)}, data={"X": X, "y": np.full(50, 1e6)})
    text = str(info.value)
    assert "smallest eigenvalue -6.78807e+235, within rounding of the largest, 7.69634e+252" in text
    assert "singular to working precision, not shown indefinite" in text


def test_the_docstring_states_the_cauchy_loss_with_its_parentheses():
    source = api.derive(CAUCHY).code("numpy")
    assert "sum(log((-X*m + y)**2 + 1))" in source
    assert "y**2 + 1" not in source


def test_a_row_function_of_a_compound_vector_prints_its_argument_in_parentheses():
    u = sp.Symbol("u")
    X, y = sp.MatrixSymbol("X", 4, 2), sp.MatrixSymbol("y", 4, 1)
    th = sp.MatrixSymbol("theta", 2, 1)
    v = y - X * th
    assert sp.sstr(DataSum(RowFunction(u, u ** 2 + 1), v)) == "sum((-X*theta + y)**2 + 1)"
    assert sp.sstr(DataSum(RowFunction(u, sp.log(u)), X * th)) == "sum(log(X*theta))"
    assert sp.sstr(Elementwise(RowFunction(u, 2 * u), v)) == "2*(-X*theta + y)"
    # LaTeX: the argument's own LaTeX verbatim (it was turned into a name: \mathrm{(mathbfX boldsymboltheta)_n})
    tex = sp.latex(DataSum(RowFunction(u, sp.log(u ** 2 + 1)), v))
    assert r"(- X \theta + y)_n" in tex and "mathrm" not in tex
    assert sp.latex(Elementwise(RowFunction(u, u ** 2), v)) == r"{\left(- X \theta + y\right)}^{2}"


@pytest.mark.parametrize("scale", [0.1, 3.0, 30.0])
def test_poisson_regression_with_large_counts_is_newtons(scale):
    rng = np.random.default_rng(0)
    X = rng.normal(size=(50, 3))
    m0 = np.full(3, scale / np.sqrt(3))
    y = rng.poisson(np.exp(np.clip(X @ m0, -30, 30))).astype(float) if scale < 30 else np.full(50, 1e6)
    out = module(POISSON).step({"m": m0, "S": np.eye(3)}, data={"X": X, "y": y})
    mu = np.exp(X @ m0)
    g = m0 + X.T @ (mu - y)
    H = np.eye(3) + X.T @ (mu[:, None] * X)
    assert rel(out["S"], H) < 1e-13
    assert rel(out["m"], m0 - np.linalg.solve(H, g)) < 1e-12


TANH = """\
name: tanh_units
family: gaussian_full
loss:
  expression: 0.5*delta*theta.T*theta - sum(tanh(X*theta))
  data:
    X: {shape: [N, P], description: inputs}
approximations: [delta]
hyperparameters:
  rho: 0.5
  delta: 1.0
"""


@pytest.mark.parametrize("scale", [0.1, 1.0, 30.0, 1000.0])
def test_a_sum_of_tanh_units_steps_like_online_newton(scale):
    """ℓ(θ) = δ‖θ‖²/2 − Σ_n tanh(x_nᵀθ): ∇ℓ = δθ − Xᵀ(1 − tanh²η), ∇²ℓ = δI + Xᵀdiag(2 tanh η (1 − tanh²η))X
    (Eqs. 12-13 with ρ = 1/2), up to margins of 2000."""
    rng = np.random.default_rng(0)
    X = rng.normal(size=(40, 3))
    m0, S0 = scale * np.array([1.0, -0.5, 0.3]), 10 * np.eye(3)
    out = module(TANH).step({"m": m0, "S": S0}, data={"X": X})
    t = np.tanh(X @ m0)
    g = m0 - X.T @ (1 - t ** 2)
    S_ref = 0.5 * S0 + 0.5 * (np.eye(3) + X.T @ ((2 * t * (1 - t ** 2))[:, None] * X))
    assert rel(out["S"], S_ref) < 1e-14
    assert rel(out["m"], m0 - 0.5 * np.linalg.solve(S_ref, g)) < 1e-14


def test_the_derived_update_prints_an_elementwise_sum_in_parentheses():
    """The header's derived update read g = delta*m - X.T*1 - tanh(eta)^2 for Xᵀ(1 − tanh²η)."""
    code = api.derive(TANH).code("numpy")
    assert "#   g = delta*m - X.T*(1 - tanh(eta)^2)" in code
    u = sp.Symbol("u")
    X, th = sp.MatrixSymbol("X", 4, 2), sp.MatrixSymbol("theta", 2, 1)
    assert sp.sstr(X.T * Elementwise(RowFunction(u, 1 - sp.tanh(u) ** 2), X * th)) == "X.T*(1 - tanh(X*theta)**2)"
    assert sp.sstr(X.T * Elementwise(RowFunction(u, sp.exp(u)), X * th)) == "X.T*exp(X*theta)"

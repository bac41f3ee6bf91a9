"""Rule ``blr`` (Eq. 6): λ ← (1−ρ)λ − ρ∇_μ E_q[ℓ + log h], i.e. natural-gradient descent on the variational
objective L(λ) = E_q[ℓ] − H(q) (Eqs. 2-4): λ ← λ − ρ F(λ)⁻¹∇_λ L(λ), F = ∇²A (Eq. 4; App. B, Eq. 64 for the entropy).

The generated steps are checked against that second form, computed here without the engine and without Eq. 6:

* ∇_λ L by central finite differences of L(λ) in the natural parameters, with E_q[ℓ] by numerical integration
  (scipy ``quad`` for a Gamma candidate, 60 x 60 Gauss-Hermite for a 2-D full Gaussian) and H(q) from scipy / the
  Gaussian log-determinant;
* the Fisher information F(λ) = ∇²A(λ) by second differences of A(λ), written here in closed form (log-gamma,
  log-determinant);
* the update λ − ρF⁻¹∇_λL mapped back to ordinary parameters, against the generated step.

It also checks the fixed point of Eq. 5: the exact posterior λ* = ∇_μ E_q[−ℓ] is left unchanged for any ρ.
"""
import functools

import numpy as np
from scipy import integrate, special, stats

from blr_derive import api

GAMMA = """
name: blr_gamma
family: gamma
loss: {expression: 'a*theta - b*log(theta)'}
approximations: [exact]
hyperparameters: {rho: 0.1, a: 1.0, b: 2.0}
"""

NCVI = """
name: blr_ncvi
family: gaussian_full
loss:
  expression: sum(softplus(X*theta)) - y.T*X*theta + 0.5*alpha*theta.T*theta
  data: {X: {shape: [N, P]}, y: {shape: [N]}}
hyperparameters: {rho: 0.5, alpha: 1.0, nodes: {default: 64, type: int}}
approximations:
  - gauss_hermite: {nodes: nodes}
"""


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def fd_grad(F, x, h):
    return np.array([(F(x + h * e) - F(x - h * e)) / (2 * h) for e in np.eye(len(x))])


def fd_hessian(F, x, h):
    n = len(x)
    E = np.eye(n) * h
    H = np.zeros((n, n))
    for i in range(n):
        for j in range(n):
            H[i, j] = (F(x + E[i] + E[j]) - F(x + E[i] - E[j]) - F(x - E[i] + E[j]) + F(x - E[i] - E[j])) / (4 * h * h)
    return H


# ------------------------------------------------------------------------------------------ Gamma

def gamma_ordinary(lam):
    return lam[0] + 1, -lam[1]                       # λ = (α − 1, −β), T = (log θ, θ), h = 1


def gamma_A(lam):
    alpha, beta = gamma_ordinary(lam)
    return special.gammaln(alpha) - alpha * np.log(beta)


def gamma_objective(lam, a, b):
    """E_q[aθ − b log θ] − H(q) with E_q by adaptive quadrature of the density and H from scipy.stats."""
    alpha, beta = gamma_ordinary(lam)
    q = stats.gamma(alpha, scale=1 / beta)
    e_loss = integrate.quad(lambda t: (a * t - b * np.log(t)) * q.pdf(t), 0, np.inf, epsabs=1e-14, epsrel=1e-13)[0]
    return e_loss - q.entropy()


def test_gamma_step_is_the_fisher_preconditioned_gradient_of_the_objective():
    mod = compiled(GAMMA)
    alpha0, beta0, a, b, rho = 2.5, 1.7, 1.3, 0.6, 0.35
    lam = np.array([alpha0 - 1, -beta0])
    grad = fd_grad(lambda l: gamma_objective(l, a, b), lam, 1e-5)
    F = fd_hessian(gamma_A, lam, 1e-4)
    lam_ref = lam - rho * np.linalg.solve(F, grad)
    out = mod.step(mod.init(alpha=alpha0, beta=beta0), rho=rho, a=a, b=b)
    got = np.array([out["alpha"] - 1, -out["beta"]])
    # quad is accurate to ~1e-13; FD gradient ~1e-9, FD Fisher (second differences, h = 1e-4) ~1e-7 relative: 1e-5
    # is a wide margin against an O(ρ) error (a missing entropy term changes λ by ρλ ≈ 0.5)
    np.testing.assert_allclose(got, lam_ref, rtol=1e-5, atol=1e-6)
    assert np.abs(lam_ref - lam).max() > 0.1


def test_gamma_posterior_is_a_fixed_point_for_any_rho():
    """Eq. 5: λ* = ∇_μ E_q[−ℓ] = (b, −a) for ℓ = aθ − b log θ; the step must not move it (to rounding)."""
    mod = compiled(GAMMA)
    a, b = 1.3, 0.6
    for rho in (0.1, 0.5, 0.9):
        out = mod.step(mod.init(alpha=b + 1, beta=a), rho=rho, a=a, b=b)
        np.testing.assert_allclose([out["alpha"], out["beta"]], [b + 1, a], rtol=1e-14)
    out = mod.step(mod.init(alpha=4.0, beta=0.3), rho=1.0, a=a, b=b)      # ρ = 1 jumps there in one step
    np.testing.assert_allclose([out["alpha"], out["beta"]], [b + 1, a], rtol=1e-14)


# ------------------------------------------------------------------------------------------ full Gaussian

GH_X, GH_W = np.polynomial.hermite_e.hermegauss(60)
GH_W = GH_W / GH_W.sum()
ZZ = np.stack(np.meshgrid(GH_X, GH_X, indexing="ij"), -1).reshape(-1, 2)
WW = np.outer(GH_W, GH_W).ravel()


def xi_to_lambda(xi):
    """Coordinates of λ = (λ₁, λ₂) with λ₂ symmetric: ξ = (λ₁[0], λ₁[1], λ₂[0,0], λ₂[0,1] = λ₂[1,0], λ₂[1,1]).
    Then ⟨λ, T(θ)⟩ = ξ₀θ₀ + ξ₁θ₁ + ξ₂θ₀² + 2ξ₃θ₀θ₁ + ξ₄θ₁², and ξ − ρF_ξ⁻¹∇_ξL is the same update as the matrix
    form (the μ-coordinate of ξ₃ is 2μ₂[0,1], whose gradient is the symmetric gradient)."""
    return xi[:2], np.array([[xi[2], xi[3]], [xi[3], xi[4]]])


def gauss_moments(xi):
    l1, l2 = xi_to_lambda(xi)
    S = -2 * l2
    C = np.linalg.inv(S)
    return C @ l1, C


def gauss_A(xi):
    l1, l2 = xi_to_lambda(xi)
    return -0.25 * l1 @ np.linalg.solve(l2, l1) - 0.5 * np.linalg.slogdet(-2 * l2)[1]


def test_full_gaussian_step_is_the_fisher_preconditioned_gradient_of_the_objective():
    mod = compiled(NCVI)
    rng = np.random.default_rng(2)
    N, alpha, rho = 6, 0.8, 0.4
    X = rng.normal(size=(N, 2))
    y = (rng.random(N) < 0.5).astype(float)
    m0 = np.array([0.2, -0.4])
    S0 = np.array([[2.0, 0.5], [0.5, 1.5]])

    def loss(T):
        Z = T @ X.T
        return np.logaddexp(0, Z).sum(-1) - Z @ y + 0.5 * alpha * np.einsum("...i,...i->...", T, T)

    def objective(xi):
        m, C = gauss_moments(xi)
        e_loss = WW @ loss(m + ZZ @ np.linalg.cholesky(C).T)
        entropy = 0.5 * np.linalg.slogdet(2 * np.pi * np.e * C)[1]
        return e_loss - entropy

    l1, l2 = S0 @ m0, -S0 / 2
    xi = np.array([l1[0], l1[1], l2[0, 0], l2[0, 1], l2[1, 1]])
    grad = fd_grad(objective, xi, 1e-5)
    F = fd_hessian(gauss_A, xi, 1e-4)
    xi_ref = xi - rho * np.linalg.solve(F, grad)
    out = mod.step(mod.init(m=m0, S=S0), data={"X": X, "y": y}, alpha=alpha, rho=rho, nodes=64)
    got1, got2 = out["S"] @ out["m"], -out["S"] / 2
    got = np.array([got1[0], got1[1], got2[0, 0], got2[0, 1], got2[1, 1]])
    np.testing.assert_allclose(out["S"], out["S"].T, rtol=0, atol=1e-14)
    # GH quadrature converged to ~1e-14; FD gradient error ~1e-9, FD Fisher ~1e-7 relative, F⁻¹ amplifies by its
    # condition number (~10): 1e-5 is a wide margin against an O(ρ) structural error
    np.testing.assert_allclose(got, xi_ref, rtol=1e-5, atol=1e-6)
    assert np.abs(xi_ref - xi).max() > 0.1

"""Symbolic natural gradients ∇_μ E_q[ℓ] (Eq. 4) against finite differences of
quadrature estimates of E_q[ℓ] as a function of μ."""
import numpy as np
import pytest

from blr_derive.derive.driver import derive
from blr_derive.families.symbolic import evaluate
from blr_derive.candidates.load import recipe_from_spec
from blr_derive.core.yamlio import load_yaml_text

GH_X, GH_W = np.polynomial.hermite_e.hermegauss(80)   # probabilists' Gauss–Hermite
GH_W = GH_W / GH_W.sum()


def derivation(text):
    return derive(recipe_from_spec(load_yaml_text(text, "inline.yaml")))


# ---- scalar family: ℓ(θ) = softplus(θ) + sin(2θ) + 0.1 θ⁴
def loss1(t):
    return np.logaddexp(0, t) + np.sin(2 * t) + 0.1 * t ** 4


def dloss1(t):
    return 1 / (1 + np.exp(-t)) + 2 * np.cos(2 * t) + 0.4 * t ** 3


def d2loss1(t):
    s = 1 / (1 + np.exp(-t))
    return s * (1 - s) - 4 * np.sin(2 * t) + 1.2 * t ** 2


def expect1(f, m, c):
    return np.sum(GH_W * f(m + np.sqrt(c) * GH_X))


def test_diag_natural_gradient_bonnet_price_matches_finite_differences():
    D = derivation("name: t\nfamily: gaussian_diag\nloss: abstract\napproximations: [delta]\n")
    grads, Eg, EH = D.natural_gradient.grads, D.natural_gradient.Eg, D.natural_gradient.EH
    fam = D.recipe.family
    mu1, mu2 = fam.mu
    m, c = 0.4, 0.3
    u1, u2 = m, m * m + c
    env = {mu1: u1, mu2: u2, Eg: expect1(dloss1, m, c), EH: expect1(d2loss1, m, c)}
    sym = [evaluate(g, env) for g in grads]

    def F(a, b):
        return expect1(loss1, a, b - a * a)
    h = 1e-5
    fd1 = (F(u1 + h, u2) - F(u1 - h, u2)) / (2 * h)
    fd2 = (F(u1, u2 + h) - F(u1, u2 - h)) / (2 * h)
    np.testing.assert_allclose(sym, [fd1, fd2], rtol=1e-7, atol=1e-8)


# ---- full Gaussian, P = 2
A_VEC = np.array([0.7, -1.2])
B_MAT = np.array([[1.5, 0.3], [0.3, 0.8]])


def loss2(T):          # T: (..., 2)
    return np.logaddexp(0, T @ A_VEC) + 0.5 * np.einsum("...i,ij,...j->...", T, B_MAT, T) + np.sin(T[..., 0])


def grad2(T):
    s = 1 / (1 + np.exp(-(T @ A_VEC)))
    g = s[..., None] * A_VEC + T @ B_MAT
    g[..., 0] += np.cos(T[..., 0])
    return g


def hess2(T):
    s = 1 / (1 + np.exp(-(T @ A_VEC)))
    H = (s * (1 - s))[..., None, None] * np.outer(A_VEC, A_VEC) + B_MAT
    H[..., 0, 0] -= np.sin(T[..., 0])
    return H


def expect2(f, m, C):
    L = np.linalg.cholesky(C)
    Z = np.stack(np.meshgrid(GH_X[::2], GH_X[::2], indexing="ij"), -1).reshape(-1, 2)
    W = np.outer(GH_W[::2], GH_W[::2]).ravel()
    W = W / W.sum()
    vals = f(m + Z @ L.T)
    return np.tensordot(W, vals, axes=1)


def test_full_natural_gradient_matches_finite_differences():
    D = derivation("name: t\nfamily: gaussian_full\nloss: abstract\napproximations: [delta]\n")
    grads, Eg, EH = D.natural_gradient.grads, D.natural_gradient.Eg, D.natural_gradient.EH
    fam = D.recipe.family
    mu1, mu2 = fam.mu
    m = np.array([0.3, -0.5])
    C = np.array([[0.5, 0.1], [0.1, 0.3]])
    U1, U2 = m, C + np.outer(m, m)
    env = {mu1: U1, mu2: U2, Eg: expect2(grad2, m, C), EH: expect2(hess2, m, C)}
    g1 = evaluate(grads[0], env, {fam.dim: 2}).ravel()
    g2 = evaluate(grads[1], env, {fam.dim: 2})

    def F(u1, u2):
        return expect2(loss2, u1, u2 - np.outer(u1, u1))
    h = 1e-5
    fd1 = np.array([(F(U1 + h * e, U2) - F(U1 - h * e, U2)) / (2 * h) for e in np.eye(2)])
    np.testing.assert_allclose(g1, fd1, rtol=1e-6, atol=1e-7)
    for i in range(2):
        for j in range(2):
            E = np.zeros((2, 2))
            E[i, j] = E[j, i] = 1.0
            fd = (F(U1, U2 + h * E) - F(U1, U2 - h * E)) / (2 * h)
            # a symmetric perturbation measures G_ij + G_ji (or G_ii on the diagonal)
            expect = g2[i, i] if i == j else g2[i, j] + g2[j, i]
            np.testing.assert_allclose(expect, fd, rtol=1e-6, atol=1e-7)


# ---- exact expectations (explicit losses)
def test_exact_scalar_polynomial_expectation_and_gradient():
    D = derivation(
        "name: t\nfamily: gaussian_diag\nloss: {expression: 'theta**4 - 2*theta**3 + theta - 3'}\n"
        "approximations: [exact]\n")
    fam = D.recipe.family
    mu1, mu2 = fam.mu
    E = D.expected_loss
    grads = D.natural_gradient.grads
    f = lambda t: t ** 4 - 2 * t ** 3 + t - 3
    for m, c in [(0.3, 0.5), (-1.2, 2.0)]:
        u1, u2 = m, m * m + c
        np.testing.assert_allclose(evaluate(E, {mu1: u1, mu2: u2}), expect1(f, m, c), rtol=1e-12)
        F = lambda a, b: expect1(f, a, b - a * a)
        h = 1e-5
        fd = [(F(u1 + h, u2) - F(u1 - h, u2)) / (2 * h), (F(u1, u2 + h) - F(u1, u2 - h)) / (2 * h)]
        np.testing.assert_allclose([evaluate(g, {mu1: u1, mu2: u2}) for g in grads], fd, rtol=1e-7)


def test_exact_ridge_expected_loss_against_monte_carlo_and_fd():
    D = derivation(
        "name: t\nfamily: gaussian_full\n"
        "loss:\n  expression: 0.5*(y - X*theta).T*(y - X*theta) + 0.5*delta*theta.T*theta\n"
        "  data: {X: {shape: [N, P]}, y: {shape: [N]}}\n"
        "hyperparameters: {delta: 1.0}\napproximations: [exact]\n")
    r = D.recipe
    fam = r.family
    mu1, mu2 = fam.mu
    rng = np.random.default_rng(0)
    N, P = 9, 3
    X, y, delta = rng.normal(size=(N, P)), rng.normal(size=N), 0.6
    m = rng.normal(size=P)
    B = rng.normal(size=(P, P))
    C = B @ B.T / P + 0.2 * np.eye(P)
    syms = {d.name: d.symbol for d in r.data}
    dims = {fam.dim: P, r.data[0].shape[0]: N}
    env = {syms["X"]: X, syms["y"]: y, r.hyper_symbol("delta"): delta}

    def exact(u1, u2):
        Cu = u2 - np.outer(u1, u1)
        res = y - X @ u1
        return 0.5 * res @ res + 0.5 * np.trace(X.T @ X @ Cu) + 0.5 * delta * (u1 @ u1 + np.trace(Cu))

    U1, U2 = m, C + np.outer(m, m)
    E = evaluate(D.expected_loss, {**env, mu1: U1, mu2: U2}, dims)
    np.testing.assert_allclose(E, exact(U1, U2), rtol=1e-12)
    th = rng.multivariate_normal(m, C, size=400_000)
    vals = 0.5 * np.sum((y - th @ X.T) ** 2, axis=1) + 0.5 * delta * np.sum(th ** 2, axis=1)
    assert abs(vals.mean() - E) < 5 * vals.std() / np.sqrt(len(vals))
    grads = D.natural_gradient.grads
    g1 = evaluate(grads[0], {**env, mu1: U1, mu2: U2}, dims).ravel()
    g2 = evaluate(grads[1], {**env, mu1: U1, mu2: U2}, dims)
    # Eq. 14: the coefficients -X^T y and (X^T X + delta I)/2
    np.testing.assert_allclose(g1, -X.T @ y, rtol=1e-12, atol=1e-12)
    np.testing.assert_allclose(g2, 0.5 * (X.T @ X + delta * np.eye(P)), rtol=1e-12)
    h = 1e-6
    fd = np.array([(exact(U1 + h * e, U2) - exact(U1 - h * e, U2)) / (2 * h) for e in np.eye(P)])
    np.testing.assert_allclose(g1, fd, rtol=1e-6, atol=1e-6)

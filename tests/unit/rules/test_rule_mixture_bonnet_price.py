"""Identity ``mixture_bonnet_price`` (App. E; Lin et al. 2019a, Thms 6-7): for the mixture
q = Σ_j π_j q_j, only the k-th term of E_q[f] = Σ_j π_j E_{q_j}[f] depends on (m_k, C_k), so
∇_{m_k} E_q[f] = π_k E_{q_k}[∇f] (Bonnet) and ∇_{C_k} E_q[f] = ½ π_k E_{q_k}[∇²f] (Price).

The step the engine records (``derive(...).step("mixture_bonnet_price")``) is evaluated numerically with
E_{q_k}[∇f], E_{q_k}[∇²f] by Gauss-Hermite quadrature for non-polynomial test functions f, and compared with
central differences of the mixture expectation E_q[f] (itself by Gauss-Hermite, component by component) in
m_k and along symmetric directions of C_k; then the natural gradient the step ends with (chain rule and
Bonnet/Price together, Eqs. 67-68) against central differences of E_q[f₁] + E_q[f₂] in μ_k = π_k E_{q_k}[T(θ)].
Two-dimensional full-covariance components and scalar (mean-field) ones.
"""
import functools

import numpy as np
import sympy as sp

from blr_derive import api
from blr_derive.families.symbolic import evaluate

PI = 0.3                                          # weight of component k; the other one has 0.7


@functools.lru_cache(maxsize=None)
def step_of(base):
    d = api.derive(family={"mixture": base, "components": 2, "weights": [0.3]}, approximations=["delta"],
                   hyperparameters={"rho": 0.5}, name=f"mbp_{base}")
    st = d.step("mixture_bonnet_price")
    eqs = {}
    for lhs, rhs in st.equations:
        eqs.setdefault(str(lhs), rhs)                    # the theorems first, then the natural gradient
    final = {str(lhs): rhs for lhs, rhs in st.equations if str(lhs).startswith("grad_mu")}
    syms = {str(s): s for e in list(eqs.values()) + list(final.values()) for s in e.free_symbols}
    dims = {d_ for s in syms.values() if isinstance(s, sp.MatrixSymbol) for d_ in s.shape if d_.is_Symbol}
    return st, eqs, final, syms, dims


# ------------------------------------------------------------------------------ 2-D test functions
A = np.array([0.9, -0.4])
B = np.array([0.3, 0.8])


def f1(t):                     # t: (n, 2)
    return np.log(np.cosh(t @ A - 0.3)) + 0.2 * np.sin(t @ B) + 0.05 * np.sum(t * t, axis=1) ** 2


def f1_grad(t):
    r = np.sum(t * t, axis=1)
    return np.tanh(t @ A - 0.3)[:, None] * A + 0.2 * np.cos(t @ B)[:, None] * B + 0.2 * r[:, None] * t


def f1_hess(t):
    r = np.sum(t * t, axis=1)
    return ((1 - np.tanh(t @ A - 0.3) ** 2)[:, None, None] * np.outer(A, A)
            - 0.2 * np.sin(t @ B)[:, None, None] * np.outer(B, B)
            + 0.2 * r[:, None, None] * np.eye(2) + 0.4 * t[:, :, None] * t[:, None, :])


def f2(t):
    return np.exp(-0.5 * t[:, 0]) * np.cos(t[:, 1])


def f2_grad(t):
    e, c, s = np.exp(-0.5 * t[:, 0]), np.cos(t[:, 1]), np.sin(t[:, 1])
    return np.stack([-0.5 * e * c, -e * s], axis=1)


def f2_hess(t):
    e, c, s = np.exp(-0.5 * t[:, 0]), np.cos(t[:, 1]), np.sin(t[:, 1])
    return np.stack([np.stack([0.25 * e * c, 0.5 * e * s], 1), np.stack([0.5 * e * s, -e * c], 1)], 1)


def test_hand_derivatives_of_the_test_functions():
    t = np.random.default_rng(0).normal(size=(4, 2))
    h = 1e-6
    for f, g, H in ((f1, f1_grad, f1_hess), (f2, f2_grad, f2_hess)):
        fd_g = np.stack([(f(t + h * e) - f(t - h * e)) / (2 * h) for e in np.eye(2)], axis=1)
        fd_H = np.stack([(g(t + h * e) - g(t - h * e)) / (2 * h) for e in np.eye(2)], axis=2)
        np.testing.assert_allclose(fd_g, g(t), rtol=1e-7, atol=1e-8)        # O(h²) truncation + 1e-10 rounding
        np.testing.assert_allclose(fd_H, H(t), rtol=1e-7, atol=1e-8)


X, W = np.polynomial.hermite_e.hermegauss(30)
X1, X2 = np.meshgrid(X, X, indexing="ij")
NODES = np.stack([X1.ravel(), X2.ravel()], axis=1)
WEIGHTS = np.outer(W, W).ravel() / (2 * np.pi)


def expect(fn, m, C):
    """E_{N(m, C)}[fn(θ)] by a 30×30 Gauss-Hermite rule (smooth integrands: converged to ~1e-15)."""
    pts = m + NODES @ np.linalg.cholesky(C).T
    return np.tensordot(WEIGHTS, fn(pts), axes=1)


M_K, C_K = np.array([0.4, -0.6]), np.array([[0.5, 0.15], [0.15, 0.3]])
M_O, C_O = np.array([-1.0, 1.2]), np.array([[0.4, -0.1], [-0.1, 0.6]])


def mixture_expect(fn, m, C):
    return PI * expect(fn, m, C) + (1 - PI) * expect(fn, M_O, C_O)


SYM_DIRECTIONS = [np.array([[1.0, 0], [0, 0]]), np.array([[0, 1.0], [1.0, 0]]), np.array([[0, 0], [0, 1.0]])]


def test_bonnet_and_price_for_a_full_covariance_component():
    st, eqs, _, syms, dims = step_of("gaussian_full")
    assert st.equation.startswith("App. E")
    (P,) = dims
    h = 1e-5
    for slot, (f, g, H) in (("loss", (f1, f1_grad, f1_hess)), ("logq", (f2, f2_grad, f2_hess))):
        vals = {syms["pi_k"]: PI, syms[f"E_grad_{slot}_k"]: expect(g, M_K, C_K),
                syms[f"E_hess_{slot}_k"]: expect(H, M_K, C_K)}
        gm = evaluate(eqs[f"gradm_{slot}_k"], vals, {P: 2}).ravel()
        gC = evaluate(eqs[f"gradC_{slot}_k"], vals, {P: 2})
        fd_m = np.array([(mixture_expect(f, M_K + h * e, C_K) - mixture_expect(f, M_K - h * e, C_K)) / (2 * h)
                         for e in np.eye(2)])
        # central differences of a quadrature that is exact to ~1e-15: O(h²) truncation ≈ 1e-10, rounding
        # ≈ 1e-15/h = 1e-10; a missing π_k or ½ is off by a factor > 2
        np.testing.assert_allclose(gm, fd_m, rtol=1e-7, atol=1e-9)
        for D in SYM_DIRECTIONS:
            fd = (mixture_expect(f, M_K, C_K + h * D) - mixture_expect(f, M_K, C_K - h * D)) / (2 * h)
            assert abs(np.trace(gC.T @ D) - fd) < 1e-7 * max(1.0, abs(fd)), (slot, D)


def test_the_natural_gradient_of_a_full_component_equals_differences_in_mu():
    """grad_mu1_k, grad_mu2_k as recorded (Eqs. 67-68 with Bonnet/Price) = ∇_{μ_k}(E_q[f₁] + E_q[f₂])."""
    _, _, final, syms, dims = step_of("gaussian_full")
    (P,) = dims
    mu1, mu2 = PI * M_K, PI * (C_K + np.outer(M_K, M_K))
    vals = {syms["pi_k"]: PI, syms["mu1_k"]: mu1,
            syms["E_grad_loss_k"]: expect(f1_grad, M_K, C_K), syms["E_hess_loss_k"]: expect(f1_hess, M_K, C_K),
            syms["E_grad_logq_k"]: expect(f2_grad, M_K, C_K), syms["E_hess_logq_k"]: expect(f2_hess, M_K, C_K)}
    d1 = evaluate(final["grad_mu1_k"], vals, {P: 2}).ravel()
    d2 = evaluate(final["grad_mu2_k"], vals, {P: 2})

    def total(u1, u2):                    # μ_k = π_k (m, C + mmᵀ) inverted here (Eq. 27)
        m = u1 / PI
        C = u2 / PI - np.outer(m, m)
        return mixture_expect(f1, m, C) + mixture_expect(f2, m, C)
    h = 1e-6
    fd1 = np.array([(total(mu1 + h * e, mu2) - total(mu1 - h * e, mu2)) / (2 * h) for e in np.eye(2)])
    # the 1/π_k² factors raise the third derivative to ~1e2: truncation ~1e-10, rounding ~1e-15/h ≈ 1e-9
    np.testing.assert_allclose(d1, fd1, rtol=1e-6, atol=1e-7)
    for D in SYM_DIRECTIONS:
        fd = (total(mu1, mu2 + h * D) - total(mu1, mu2 - h * D)) / (2 * h)
        assert abs(np.trace(d2.T @ D) - fd) < 1e-6 * max(1.0, abs(fd)), D


# ------------------------------------------------------------------------------ scalar components
x1, w1 = np.polynomial.hermite_e.hermegauss(60)
w1 = w1 / np.sqrt(2 * np.pi)


def test_bonnet_and_price_for_a_scalar_component():
    _, eqs, _, syms, _ = step_of("gaussian_diag")
    f = lambda t: np.log(np.cosh(t - 0.5)) + 0.1 * t ** 4          # noqa: E731
    g = lambda t: np.tanh(t - 0.5) + 0.4 * t ** 3                   # noqa: E731
    H = lambda t: 1 - np.tanh(t - 0.5) ** 2 + 1.2 * t ** 2          # noqa: E731
    m, C, m_o, C_o = 0.6, 0.3, -1.5, 0.8

    def E(fn, mm, cc):
        return float(w1 @ fn(mm + np.sqrt(cc) * x1))

    def mix(mm, cc):
        return PI * E(f, mm, cc) + (1 - PI) * E(f, m_o, C_o)
    vals = {syms["pi_k"]: PI, syms["E_grad_loss_k"]: E(g, m, C), syms["E_hess_loss_k"]: E(H, m, C)}
    h = 1e-5
    fd_m = (mix(m + h, C) - mix(m - h, C)) / (2 * h)
    fd_C = (mix(m, C + h) - mix(m, C - h)) / (2 * h)
    np.testing.assert_allclose(evaluate(eqs["gradm_loss_k"], vals), fd_m, rtol=1e-8)   # as above
    np.testing.assert_allclose(evaluate(eqs["gradC_loss_k"], vals), fd_C, rtol=1e-8)

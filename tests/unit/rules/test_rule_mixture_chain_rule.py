"""Identity ``mixture_chain_rule`` (App. E, Eqs. 67-68; Eq. 27): the natural gradient of component k,
∇_{μ_k} F, is taken through m_k(μ_k) = μ_k⁽¹⁾/π_k and C_k(μ_k) = μ_k⁽²⁾/π_k − m_k m_kᵀ, which brings the 1/π_k
of Eqs. 67-68.

The step the engine records (``derive(...).step("mixture_chain_rule")``) writes ∇_{μ_k} in terms of
∇_{m_k}, ∇_{C_k} of the loss and log q terms.  It is evaluated numerically for arbitrary smooth test functions
F₁(m, C) (in the loss slot) and F₂(m, C) (in the log q slot), their (m, C)-gradients by torch autograd, and
compared with central differences in μ_k of F₁ + F₂ composed with the inverse of μ_k = π_k E_{q_k}[T(θ)]
written here — for scalar (mean-field) and 2×2 full-covariance components, the latter along symmetric
directions (the gradient with respect to a symmetric matrix is only defined through them).
"""
import functools

import numpy as np
import sympy as sp
import torch

from blr_derive import api
from blr_derive.families.symbolic import evaluate

PI = 0.3


@functools.lru_cache(maxsize=None)
def step_of(base):
    d = api.derive(family={"mixture": base, "components": 2, "weights": [0.3]}, approximations=["delta"],
                   hyperparameters={"rho": 0.5}, name=f"mcr_{base}")
    st = d.step("mixture_chain_rule")
    eqs = {str(lhs): rhs for lhs, rhs in st.equations}
    syms = {str(s): s for e in eqs.values() for s in e.free_symbols}
    dims = {d_ for s in syms.values() if isinstance(s, sp.MatrixSymbol) for d_ in s.shape if d_.is_Symbol}
    return st, eqs, syms, dims


def ordinary(mu1, mu2):
    """Eq. 27 inverted by hand: E_{q_k}[θ] = μ⁽¹⁾/π, E_{q_k}[θθᵀ] = μ⁽²⁾/π, so C = μ⁽²⁾/π − mmᵀ."""
    m = mu1 / PI
    return m, mu2 / PI - np.multiply.outer(m, m)


# ------------------------------------------------------------------------------ scalar components
def F1(m, C):
    return torch.sin(m) * C + m ** 3 / 3


def F2(m, C):
    return torch.exp(-C) * m + torch.log(C)


def grads(F, m, C):
    mt = torch.tensor(m, dtype=torch.float64, requires_grad=True)
    Ct = torch.tensor(C, dtype=torch.float64, requires_grad=True)
    gm, gC = torch.autograd.grad(F(mt, Ct), (mt, Ct))
    return gm.numpy(), gC.numpy()


def value(F, m, C):
    return float(F(torch.tensor(m, dtype=torch.float64), torch.tensor(C, dtype=torch.float64)))


def test_the_recorded_inverse_map_is_eq_27_inverted():
    _, eqs, syms, _ = step_of("gaussian_diag")
    mu1, mu2 = PI * 0.7, PI * (0.4 + 0.49)
    vals = {syms["mu1_k"]: mu1, syms["mu2_k"]: mu2, syms["pi_k"]: PI}
    m, C = ordinary(mu1, mu2)
    assert abs(evaluate(eqs["m_k"], vals) - m) < 1e-15
    assert abs(evaluate(eqs["C_k"], vals) - C) < 1e-15


def test_scalar_component_natural_gradient_equals_finite_differences_in_mu():
    st, eqs, syms, _ = step_of("gaussian_diag")
    assert st.equation == "App. E, Eqs. 67-68"
    m0, C0 = 0.7, 0.4
    mu = np.array([PI * m0, PI * (C0 + m0 ** 2)])
    gm1, gC1 = grads(F1, m0, C0)
    gm2, gC2 = grads(F2, m0, C0)
    vals = {syms["mu1_k"]: mu[0], syms["pi_k"]: PI, syms["gradm_loss_k"]: gm1, syms["gradC_loss_k"]: gC1,
            syms["gradm_logq_k"]: gm2, syms["gradC_logq_k"]: gC2}
    derived = np.array([evaluate(eqs["grad_mu1_k"], vals), evaluate(eqs["grad_mu2_k"], vals)])

    def total(u):
        m, C = ordinary(u[0], u[1])
        return value(F1, m, C) + value(F2, m, C)
    h = 1e-5
    fd = np.array([(total(mu + h * e) - total(mu - h * e)) / (2 * h) for e in np.eye(2)])
    # central differences: truncation O(h²·F''') with F''' ≲ 1e3 here (1/π³ factors) ≈ 1e-7, rounding
    # ~1e-16·|F|/h ≈ 1e-11; 1e-6 relative is safe, while a missing 1/π_k is a factor 3
    np.testing.assert_allclose(derived, fd, rtol=1e-6)


# ------------------------------------------------------------------------------ full 2×2 components
A_VEC = np.array([0.8, -0.5])
B_MAT = np.array([[1.0, 0.3], [0.3, -0.7]])


def G1(m, C):
    return torch.sin(torch.tensor(A_VEC) @ m) * torch.trace(torch.tensor(B_MAT) @ C) + m @ C @ m / 2


def G2(m, C):
    return torch.logdet(C) + torch.cos(m[0]) * C[0, 1] * C[1, 0]


def grads_full(F, m, C):
    mt = torch.tensor(m, requires_grad=True)
    Ct = torch.tensor(C, requires_grad=True)
    gm, gC = torch.autograd.grad(F(mt, Ct), (mt, Ct))
    gC = gC.numpy()
    return gm.numpy(), (gC + gC.T) / 2          # the derivative along symmetric directions


def test_full_component_natural_gradient_equals_directional_finite_differences():
    _, eqs, syms, dims = step_of("gaussian_full")
    (P,) = dims
    m0 = np.array([0.4, -0.9])
    C0 = np.array([[0.8, 0.2], [0.2, 0.5]])
    mu1, mu2 = PI * m0, PI * (C0 + np.outer(m0, m0))
    gm1, gC1 = grads_full(G1, m0, C0)
    gm2, gC2 = grads_full(G2, m0, C0)
    vals = {syms["mu1_k"]: mu1, syms["pi_k"]: PI, syms["gradm_loss_k"]: gm1, syms["gradC_loss_k"]: gC1,
            syms["gradm_logq_k"]: gm2, syms["gradC_logq_k"]: gC2}
    d1 = evaluate(eqs["grad_mu1_k"], vals, {P: 2}).ravel()
    d2 = evaluate(eqs["grad_mu2_k"], vals, {P: 2})

    def total(u1, u2):
        m, C = ordinary(u1, u2)
        m, C = torch.tensor(m), torch.tensor(C)
        return float(G1(m, C) + G2(m, C))
    h = 1e-5
    fd1 = np.array([(total(mu1 + h * e, mu2) - total(mu1 - h * e, mu2)) / (2 * h) for e in np.eye(2)])
    np.testing.assert_allclose(d1, fd1, rtol=1e-6, atol=1e-8)          # truncation O(h²) as above
    rng = np.random.default_rng(0)
    for D in [np.array([[1.0, 0], [0, 0]]), np.array([[0, 1.0], [1.0, 0]]), np.array([[0, 0], [0, 1.0]])] + \
            [(lambda X: X + X.T)(rng.normal(size=(2, 2))) for _ in range(3)]:
        fd = (total(mu1, mu2 + h * D) - total(mu1, mu2 - h * D)) / (2 * h)
        assert abs(np.trace(d2.T @ D) - fd) < 1e-6 * max(1.0, abs(fd)), D

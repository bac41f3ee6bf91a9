"""Rule ``delta`` (App. C, Eqs. 13, 65-66): E_q[∇ℓ] ≈ ∇ℓ(m), E_q[∇²ℓ] ≈ ∇²ℓ(m).

The generated steps are checked against BLR steps (Eq. 6) computed here by hand in natural parameters.  The
natural gradient of the delta method at a state (m₀, C₀) is the *exact* natural gradient of E_q[ℓ̃] for the
second-order Taylor model ℓ̃ of ℓ at m₀ (E_q[∇ℓ̃] = ∇ℓ(m₀) + ∇²ℓ(m₀)(m − m₀) and E_q[∇²ℓ̃] = ∇²ℓ(m₀) at
m = m₀), so the references below take central differences in μ of the closed-form E_q[ℓ̃] and never use
Bonnet's or Price's formulas; the derivatives of an explicit loss come from torch autograd."""
from functools import lru_cache

import numpy as np
import pytest
import torch

from blr_derive import api
from blr_derive.core.errors import UnsupportedTarget


@lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


# ---------------------------------------------------------------------------------------- abstract losses

def loss_terms(t):
    """ℓ(θ) = Σ softplus(θ) + sin(2θ) + 0.1 θ⁴ (separable), with its gradient and elementwise Hessian."""
    s = 1 / (1 + np.exp(-t))
    return (np.logaddexp(0, t) + np.sin(2 * t) + 0.1 * t ** 4,
            s + 2 * np.cos(2 * t) + 0.4 * t ** 3,
            s * (1 - s) - 4 * np.sin(2 * t) + 1.2 * t ** 2)


DIAG = """
name: delta_diag
family: gaussian_diag
loss: abstract
approximations: [delta]
hyperparameters: {rho: 0.1}
"""


def test_diag_step_is_the_blr_step_of_the_taylor_model():
    mod = compiled(DIAG)
    m0 = np.array([0.4, -1.3, 2.1])
    s0 = np.array([2.0, 0.7, 5.0])
    rho = 0.35
    l0, g0, h0 = loss_terms(m0)
    out = mod.step(mod.init(m=m0, s=s0), oracles={"grad": lambda t: loss_terms(t)[1],
                                                   "hess": lambda t: loss_terms(t)[2]}, rho=rho)

    def expected_taylor(u1, u2):        # E_q[ℓ̃] per coordinate, q = N(u1, u2 − u1²)
        return l0 + g0 * (u1 - m0) + 0.5 * h0 * ((u1 - m0) ** 2 + u2 - u1 ** 2)

    u1, u2 = m0, m0 ** 2 + 1 / s0
    h = 1e-4
    # E_q[ℓ̃] is a quadratic polynomial in μ: central differences are exact up to rounding (~1e-16·|E|/h ≈ 1e-11)
    G1 = (expected_taylor(u1 + h, u2) - expected_taylor(u1 - h, u2)) / (2 * h)
    G2 = (expected_taylor(u1, u2 + h) - expected_taylor(u1, u2 - h)) / (2 * h)
    lam1, lam2 = s0 * m0, -s0 / 2                     # natural parameters of N(m, 1/s)
    lam1, lam2 = (1 - rho) * lam1 - rho * G1, (1 - rho) * lam2 - rho * G2      # Eq. 6 (h(θ) = 1)
    s_ref = -2 * lam2
    m_ref = lam1 / s_ref
    np.testing.assert_allclose(out["s"], s_ref, rtol=1e-8)
    np.testing.assert_allclose(out["m"], m_ref, rtol=1e-8, atol=1e-10)


FULL = """
name: delta_full
family: gaussian_full
loss: abstract
approximations: [delta]
hyperparameters: {rho: 0.1}
"""

A_MAT = np.array([[1.0, 0.4, -0.3], [0.2, -0.8, 0.5], [0.6, 0.1, 0.9], [-0.5, 0.7, 0.2]])


def loss_full(t):
    """ℓ(θ) = Σ_n log cosh(a_nᵀθ) + 0.05 ‖θ‖⁴ — not quadratic, with a non-diagonal Hessian."""
    z = A_MAT @ t
    return np.sum(np.log(np.cosh(z))) + 0.05 * (t @ t) ** 2


def grad_full(t):
    return A_MAT.T @ np.tanh(A_MAT @ t) + 0.2 * (t @ t) * t


def hess_full(t):
    z = A_MAT @ t
    return A_MAT.T @ np.diag(1 - np.tanh(z) ** 2) @ A_MAT + 0.2 * (t @ t) * np.eye(3) + 0.4 * np.outer(t, t)


def test_full_gaussian_step_is_the_blr_step_of_the_taylor_model():
    mod = compiled(FULL)
    m0 = np.array([0.3, -0.6, 0.9])
    B = np.array([[1.2, 0.3, 0.0], [0.3, 0.9, -0.2], [0.0, -0.2, 1.5]])
    S0 = B @ B.T + 0.5 * np.eye(3)
    rho = 0.4
    # hand-coded derivatives checked against central differences of the loss first (error O(h²) ≈ 1e-10)
    hh = 1e-5
    E = np.eye(3)
    fd_g = np.array([(loss_full(m0 + hh * e) - loss_full(m0 - hh * e)) / (2 * hh) for e in E])
    fd_H = np.array([(grad_full(m0 + hh * e) - grad_full(m0 - hh * e)) / (2 * hh) for e in E])
    np.testing.assert_allclose(fd_g, grad_full(m0), rtol=1e-8)
    np.testing.assert_allclose(fd_H, hess_full(m0), rtol=1e-7, atol=1e-9)
    l0, g0, H0 = loss_full(m0), grad_full(m0), hess_full(m0)
    out = mod.step(mod.init(m=m0, S=S0), oracles={"grad": grad_full, "hess": hess_full}, rho=rho)

    def expected_taylor(U1, U2):        # E_q[ℓ̃], q = N(U1, U2 − U1U1ᵀ); valid for any (even non-symmetric) U2
        d = U1 - m0
        return l0 + g0 @ d + 0.5 * (d @ H0 @ d + np.trace(H0 @ (U2 - np.outer(U1, U1))))

    U1, U2 = m0, np.linalg.inv(S0) + np.outer(m0, m0)
    h = 1e-4
    # E_q[ℓ̃] is quadratic in (U1, U2): central differences are exact up to rounding
    G1 = np.array([(expected_taylor(U1 + h * e, U2) - expected_taylor(U1 - h * e, U2)) / (2 * h) for e in E])
    G2 = np.zeros((3, 3))
    for i in range(3):
        for j in range(3):
            D = np.zeros((3, 3))
            D[i, j] = h
            G2[i, j] = (expected_taylor(U1, U2 + D) - expected_taylor(U1, U2 - D)) / (2 * h)
    lam1, lam2 = S0 @ m0, -S0 / 2
    lam1, lam2 = (1 - rho) * lam1 - rho * G1, (1 - rho) * lam2 - rho * G2      # Eq. 6
    S_ref = -2 * lam2
    m_ref = np.linalg.solve(S_ref, lam1)
    np.testing.assert_allclose(out["S"], S_ref, rtol=1e-8, atol=1e-10)
    np.testing.assert_allclose(out["m"], m_ref, rtol=1e-8, atol=1e-10)


# ---------------------------------------------------------------------------------------- explicit losses

LOGREG = """
name: delta_logreg
family: gaussian_full
loss:
  expression: sum(softplus(X*theta)) - y.T*X*theta + 0.5*alpha*theta.T*theta
  data: {X: {shape: [N, P]}, y: {shape: [N]}}
hyperparameters: {alpha: 1.0, rho: 0.5}
approximations: [delta]
"""


def test_explicit_loss_derivatives_match_torch_autograd():
    """The engine differentiates the explicit loss itself (datasum.py); torch autograd gives ∇ℓ(m), ∇²ℓ(m)."""
    mod = compiled(LOGREG)
    rng = np.random.default_rng(3)
    N, P = 12, 3
    X = rng.normal(size=(N, P))
    y = (rng.random(N) < 0.5).astype(float)
    alpha, rho = 0.8, 0.7
    m0 = rng.normal(size=P)
    B = rng.normal(size=(P, P))
    S0 = B @ B.T + np.eye(P)
    Xt, yt = torch.tensor(X), torch.tensor(y)

    def loss(t):
        z = Xt @ t
        return torch.nn.functional.softplus(z).sum() - yt @ z + 0.5 * alpha * t @ t
    mt = torch.tensor(m0)
    g = torch.autograd.functional.jacobian(loss, mt).numpy()
    H = torch.autograd.functional.hessian(loss, mt).numpy()
    out = mod.step(mod.init(m=m0, S=S0), data={"X": X, "y": y}, alpha=alpha, rho=rho)
    S_ref = (1 - rho) * S0 + rho * H                          # Eq. 6 for the full Gaussian with the delta method
    m_ref = m0 - rho * np.linalg.solve(S_ref, g)
    # both sides are double-precision evaluations of the same closed forms (a few roundings)
    np.testing.assert_allclose(out["S"], S_ref, rtol=1e-11, atol=1e-12)
    np.testing.assert_allclose(out["m"], m_ref, rtol=1e-11, atol=1e-12)


RIDGE = """
name: {name}
family: gaussian_full
loss:
  expression: 0.5*(y - X*theta).T*(y - X*theta) + 0.5*delta*theta.T*theta
  data: {{X: {{shape: [N, P]}}, y: {{shape: [N]}}}}
hyperparameters: {{delta: 1.0, rho: 0.5}}
approximations: [{rule}]
"""


def test_for_a_quadratic_loss_the_delta_method_is_exact():
    """ℓ quadratic: ∇ℓ(m) = E_q[∇ℓ] and ∇²ℓ(m) = E_q[∇²ℓ], so ``delta`` and ``exact`` give the same step, which is
    Eq. 6 with the natural gradient (−Xᵀy, (XᵀX + δI)/2) of Eq. 14, computed here by hand."""
    mod_delta = compiled(RIDGE.format(name="ridge_delta", rule="delta"))
    mod_exact = compiled(RIDGE.format(name="ridge_exact", rule="exact"))
    rng = np.random.default_rng(4)
    N, P = 10, 4
    X, y = rng.normal(size=(N, P)), rng.normal(size=N)
    delta, rho = 0.3, 0.45
    m0 = rng.normal(size=P)
    B = rng.normal(size=(P, P))
    S0 = B @ B.T + 0.5 * np.eye(P)
    lam1 = (1 - rho) * S0 @ m0 + rho * X.T @ y
    S_ref = (1 - rho) * S0 + rho * (X.T @ X + delta * np.eye(P))
    m_ref = np.linalg.solve(S_ref, lam1)
    for mod in (mod_delta, mod_exact):
        out = mod.step(mod.init(m=m0, S=S0), data={"X": X, "y": y}, delta=delta, rho=rho)
        np.testing.assert_allclose(out["S"], S_ref, rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(out["m"], m_ref, rtol=1e-10, atol=1e-12)


# an explicit loss of one coordinate over the elementwise gaussian_diag (it was refused: 'delta needs a Gaussian
# family over a vector', helper-69's finding); the derivatives are sympy's, checked here against torch autograd
DIAG_EXPLICIT = """\
name: diag_explicit_delta
family: gaussian_diag
loss: log(1 + (theta - c)**2) + a*softplus(theta)
approximations: [delta]
state_init: {s: 1.0}
hyperparameters:
  rho: {default: 0.1}
  c: {default: 2.0}
  a: {default: 0.5}
"""


def test_an_explicit_loss_of_one_coordinate_over_gaussian_diag_is_eq12_with_autograd_derivatives():
    """s ← (1 − ρ)s + ρ ℓ''(m), m ← m − ρ ℓ'(m)/s_new (Eq. 12 with the delta method, Eq. 13), coordinate by
    coordinate, with ℓ', ℓ'' from torch autograd; a Cauchy-like loss is not convex, so s is checked (numpy raises
    where ℓ''(m) < 0 drives it negative) and the torch target refuses the recipe."""
    mod = compiled(DIAG_EXPLICIT)
    g = np.random.default_rng(3)
    for _ in range(4):
        m0, s0 = g.normal(0, 3, 6), g.uniform(0.5, 5, 6)
        rho, c, a = g.uniform(0.01, 0.3), g.normal(), g.uniform(0, 2)
        t = torch.tensor(m0, dtype=torch.float64, requires_grad=True)
        loss = (torch.log1p((t - c) ** 2) + a * torch.nn.functional.softplus(t)).sum()
        (d1,) = torch.autograd.grad(loss, t, create_graph=True)
        d2 = torch.autograd.grad(d1.sum(), t)[0].numpy()
        s_new = (1 - rho) * s0 + rho * d2
        assert np.all(s_new > 0)            # ℓ'' ≥ −1/4 here, s0 ≥ 0.5, ρ ≤ 0.3
        out = mod.step(mod.init(m=m0.copy(), s=s0.copy()), rho=rho, c=c, a=a)
        np.testing.assert_allclose(out["s"], s_new, rtol=1e-13)
        np.testing.assert_allclose(out["m"], m0 - rho * d1.detach().numpy() / s_new, rtol=1e-13, atol=1e-15)
    with pytest.raises(FloatingPointError, match="the new s is not positive"):
        mod.step(mod.init(m=np.array([2.0 + 10.0]), s=np.array([1e-3])), rho=0.9, c=2.0, a=0.0)
    with pytest.raises(UnsupportedTarget, match="does not check at run time that 's' stays positive"):
        api.derive(DIAG_EXPLICIT).code("torch")


def test_a_kinked_explicit_loss_takes_its_derivatives_almost_everywhere_as_autograd_does():
    """|θ − 1|³ + |θ| over gaussian_diag: ℓ'' holds δ(θ) and (θ − 1)²δ(θ − 1), which no printer has (an internal
    error, exit 3, when this path was first added); the δ terms are dropped, as torch autograd's derivatives have
    none: ℓ' = 3(θ − 1)|θ − 1| + sign θ, ℓ'' = 6|θ − 1| away from the kinks."""
    mod = compiled(DIAG_EXPLICIT.replace("log(1 + (theta - c)**2) + a*softplus(theta)", "abs(theta - 1)**3 + abs(theta)")
                   .replace("diag_explicit_delta", "diag_kinked_delta"))
    m0, s0, rho = np.array([-1.5, 0.5, 2.0, 3.7]), np.array([1.0, 2.0, 0.5, 3.0]), 0.1
    t = torch.tensor(m0, dtype=torch.float64, requires_grad=True)
    (d1,) = torch.autograd.grad((torch.abs(t - 1) ** 3 + torch.abs(t)).sum(), t, create_graph=True)
    d2 = torch.autograd.grad(d1.sum(), t)[0].numpy()
    out = mod.step(mod.init(m=m0.copy(), s=s0.copy()), rho=rho)
    s_new = (1 - rho) * s0 + rho * d2
    np.testing.assert_allclose(out["s"], s_new, rtol=1e-14)
    np.testing.assert_allclose(out["m"], m0 - rho * d1.detach().numpy() / s_new, rtol=1e-14)

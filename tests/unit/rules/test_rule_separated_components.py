"""Rule ``separated_components`` (App. E, Eq. 74; App. G, Eqs. 85-86): components far apart have
r_k(m_k) ≈ 1, r_j(m_k) ≈ 0, so ∇log q(m_k) ≈ ∇log q_k(m_k) = 0 and ∇²log q(m_k) ≈ ∇²log q_k(m_k) = −S_k; with
the delta method each component of the mixture BLR (Eq. 28) then takes the online Newton step of Eq. 12,
S_k ← (1 − ρ)S_k + ρH(m_k), m_k ← m_k − ρS_k⁻¹g(m_k), whatever its weight and the other components.

Checked numerically:

* the generated step (full-covariance and mean-field components) against Eq. 12 written here per component,
  for overlapping components and two different weights;
* what the rule drops: against the generated step with the responsibilities (``mixture_score``), the
  difference is exactly the one of ∇log q(m_k) and ∇²log q(m_k) + S_k, both by torch autograd of the mixture's
  log density; it is large for overlapping components and vanishes (to rounding) 40 standard deviations apart.
"""
import functools

import numpy as np
import torch

from blr_derive import api


@functools.lru_cache(maxsize=None)
def compiled(base, weight, separated=True):
    approx = ["delta"] + (["separated_components"] if separated else [])
    return api.derive(family={"mixture": base, "components": 2, "weights": [weight]}, approximations=approx,
                      hyperparameters={"rho": 0.5}, name=f"sep_{base}_{separated}").compile("numpy")


A_MAT = np.array([[1.0, 0.4], [0.2, -0.8], [0.6, 0.1]])


def grad(t):
    return A_MAT.T @ np.tanh(A_MAT @ t - 0.2) + 0.3 * t


def hess(t):
    return A_MAT.T @ np.diag(1 - np.tanh(A_MAT @ t - 0.2) ** 2) @ A_MAT + 0.3 * np.eye(2)


M1, S1 = np.array([-0.3, 0.4]), np.array([[2.0, 0.4], [0.4, 1.5]])
M2, S2 = np.array([0.5, -0.2]), np.array([[1.0, -0.2], [-0.2, 3.0]])


def newton(m, S, rho):
    """Eq. 12 (online Newton with the delta method), written here."""
    S_new = (1 - rho) * S + rho * hess(m)
    return m - rho * np.linalg.solve(S_new, grad(m)), S_new


# one 2×2 solve of condition < 1e2 and a few products: roundings ~1e-15
TOL = 1e-13


def test_full_components_take_the_online_newton_step_whatever_their_weight():
    for weight in (0.3, 0.8):
        mod = compiled("gaussian_full", weight)
        rho = 0.35
        st = mod.step(mod.init(m1=M1, S1=S1, m2=M2, S2=S2), oracles={"grad": grad, "hess": hess}, rho=rho)
        for k, (m, S) in enumerate(((M1, S1), (M2, S2)), 1):
            m_ref, S_ref = newton(m, S, rho)
            np.testing.assert_allclose(st[f"S{k}"], S_ref, rtol=TOL, atol=TOL)
            np.testing.assert_allclose(st[f"m{k}"], m_ref, rtol=TOL, atol=TOL)


def test_mean_field_components_take_the_online_newton_step():
    mod = compiled("gaussian_diag", 0.4)
    g = lambda t: np.sinh(t - 0.3) + t                   # noqa: E731
    H = lambda t: np.cosh(t - 0.3) + 1                   # noqa: E731
    m1, s1, m2, s2 = np.array([0.1, -0.5]), np.array([2.0, 0.5]), np.array([0.3, 0.0]), np.array([1.0, 4.0])
    rho = 0.2
    st = mod.step(mod.init(m1=m1, s1=s1, m2=m2, s2=s2), oracles={"grad": g, "hess": H}, rho=rho)
    for k, (m, s) in enumerate(((m1, s1), (m2, s2)), 1):
        s_ref = (1 - rho) * s + rho * H(m)
        np.testing.assert_allclose(st[f"s{k}"], s_ref, rtol=TOL)
        np.testing.assert_allclose(st[f"m{k}"], m - rho * g(m) / s_ref, rtol=TOL, atol=TOL)


def mixture_score(weight, comps, x):
    """∇log q(x), ∇²log q(x) of q = w N(m₁, S₁⁻¹) + (1 − w) N(m₂, S₂⁻¹) by torch autograd."""
    def logq(t):
        return torch.logsumexp(torch.stack([
            np.log(w) + torch.distributions.MultivariateNormal(torch.tensor(m), precision_matrix=torch.tensor(S))
            .log_prob(t) for w, (m, S) in zip((weight, 1 - weight), comps)]), 0)
    t = torch.tensor(x)
    return torch.autograd.functional.jacobian(logq, t).numpy(), torch.autograd.functional.hessian(logq, t).numpy()


def test_what_the_rule_drops_is_the_other_components_share_of_the_score():
    sep, full = compiled("gaussian_full", 0.3), compiled("gaussian_full", 0.3, separated=False)
    rho = 0.3
    for shift, large in ((0.0, True), (40.0, False)):
        comps = ((M1 - np.array([shift / 2, 0]), S1), (M2 + np.array([shift / 2, 0]), S2))
        state = {"m1": comps[0][0], "S1": S1, "m2": comps[1][0], "S2": S2}
        a = sep.step(sep.init(**state), oracles={"grad": grad, "hess": hess}, rho=rho)
        b = full.step(full.init(**state), oracles={"grad": grad, "hess": hess}, rho=rho)
        for k, (m, S) in enumerate(comps, 1):
            gq, Hq = mixture_score(0.3, comps, m)
            # the responsibilities' step: S + ρ(H + ∇²log q); the separated one: S + ρ(H − S)
            np.testing.assert_allclose(b[f"S{k}"] - a[f"S{k}"], rho * (Hq + S), rtol=1e-10, atol=1e-12)
            np.testing.assert_allclose(b[f"m{k}"], m - rho * np.linalg.solve(b[f"S{k}"], grad(m) + gq),
                                       rtol=1e-11, atol=1e-12)
            gap = np.abs(b[f"S{k}"] - a[f"S{k}"]).max()
            # overlapping: an O(0.1) change; 40 σ apart: r_j(m_k) ≈ e^{-400} and the two steps coincide
            assert (gap > 1e-2) if large else (gap < 1e-13), (shift, gap)

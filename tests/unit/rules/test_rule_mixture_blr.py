"""Identity ``mixture_blr`` (Sec. 3.2, Eq. 28): each free component's natural parameters take the step
λ_k ← λ_k − ρ∇_{μ_k}[E_q[ℓ] − H(q)], with H the entropy of the *mixture* q, and ∇_{μ_k}(−H) = ∇_{μ_k}E_q[log q]
with log q held fixed (because E_q[∇_{μ_k} log q] = ∇_{μ_k} ∫q = 0).

Checked numerically, for scalar components q = 0.3 N(m₁, 1/s₁) + 0.7 N(m₂, 1/s₂), with integrals over θ by
the trapezoidal rule on a wide uniform grid (spectrally accurate for these smooth, Gaussian-tailed integrands)
and ∇_{μ_k} by central differences through μ_k = π_k(m_k, m_k² + 1/s_k):

* the identity the rule rests on: ∇_{μ_k}(−H(q)) = ∇_{μ_k} ∫ q(θ; μ) log q̄(θ) dθ with q̄ frozen at the point;
* the engine's recorded update of component k (the second ``mixture_blr`` step, for an explicit quartic loss
  with exact Gaussian moments) with the delta method undone — ∇log q(m_k), ∇²log q(m_k) replaced by
  E_{q_k}[∇log q], E_{q_k}[∇²log q] from the grid — equals λ_k − ρ∇_{μ_k}[E_q ℓ − H(q)] computed by differences
  of the objective, for both components and two learning rates.
"""
import functools

import numpy as np

from blr_derive import api
from blr_derive.families.symbolic import evaluate

W = np.array([0.3, 0.7])
GRID = np.linspace(-14.0, 14.0, 8001)
DX = GRID[1] - GRID[0]


def integrate(values):
    """∫ over the real line; the integrands are below 1e-40 at ±14 for the states used here."""
    return DX * (np.sum(values) - 0.5 * (values[0] + values[-1]))


def component_pdfs(ms, ss, t=GRID):
    return [np.sqrt(s / (2 * np.pi)) * np.exp(-0.5 * s * (t - m) ** 2) for m, s in zip(ms, ss)]


def log_mix(ms, ss, t=GRID):
    return np.logaddexp(*[np.log(w) + 0.5 * np.log(s / (2 * np.pi)) - 0.5 * s * (t - m) ** 2
                          for w, m, s in zip(W, ms, ss)])


def loss(t):
    return (t ** 2 - 1) ** 2 + t / 2


def with_mu(ms, ss, k, mu):
    """The mixture's parameters with component k's set from μ_k = π_k(m, m² + 1/s) (Eq. 27, inverted here)."""
    ms, ss = list(ms), list(ss)
    ms[k] = mu[0] / W[k]
    ss[k] = 1 / (mu[1] / W[k] - ms[k] ** 2)
    return ms, ss


def grad_mu(F, ms, ss, k, h=1e-5):
    mu = np.array([W[k] * ms[k], W[k] * (ms[k] ** 2 + 1 / ss[k])])
    return np.array([(F(*with_mu(ms, ss, k, mu + h * e)) - F(*with_mu(ms, ss, k, mu - h * e))) / (2 * h)
                     for e in np.eye(2)])


MS, SS = [-0.9, 0.6], [3.0, 1.5]          # overlapping components: the entropy couples them


def test_the_entropy_gradient_is_that_of_E_q_log_q_with_log_q_frozen():
    frozen = log_mix(MS, SS)

    def neg_entropy(ms, ss):
        q = np.exp(log_mix(ms, ss))
        return integrate(q * log_mix(ms, ss))

    def cross(ms, ss):
        return integrate(np.exp(log_mix(ms, ss)) * frozen)
    for k in (0, 1):
        a, b = grad_mu(neg_entropy, MS, SS, k), grad_mu(cross, MS, SS, k)
        # both by central differences of integrals exact to ~1e-15: truncation O(h²·1e2), rounding 1e-15/h
        np.testing.assert_allclose(a, b, rtol=1e-7, atol=1e-8)
        assert np.abs(a).max() > 1e-2                     # not a trivial 0 = 0


@functools.lru_cache(maxsize=None)
def component_update():
    d = api.derive(family={"mixture": "gaussian_diag", "components": 2, "weights": [0.3]},
                   loss={"expression": "(theta**2 - 1)**2 + theta/2"}, approximations=["exact", "delta"],
                   hyperparameters={"rho": 0.5}, name="mblr_quartic")
    steps = [s for s in d.steps if s.rule == "mixture_blr"]
    assert [s.equation for s in steps] == ["Eq. 28", "Eq. 28"]
    eqs = {str(lhs): rhs for lhs, rhs, *_ in steps[1].equations}
    syms = {str(s): s for e in eqs.values() for s in e.free_symbols}
    return eqs, syms


def test_recorded_component_update_is_eq_28_by_quadrature():
    eqs, syms = component_update()

    def objective(ms, ss):                               # E_q[ℓ] − H(q) = ∫ q (ℓ + log q)
        return integrate(np.exp(log_mix(ms, ss)) * (loss(GRID) + log_mix(ms, ss)))

    # ∇log q and ∇²log q of the mixture on the grid, from its density and two derivatives in closed form
    pdfs = [w * p for w, p in zip(W, component_pdfs(MS, SS))]
    q = sum(pdfs)
    d1 = sum(p * (-s * (GRID - m)) for p, m, s in zip(pdfs, MS, SS))
    d2 = sum(p * (s * s * (GRID - m) ** 2 - s) for p, m, s in zip(pdfs, MS, SS))
    dlogq, d2logq = d1 / q, d2 / q - (d1 / q) ** 2
    for k in (0, 1):
        qk = component_pdfs([MS[k]], [SS[k]])[0]
        for rho in (0.3, 1.0):
            vals = {syms["m_k"]: MS[k], syms["s_k"]: SS[k], syms["rho"]: rho,
                    syms["gq_k"]: integrate(qk * dlogq), syms["Hq_k"]: integrate(qk * d2logq)}
            got = np.array([evaluate(eqs["lambda1_k_next"], vals), evaluate(eqs["lambda2_k_next"], vals)])
            lam = np.array([SS[k] * MS[k], -SS[k] / 2])
            want = lam - rho * grad_mu(objective, MS, SS, k)                    # Eq. 28
            # central differences (h = 1e-5) of a quadrature exact to ~1e-14: error ≲ 1e-8 here
            np.testing.assert_allclose(got, want, rtol=1e-7, atol=1e-7)

"""Rule ``instantiate`` (Eqs. 29-30): the generic update of mixture component k is written out for every free
component, each with its own parameters, its own oracle values at its mean and its own responsibilities.

With the delta method, Eqs. 29-30 read, for each free component k of q(θ) = Σ_j π_j N(θ | m_j, S_j⁻¹),

    S_k ← S_k + ρ[∇²ℓ(m_k) + ∇²log q(m_k)],      m_k ← m_k − ρS_k⁻¹[∇ℓ(m_k) + ∇log q(m_k)]   (S_k the new value).

The references below compute ∇log q and ∇²log q by central differences of log q itself (Gaussian densities and
logsumexp, not the engine's responsibilities formula of Eqs. 69-71) and apply these equations component by component:

* a full-Gaussian mixture with K = 3 equal weights, every component against the reference;
* permuting the components (state and oracle values) permutes the generated update (the copies are the same
  generic update);
* a diagonal-Gaussian mixture with unequal weights and a fixed component: only the free components are state and
  updated, each against the reference, with the fixed one entering log q.
"""
import functools

import numpy as np
from scipy import special, stats

from blr_derive import api

FULL = """
name: inst_full
family: {mixture: gaussian_full, components: 3}
loss: abstract
approximations: [delta]
hyperparameters: {rho: 0.5}
"""

DIAG = """
name: inst_diag
family: {mixture: gaussian_diag, components: 3, weights: [pi1, pi2], fixed: {2: {m: mfix, s: sfix}}}
loss: abstract
approximations: [delta]
hyperparameters: {rho: 0.5, pi1: 0.3, pi2: 0.5, mfix: 0.0, sfix: 2.0}
"""


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


C_VEC = np.array([0.5, -0.3])


def grad(t):
    return np.tanh(t - C_VEC) + 0.4 * (t @ t) * t


def hess(t):
    return np.diag(1 - np.tanh(t - C_VEC) ** 2) + 0.4 * (t @ t) * np.eye(2) + 0.8 * np.outer(t, t)


def log_normal(t, m, S):
    """log N(t | m, S⁻¹) from the textbook density."""
    d = t - m
    return -0.5 * d @ S @ d + 0.5 * np.linalg.slogdet(S)[1] - 0.5 * len(t) * np.log(2 * np.pi)


def log_q_full(t, ms, Ss, w):
    return special.logsumexp([np.log(wk) + log_normal(t, m, S) for m, S, wk in zip(ms, Ss, w)])


def fd_grad_hess(f, x, h=1e-4):
    """Central differences: gradient (error ~h²) and Hessian by differences of the gradient (error ~1e-7)."""
    n = len(x)
    E = np.eye(n) * h
    g = np.array([(f(x + E[i]) - f(x - E[i])) / (2 * h) for i in range(n)])
    H = np.array([[(f(x + E[i] + E[j]) - f(x + E[i] - E[j]) - f(x - E[i] + E[j]) + f(x - E[i] - E[j])) / (4 * h * h)
                   for j in range(n)] for i in range(n)])
    return g, H


def reference_full(ms, Ss, rho, w):
    out = {}
    for k in range(len(ms)):
        gq, Hq = fd_grad_hess(lambda t: log_q_full(t, ms, Ss, w), ms[k])
        S_new = Ss[k] + rho * (hess(ms[k]) + Hq)
        out[f"S{k + 1}"] = S_new
        out[f"m{k + 1}"] = ms[k] - rho * np.linalg.solve(S_new, grad(ms[k]) + gq)
    return out


def full_state():
    ms = [np.array([-1.0, 0.4]), np.array([0.8, 0.9]), np.array([0.3, -1.1])]
    Ss = [np.array([[3.0, 0.5], [0.5, 2.0]]), np.array([[2.5, -0.4], [-0.4, 3.5]]), np.array([[4.0, 0.0], [0.0, 2.2]])]
    return ms, Ss


# the FD Hessian of log q (h = 1e-4, |log q| ~ 1) carries ~1e-7 absolute error, enters S through ρ and m through
# S⁻¹: 1e-5 is a safe bound, against O(0.1-1) effects of the log q terms (checked to matter below)
TOL = 1e-5


def test_every_free_component_gets_its_own_update_full_gaussian():
    mod = compiled(FULL)
    ms, Ss = full_state()
    rho = 0.4
    st = mod.init(**{f"m{k + 1}": ms[k] for k in range(3)}, **{f"S{k + 1}": Ss[k] for k in range(3)})
    out = mod.step(st, oracles={"grad": grad, "hess": hess}, rho=rho)
    ref = reference_full(ms, Ss, rho, np.full(3, 1 / 3))
    for k in ref:
        np.testing.assert_allclose(out[k], ref[k], rtol=TOL, atol=TOL, err_msg=k)
    # the mixture terms matter: without ∇log q the means would be elsewhere
    for k in range(3):
        plain_S = Ss[k] + rho * hess(ms[k])
        plain_m = ms[k] - rho * np.linalg.solve(plain_S, grad(ms[k]))
        assert np.abs(out[f"m{k + 1}"] - plain_m).max() > 1e-2


def test_permuting_the_components_permutes_the_update():
    mod = compiled(FULL)
    ms, Ss = full_state()
    rho = 0.3
    perm = [2, 0, 1]

    def run(order):
        st = mod.init(**{f"m{i + 1}": ms[k] for i, k in enumerate(order)},
                      **{f"S{i + 1}": Ss[k] for i, k in enumerate(order)})
        return mod.step(st, oracles={"grad": grad, "hess": hess}, rho=rho)
    a, b = run([0, 1, 2]), run(perm)
    for i, k in enumerate(perm):
        # the same arithmetic in a different order of the logsumexp terms: a few roundings
        np.testing.assert_allclose(b[f"m{i + 1}"], a[f"m{k + 1}"], rtol=1e-11, atol=1e-12)
        np.testing.assert_allclose(b[f"S{i + 1}"], a[f"S{k + 1}"], rtol=1e-11, atol=1e-12)


def test_only_free_components_are_instantiated_with_the_fixed_one_in_log_q():
    """Diagonal components are elementwise: coordinate i of the state is a 1-D mixture with weights
    (π₁, π₂, 1 − π₁ − π₂), component 2 fixed at N(mfix, 1/sfix)."""
    mod = compiled(DIAG)
    assert set(mod.STATE) == {"m1", "s1", "m3", "s3"}
    hp = dict(rho=0.35, pi1=0.25, pi2=0.45, mfix=0.2, sfix=1.5)
    w = np.array([hp["pi1"], hp["pi2"], 1 - hp["pi1"] - hp["pi2"]])
    m1, s1 = np.array([-1.2, 0.1, 0.9]), np.array([2.0, 3.0, 1.2])
    m3, s3 = np.array([1.1, -0.7, 2.0]), np.array([1.5, 0.8, 2.5])
    g1 = lambda t: np.sin(t) + t            # elementwise oracles
    h1 = lambda t: np.cos(t) + 1.0
    out = mod.step(mod.init(m1=m1, s1=s1, m3=m3, s3=s3), oracles={"grad": g1, "hess": h1}, **hp)
    for i in range(3):
        comps = [(m1[i], s1[i]), (hp["mfix"], hp["sfix"]), (m3[i], s3[i])]

        def logq(t):
            return special.logsumexp([np.log(wk) + stats.norm.logpdf(t[0], m, 1 / np.sqrt(s))
                                      for (m, s), wk in zip(comps, w)])
        for k, (m, s) in ((1, comps[0]), (3, comps[2])):
            gq, Hq = fd_grad_hess(logq, np.array([m]))
            s_new = s + hp["rho"] * (h1(m) + Hq[0, 0])
            m_new = m - hp["rho"] * (g1(m) + gq[0]) / s_new
            np.testing.assert_allclose(out[f"s{k}"][i], s_new, rtol=TOL, atol=TOL)
            np.testing.assert_allclose(out[f"m{k}"][i], m_new, rtol=TOL, atol=TOL)
    # the log q terms (including the fixed component's) matter: a plain Newton-like step is elsewhere
    plain = m1 - hp["rho"] * g1(m1) / (s1 + hp["rho"] * h1(m1))
    assert np.abs(out["m1"] - plain).max() > 1e-2

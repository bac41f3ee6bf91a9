"""Identity ``mixture_score`` (App. E, Eqs. 69-71): the gradient and Hessian of the mixture's log density at
θ = m_k through the responsibilities r_j(θ) = π_j q_j(θ)/q(θ):
∇log q = Σ_j r_j ∇log q_j, ∇²log q = Σ_j r_j(∇²log q_j + ∇log q_j ∇log q_jᵀ) − ∇log q ∇log qᵀ.

Checked numerically, independently of tests/unit/candidates/test_mixture.py (finite differences):

* the definitions the engine records (r_j_k, gq_k, Hq_k), evaluated, against torch autograd of
  log Σ_j π_j N(θ | m_j, S_j⁻¹) and the responsibilities against a softmax of scipy.stats log densities — for
  three scalar (mean-field) components and three 2-D full-covariance components with unequal weights;
* the generated numpy step of a two-component full-Gaussian mixture against Eq. 28 with the delta method
  written here, λ_k ← λ_k − ρ∇_{μ_k}[E_q ℓ − H(q)] with E_{q_k}[∇ log q] ≈ ∇log q(m_k) and
  E_{q_k}[∇²log q] ≈ ∇²log q(m_k) from autograd: S_k ← S_k + ρ(H(m_k) + ∇²log q(m_k)),
  m_k ← m_k − ρ S_k⁻¹(g(m_k) + ∇log q(m_k));
* components 40 standard deviations apart: the responsibilities underflow in exp but the log-sum-exp form keeps
  the step finite and equal to the separated one.
"""
import functools

import numpy as np
import scipy.special
import scipy.stats
import sympy as sp
import torch

from blr_derive import api
from blr_derive.families.symbolic import evaluate
from blr_derive.ir.common import toposort


@functools.lru_cache(maxsize=None)
def derived(base, K, weights):
    return api.derive(family={"mixture": base, "components": K, "weights": list(weights)},
                      approximations=["delta"], hyperparameters={"rho": 0.5}, name=f"msc_{base}_{K}")


def evaluated_defs(d, params):
    """Every definition of the record evaluated at the component parameters ``params`` (name -> value)."""
    D = d.record
    syms = {str(s): s for _, e in D.defs for s in e.free_symbols}
    dims = {x for s in syms.values() if isinstance(s, sp.MatrixSymbol) for x in s.shape if x.is_Symbol}
    P = len(np.atleast_1d(next(iter(params.values()))))
    env = {syms[k]: v for k, v in params.items()}
    out = {}
    for sym, expr in toposort(list(D.defs)):
        v = evaluate(expr, env, {x: P for x in dims})
        env[sym] = v.ravel() if np.ndim(v) == 2 and v.shape[1] == 1 else v
        out[str(sym)] = env[sym]
    return out


def torch_score(weights, means, precs):
    """∇ log q and ∇² log q by autograd of log Σ_j π_j N(θ | m_j, S_j⁻¹)."""
    def logq(t):
        terms = [np.log(w) + torch.distributions.MultivariateNormal(
            torch.tensor(np.asarray(m, dtype=float)), precision_matrix=torch.tensor(np.asarray(S, dtype=float)))
            .log_prob(t) for w, m, S in zip(weights, means, precs)]
        return torch.logsumexp(torch.stack(terms), 0)

    def at(x):
        t = torch.tensor(np.asarray(x, dtype=float))
        return (torch.autograd.functional.jacobian(logq, t).numpy(), torch.autograd.functional.hessian(logq, t).numpy())
    return at


def responsibilities(weights, means, precs, x):
    a = [np.log(w) + scipy.stats.multivariate_normal(m, np.linalg.inv(S)).logpdf(x)
         for w, m, S in zip(weights, means, precs)]
    return scipy.special.softmax(a)


def test_three_scalar_components_against_autograd():
    d = derived("gaussian_diag", 3, (0.2, 0.5))
    w = [0.2, 0.5, 0.3]
    m, s = [-0.8, 0.1, 0.9], [2.0, 5.0, 1.5]                  # overlapping: every responsibility matters
    vals = evaluated_defs(d, {f"m{j + 1}": m[j] for j in range(3)} | {f"s{j + 1}": s[j] for j in range(3)})
    score = torch_score(w, [[x] for x in m], [[[x]] for x in s])
    for k in range(3):
        g, H = score([m[k]])
        r = responsibilities(w, [[x] for x in m], [[[x]] for x in s], [m[k]])
        got_r = [vals[f"r_{j + 1}_{k + 1}"] for j in range(3)]
        assert min(got_r) > 1e-3
        # 30-digit evaluation of the record against double-precision autograd/scipy: ~1e-15 relative
        np.testing.assert_allclose(got_r, r, rtol=1e-12)
        np.testing.assert_allclose(vals[f"gq{k + 1}"], g[0], rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(vals[f"Hq{k + 1}"], H[0, 0], rtol=1e-12, atol=1e-13)


def full_components(seed, K=3):
    rng = np.random.default_rng(seed)
    means, precs = [], []
    for _ in range(K):
        B = rng.normal(size=(2, 2))
        means.append(rng.normal(size=2) * 0.6)
        precs.append(B @ B.T / 3 + 0.8 * np.eye(2))
    return means, precs


def test_three_full_components_against_autograd():
    d = derived("gaussian_full", 3, (0.25, 0.35))
    w = [0.25, 0.35, 0.4]
    means, precs = full_components(5)
    params = {f"m{j + 1}": means[j] for j in range(3)} | {f"S{j + 1}": precs[j] for j in range(3)}
    vals = evaluated_defs(d, params)
    score = torch_score(w, means, precs)
    for k in range(3):
        g, H = score(means[k])
        r = responsibilities(w, means, precs, means[k])
        got_r = [vals[f"r_{j + 1}_{k + 1}"] for j in range(3)]
        assert min(got_r) > 1e-3
        np.testing.assert_allclose(got_r, r, rtol=1e-12)
        np.testing.assert_allclose(vals[f"gq{k + 1}"], g, rtol=1e-12, atol=1e-13)
        np.testing.assert_allclose(vals[f"Hq{k + 1}"], H, rtol=1e-12, atol=1e-13)


A_MAT = np.array([[1.0, 0.4], [0.2, -0.8], [0.6, 0.1]])


def grad(t):
    return A_MAT.T @ np.tanh(A_MAT @ t) + 0.4 * t


def hess(t):
    return A_MAT.T @ np.diag(1 - np.tanh(A_MAT @ t) ** 2) @ A_MAT + 0.4 * np.eye(2)


def eq28_with_delta(w, means, precs, rho):
    """The mixture BLR step (Eq. 28; Eqs. 67-68 and Bonnet/Price with E_{q_k} at m_k) written here."""
    score = torch_score(w, means, precs)
    out = []
    for m, S in zip(means, precs):
        gq, Hq = score(m)
        S_new = S + rho * (hess(m) + Hq)
        out.append((m - rho * np.linalg.solve(S_new, grad(m) + gq), S_new))
    return out


def test_generated_mixture_step_is_eq_28_with_autograd_scores():
    mod = derived("gaussian_full", 2, (0.3,)).compile("numpy")
    means, precs = full_components(7, K=2)
    precs = [S + 2 * np.eye(2) for S in precs]               # keep S_k + ρ(H + ∇²log q) positive definite
    rho = 0.4
    st = mod.step(mod.init(m1=means[0], S1=precs[0], m2=means[1], S2=precs[1]),
                  oracles={"grad": grad, "hess": hess}, rho=rho)
    ref = eq28_with_delta([0.3, 0.7], means, precs, rho)
    r = responsibilities([0.3, 0.7], means, precs, means[0])
    assert min(r) > 1e-3                                      # the entropy term couples the components
    for k, (m_ref, S_ref) in enumerate(ref, 1):
        # autograd against the generated closed form, then one 2×2 solve of condition < 1e2: ~1e-14
        np.testing.assert_allclose(st[f"S{k}"], S_ref, rtol=1e-12, atol=1e-12)
        np.testing.assert_allclose(st[f"m{k}"], m_ref, rtol=1e-12, atol=1e-12)


def test_far_apart_components_stay_finite_and_become_separated():
    mod = derived("gaussian_full", 2, (0.3,)).compile("numpy")
    m1, m2 = np.array([-20.0, 0.0]), np.array([20.0, 0.0])       # 40 standard deviations apart
    S1, S2 = np.eye(2), 2 * np.eye(2)
    st = mod.step(mod.init(m1=m1, S1=S1, m2=m2, S2=S2), oracles={"grad": grad, "hess": hess}, rho=0.3)
    # r_j(m_k) ≈ e^{-800} = 0 in double precision: ∇log q(m_k) = 0, ∇²log q(m_k) = −S_k exactly (Eq. 74),
    # so each component takes the online Newton step of Eq. 12
    for m, S, k in ((m1, S1, 1), (m2, S2, 2)):
        S_ref = 0.7 * S + 0.3 * hess(m)
        assert np.all(np.isfinite(st[f"m{k}"])) and np.all(np.isfinite(st[f"S{k}"]))
        np.testing.assert_allclose(st[f"S{k}"], S_ref, rtol=1e-13, atol=1e-14)
        np.testing.assert_allclose(st[f"m{k}"], m - 0.3 * np.linalg.solve(S_ref, grad(m)), rtol=1e-13, atol=1e-14)

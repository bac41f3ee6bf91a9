"""Rule ``stationarity`` (Sec. 5.2, the M-step; Eqs. 55-56): a delta block q = N(θ_t, I) with ρ = 1 jumps to the
stationary point ∇_θ E_{q(z)}[ℓ](θ) = 0 of its expected loss, the blocks updated before it at their new values.

Checked on EM for a 3-component Gaussian mixture (catalog/em_gmm_unrolled.yaml; the local block z is the E-step), with
numbers and without the engine's algebra:

* the responsibilities r_nk the step returns against Bayes' rule with scipy's multivariate normal densities at
  the old parameters;
* the expected complete-data loss Q(θ) = −Σ_n Σ_k r_nk [log π_k + ½ log det L_k − ½(y_n − m_k)ᵀL_k(y_n − m_k)],
  written here with those responsibilities (π₃ = 1 − π₁ − π₂): its gradient by central differences in every
  parameter (symmetric perturbations of L_k) vanishes at the generated M-step output, while it is O(10) at the
  old parameters; Q is also no smaller in any perturbed direction (a minimum of the expected loss);
* EM's monotonicity that follows: the data log-likelihood does not decrease over the steps.
"""
import functools

import numpy as np
from scipy import special, stats

from blr_derive import api

K, P = 3, 2


@functools.lru_cache(maxsize=None)
def module():
    return api.derive("em_gmm_unrolled").compile("numpy")


def data():
    rng = np.random.default_rng(3)
    centers = np.array([[0.0, 0.0], [4.0, 1.0], [-2.0, 4.0]])
    Y = np.vstack([rng.normal(size=(n, P)) @ np.array([[1.0, 0.3], [0.0, 0.7]]) + c
                   for n, c in zip((20, 15, 12), centers)])
    state = dict(pi1=0.25, pi2=0.4, m1=np.array([0.5, 0.5]), m2=np.array([3.0, 0.0]), m3=np.array([-1.0, 3.0]),
                 L1=np.eye(2), L2=np.array([[2.0, 0.3], [0.3, 1.0]]), L3=np.eye(2) * 0.5)
    return Y, state


def weights(st):
    return np.array([st["pi1"], st["pi2"], 1 - st["pi1"] - st["pi2"]])


def log_joint(Y, st):
    """log π_k + log N(y_n | m_k, L_k⁻¹), shape (N, K)."""
    return np.stack([np.log(weights(st)[k]) + stats.multivariate_normal(st[f"m{k + 1}"],
                                                                        np.linalg.inv(st[f"L{k + 1}"])).logpdf(Y)
                     for k in range(K)], 1)


def responsibilities(Y, st):
    lj = log_joint(Y, st)
    return np.exp(lj - special.logsumexp(lj, axis=1, keepdims=True))


def Q(Y, r, st):
    """Expected complete-data loss (negative log joint up to constants) under the responsibilities r."""
    total = 0.0
    w = weights(st)
    for k in range(K):
        L, m = st[f"L{k + 1}"], st[f"m{k + 1}"]
        d = Y - m
        quad = np.einsum("ni,ij,nj->n", d, L, d)
        total -= np.sum(r[:, k] * (np.log(w[k]) + 0.5 * np.linalg.slogdet(L)[1] - 0.5 * quad))
    return total


def directions(st):
    """Unit perturbations of every free coordinate (π₁, π₂, entries of m_k, symmetric entries of L_k)."""
    out = []
    for name in ("pi1", "pi2"):
        out.append((name, 1.0))
    for k in range(1, K + 1):
        for i in range(P):
            e = np.zeros(P)
            e[i] = 1.0
            out.append((f"m{k}", e))
        for i in range(P):
            for j in range(i, P):
                E = np.zeros((P, P))
                E[i, j] = E[j, i] = 1.0
                out.append((f"L{k}", E))
    return out


def moved(st, name, d, h):
    new = dict(st)
    new[name] = st[name] + h * d
    return new


def grad_Q(Y, r, st, h=1e-6):
    return np.array([(Q(Y, r, moved(st, n, d, h)) - Q(Y, r, moved(st, n, d, -h))) / (2 * h)
                     for n, d in directions(st)])


def test_e_step_responsibilities_are_bayes_rule():
    mod = module()
    Y, st = data()
    out = mod.step(mod.init(**st), data={"y": Y})
    r = responsibilities(Y, st)
    # logsumexp of a few log-densities on both sides: 1e-12 absolute on probabilities
    np.testing.assert_allclose(out["z_p1"], r[:, 0], rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["z_p2"], r[:, 1], rtol=0, atol=1e-12)


def test_m_step_output_is_a_stationary_point_of_the_expected_loss():
    mod = module()
    Y, st = data()
    r = responsibilities(Y, st)
    out = mod.step(mod.init(**st), data={"y": Y})
    new = {k: np.asarray(out[k], float) if np.ndim(out[k]) else float(out[k]) for k in st}
    g_new, g_old = grad_Q(Y, r, new), grad_Q(Y, r, st)
    # central differences of Q (|Q| ≈ 1e2) with h = 1e-6: rounding ~1e-16·1e2/1e-6 ≈ 1e-8, truncation ~1e-10;
    # at the old parameters the gradient is O(10), so 1e-6 separates "stationary" from "not" by 7 orders
    assert np.abs(g_new).max() < 1e-6, g_new
    assert np.abs(g_old).max() > 1.0
    # a minimum, not just a stationary point: Q grows along every coordinate direction and random directions
    q0 = Q(Y, r, new)
    rng = np.random.default_rng(0)
    for n, d in directions(new):
        assert Q(Y, r, moved(new, n, d, 1e-3)) > q0 and Q(Y, r, moved(new, n, d, -1e-3)) > q0
    for _ in range(10):
        pert = {}
        for n, v in new.items():
            d = rng.normal(size=np.shape(v))
            pert[n] = v + 1e-2 * ((d + d.T) / 2 if np.ndim(v) == 2 else d)
        assert Q(Y, r, pert) > q0


def test_em_steps_never_decrease_the_log_likelihood():
    mod = module()
    Y, st = data()
    state = mod.init(**st)
    ll = [special.logsumexp(log_joint(Y, st), axis=1).sum()]
    for _ in range(8):
        state = mod.step(state, data={"y": Y})
        cur = {k: state[k] for k in st}
        ll.append(special.logsumexp(log_joint(Y, cur), axis=1).sum())
    assert all(b >= a - 1e-9 for a, b in zip(ll, ll[1:])), ll
    assert ll[-1] - ll[0] > 1.0

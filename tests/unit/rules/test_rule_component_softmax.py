"""Rule ``component_softmax`` (Sec. 1.2, overcomplete categorical; Eqs. 56, 58): the categorical over a recipe's
components, local to the plate rows, sets λ_k to minus the coefficient of z_k in the factors averaged over the
other blocks, and its probabilities to ∂A/∂λ_k = exp(λ_k − log Σ_j exp λ_j).

Checked on catalog/em_gmm.yaml with numbers only: the responsibilities the step returns against Bayes' rule in log
space with scipy's multivariate normal log-densities (1e-12), also when the log-densities are of order −1e4 (a
plain softmax of exp(λ) underflows to 0/0 there), and they are a distribution over the components per row.
"""
import numpy as np
from scipy import special, stats

from conftest import load_generated


def bayes(Y, w, m, L):
    logd = np.stack([np.log(wk) + stats.multivariate_normal(mk, np.linalg.inv(Lk)).logpdf(Y)
                     for wk, mk, Lk in zip(w, m, L)], axis=1)
    return np.exp(logd - special.logsumexp(logd, axis=1, keepdims=True)), logd


def test_responsibilities_are_bayes_rule_in_log_space():
    mod = load_generated("em_gmm")
    rng = np.random.default_rng(3)
    K, P = 5, 3
    Y = rng.normal(scale=3.0, size=(400, P))
    w = rng.dirichlet(np.ones(K))
    m = rng.normal(scale=3.0, size=(K, P))
    A = rng.normal(size=(K, P, P))
    L = np.einsum("kab,kcb->kac", A, A) + np.eye(P)
    out = mod.step(mod.init(pi=w, m=m, L=L), data={"y": Y})
    r, _ = bayes(Y, w, m, L)
    assert out["z_p"].shape == (400, K)
    np.testing.assert_allclose(out["z_p"], r, rtol=0, atol=1e-12)
    np.testing.assert_allclose(out["z_p"].sum(axis=1), 1.0, rtol=0, atol=1e-13)


def test_responsibilities_far_in_the_tails_do_not_underflow():
    """Rows ~100 standard deviations from every component: every λ_k is below −1e3, so exp(λ_k) is 0 in float64;
    the log-sum-exp form still gives Bayes' rule."""
    mod = load_generated("em_gmm")
    K, P = 3, 2
    w = np.array([0.2, 0.3, 0.5])
    m = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, -1.0]])
    L = np.array([np.eye(P)] * K)
    # a few rows far out in each component's direction (each component keeps a non-degenerate M-step)
    offsets = np.array([[0.0, 0.0], [1.0, 0.5], [-0.5, 1.0], [0.3, -1.2]])
    Y = np.concatenate([100 * mk / np.linalg.norm(mk) + offsets for mk in m])
    out = mod.step(mod.init(pi=w, m=m, L=L), data={"y": Y})
    r, logd = bayes(Y, w, m, L)
    assert logd.max() < -1000 and np.all(np.exp(logd) == 0)        # a plain softmax would be 0/0
    np.testing.assert_allclose(out["z_p"], r, rtol=1e-10, atol=1e-300)
    assert np.all(np.isfinite(out["z_p"])) and np.allclose(out["z_p"].sum(axis=1), 1.0)

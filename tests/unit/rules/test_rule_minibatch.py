"""minibatch (Eq. 34): the oracles return mini-batch MEANS of per-example gradients/Hessians; the BLR needs the
SUM over the N examples of the data set, so both are scaled by N.

Checked numerically: the step WITH the rule on (g, H) equals the step WITHOUT it on (N·g, N·H) (delta method and
Monte Carlo), and with the whole data set as the batch it is the full-batch BLR written by hand from Σ_i ∇ℓ_i,
Σ_i ∇²ℓ_i.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

# Same products and sums grouped differently by the code generator: agreement to a few ulps; 1e-12 relative is a
# wide margin, while a missing (or doubled) factor N changes the result by O(1).
RTOL = 1e-12
N = 50.0


@functools.lru_cache(maxsize=None)
def compiled(with_rule=True, mc=False):
    approx = [{"monte_carlo": {"samples": "S"}} if mc else "delta"]
    approx += [{"minibatch": {"size": "N"}}] if with_rule else []
    hp = {"lr": 0.3, "N": N}
    if mc:
        hp["S"] = {"default": 2, "type": "int"}
    text = yaml.safe_dump({"name": "minibatch_test", "family": "gaussian_diag", "loss": "abstract",
                           "learning_rate": "lr", "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


def logistic_data(n=int(N), d=4, seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(n, d))
    y = (X @ rng.normal(size=d) + 0.5 * rng.normal(size=n) > 0).astype(float)
    return X, y


def per_example(theta, X, y):
    """Per-example gradients and diagonal Hessians of the logistic loss at θ (one row per example)."""
    p = 1 / (1 + np.exp(-X @ theta))
    return (p - y)[:, None] * X, (p * (1 - p))[:, None] * X ** 2


def test_the_rule_scales_gradient_and_hessian_by_n():
    with_, without = compiled(), compiled(with_rule=False)
    X, y = logistic_data()
    grad = lambda th: per_example(th, X[:10], y[:10])[0].mean(0)
    hess = lambda th: per_example(th, X[:10], y[:10])[1].mean(0)
    m0, s0 = np.zeros(4), np.full(4, 5.0)
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(4):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, lr=0.3, N=N)
        b = without.step(b, oracles={"grad": lambda th: N * grad(th), "hess": lambda th: N * hess(th)}, lr=0.3)
        for k in ("m", "s"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=0)
    assert np.abs(a["m"]).max() > 1e-2


def test_the_whole_data_set_as_batch_is_the_full_batch_blr_on_the_summed_loss():
    mod = compiled()
    X, y = logistic_data()
    oracles = {"grad": lambda th: per_example(th, X, y)[0].mean(0), "hess": lambda th: per_example(th, X, y)[1].mean(0)}
    m, s = np.zeros(4), np.full(4, 5.0)
    state = mod.init(m=m, s=s)
    for _ in range(4):
        G, Hd = per_example(m, X, y)
        s = 0.7 * s + 0.3 * Hd.sum(0)                 # Eq. 37 on ℓ̄ = Σ_i ℓ_i
        m = m - 0.3 * G.sum(0) / s
        state = mod.step(state, oracles=oracles, lr=0.3, N=N)
        # mean×N against a sum of 50 terms: round-off ~50 ulps at most
        np.testing.assert_allclose(state["s"], s, rtol=1e-12, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=1e-12, atol=1e-15)


def test_under_monte_carlo_the_sample_averages_are_scaled_by_n():
    with_, without = compiled(mc=True), compiled(with_rule=False, mc=True)
    X, y = logistic_data()
    grad = lambda th: per_example(th, X[:10], y[:10])[0].mean(0)
    hess = lambda th: per_example(th, X[:10], y[:10])[1].mean(0)
    m0, s0 = np.full(4, 0.1), np.full(4, 20.0)
    a = with_.step(with_.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, rng=np.random.default_rng(3),
                   lr=0.3, N=N, S=3)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": lambda th: N * grad(th),
                                                         "hess": lambda th: N * hess(th)},
                     rng=np.random.default_rng(3), lr=0.3, S=3)
    for k in ("m", "s"):
        np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=0)

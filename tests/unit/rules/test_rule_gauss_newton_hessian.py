"""gauss_newton_hessian (Eq. 45): diag ∇²ℓ ≈ mean_i (∇ℓ_i)², the mean over the mini-batch of SQUARED PER-EXAMPLE
gradients, asked from an oracle 'ggn' (at the mean under the delta method, at each sample under Monte Carlo).

Checked numerically on a logistic regression whose per-example gradients are written by hand: the step WITH the rule
is the BLR step with H := mean_i G_i² (a hand reference, and the step WITHOUT the rule fed that Hessian), the Hessian
oracle is not asked for, and under Monte Carlo the ggn is evaluated at the same samples θ_k as the gradient.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

# The same few products/sums grouped differently: a few ulps apart; 1e-12 relative leaves a wide margin, whereas
# confusing mean_i G_i² with (mean_i G_i)² changes s by O(1) on this data (asserted below).
RTOL = 1e-12
M, D = 16, 4


@functools.lru_cache(maxsize=None)
def compiled(rule=True, mc=False):
    approx = [{"monte_carlo": {"samples": "S"}} if mc else "delta"] + (["gauss_newton_hessian"] if rule else [])
    hp = {"lr": 0.25}
    if mc:
        hp["S"] = {"default": 3, "type": "int"}
    text = yaml.safe_dump({"name": "ggn_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


def batch(seed=0):
    rng = np.random.default_rng(seed)
    X = rng.normal(size=(M, D))
    y = (X @ np.array([1.0, -2.0, 0.5, 0.0]) + 0.3 * rng.normal(size=M) > 0).astype(float)
    return X, y


def per_example_grads(theta, X, y):
    p = 1 / (1 + np.exp(-X @ theta))
    return (p - y)[:, None] * X                    # ∇ℓ_i of the logistic loss, one row per example


def oracles(X, y):
    def no_hessian(_):
        raise AssertionError("the rule replaces the Hessian oracle")
    return {"grad": lambda th: per_example_grads(th, X, y).mean(0),
            "ggn": lambda th: (per_example_grads(th, X, y) ** 2).mean(0), "hess": no_hessian}


def test_delta_method_uses_the_mean_squared_per_example_gradient():
    mod = compiled()
    assert set(mod.ORACLES) == {"grad", "ggn"}
    X, y = batch()
    m, s = np.zeros(D), np.full(D, 2.0)
    state = mod.init(m=m, s=s)
    for _ in range(5):
        G = per_example_grads(m, X, y)
        s = 0.75 * s + 0.25 * (G ** 2).mean(0)         # Eq. 37 with the Gauss-Newton Hessian of Eq. 45
        m = m - 0.25 * G.mean(0) / s
        state = mod.step(state, oracles=oracles(X, y), lr=0.25)
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-15)
    G = per_example_grads(m, X, y)
    assert np.abs((G ** 2).mean(0) - G.mean(0) ** 2).max() > 1e-2   # per-example squares, not the squared mean


def test_equals_the_plain_step_fed_the_ggn_as_hessian():
    with_, without = compiled(), compiled(rule=False)
    X, y = batch(1)
    o = oracles(X, y)
    m0, s0 = np.full(D, 0.2), np.full(D, 1.5)
    a = with_.step(with_.init(m=m0, s=s0), oracles=o, lr=0.25)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": o["grad"], "hess": o["ggn"]}, lr=0.25)
    np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=0)
    np.testing.assert_allclose(a["s"], b["s"], rtol=RTOL, atol=0)


def test_under_monte_carlo_the_ggn_is_taken_at_the_samples():
    mod = compiled(mc=True)
    X, y = batch(2)
    m0, s0, S = np.full(D, 0.3), np.full(D, 4.0), 3
    new = mod.step(mod.init(m=m0, s=s0), oracles=oracles(X, y), rng=np.random.default_rng(11), lr=0.25, S=S)
    ref = np.random.default_rng(11)                    # same draws, same order: θ_k = m + ε_k/√s
    thetas = [m0 + ref.standard_normal(D) / np.sqrt(s0) for _ in range(S)]
    g = np.mean([per_example_grads(th, X, y).mean(0) for th in thetas], 0)
    h = np.mean([(per_example_grads(th, X, y) ** 2).mean(0) for th in thetas], 0)
    s1 = 0.75 * s0 + 0.25 * h
    np.testing.assert_allclose(new["s"], s1, rtol=RTOL, atol=0)
    np.testing.assert_allclose(new["m"], m0 - 0.25 * g / s1, rtol=RTOL, atol=0)

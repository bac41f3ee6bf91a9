"""squared_gradient_hessian (Eqs. 38, 45): the Hessian is replaced by scale·ĝ∘ĝ, the squared gradient the update
currently sees; at samples of q (Monte Carlo) by scale·mean_k g(θ_k)², the mean of the per-sample squares.

Checked numerically: under the delta method the step WITH the rule on the gradient g equals the step WITHOUT it on
the Hessian scale·g² (and the Hessian oracle is no longer asked for); at samples it matches a hand-written reference
that draws the same ε; after weight_decay it squares the decayed gradient g + δm (Adam's coupled L2).
"""
import functools

import numpy as np
import yaml

from blr_derive import api

# Identical arithmetic up to the grouping of a few products: agreement to a few ulps; 1e-12 relative is a wide
# margin, and replacing g² by anything else (H, (mean g)², unscaled g²) changes s by O(1) here.
RTOL = 1e-12
C = 2.5          # the rule's 'scale'


@functools.lru_cache(maxsize=None)
def compiled(rule=True, mc=False, weight_decay=False):
    approx = [{"monte_carlo": {"samples": "S"}} if mc else "delta"]
    hp = {"lr": 0.2}
    if mc:
        hp["S"] = {"default": 4, "type": "int"}
    if weight_decay:
        approx.append({"weight_decay": {"coefficient": "wd"}})
        hp["wd"] = 0.5
    if rule:
        approx.append({"squared_gradient_hessian": {"scale": "c"}})
        hp["c"] = C
    text = yaml.safe_dump({"name": "sgh_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


def problem(seed=0, n=5):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), lambda x: a * (x - c) + 0.3 * np.sin(x)


def no_hessian(x):
    raise AssertionError("the Hessian oracle must not be called once the rule replaced it")


def test_delta_method_the_hessian_is_scale_times_the_squared_gradient():
    with_, without = compiled(), compiled(rule=False)
    assert tuple(with_.ORACLES) == ("grad",)
    m0, s0, grad = problem()
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(4):
        a = with_.step(a, oracles={"grad": grad, "hess": no_hessian}, lr=0.2, c=C)
        b = without.step(b, oracles={"grad": grad, "hess": lambda x: C * grad(x) ** 2}, lr=0.2)
        for k in ("m", "s"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=0)


def test_at_samples_the_hessian_is_the_mean_of_the_per_sample_squares():
    mod = compiled(mc=True)
    m0, s0, grad = problem(1)
    S, lr = 4, 0.2
    new = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad}, rng=np.random.default_rng(5), lr=lr, c=C, S=S)
    # reference: θ_k = m + ε_k/√s with ε_k drawn in the same order from the same seed
    ref_rng = np.random.default_rng(5)
    gks = np.array([grad(m0 + ref_rng.standard_normal(m0.shape) / np.sqrt(s0)) for _ in range(S)])
    h = C * (gks ** 2).mean(0)
    s1 = (1 - lr) * s0 + lr * h
    m1 = m0 - lr * gks.mean(0) / s1
    np.testing.assert_allclose(new["s"], s1, rtol=RTOL, atol=0)
    np.testing.assert_allclose(new["m"], m1, rtol=RTOL, atol=0)
    # the mean of squares is not the square of the mean: the test tells the two apart
    assert np.abs(C * gks.mean(0) ** 2 - h).max() > 1e-2


def test_after_weight_decay_it_squares_the_decayed_gradient():
    """Rules compose in recipe order: weight_decay moved the gradient view to g + δm, so the rule uses (g + δm)²
    (and the δ added to the Hessian is dropped with the Hessian), as torch.optim.Adam's coupled L2 does."""
    mod = compiled(weight_decay=True)
    m0, s0, grad = problem(2)
    new = mod.step(mod.init(m=m0, s=s0), oracles={"grad": grad}, lr=0.2, wd=0.5, c=C)
    g = grad(m0) + 0.5 * m0
    s1 = 0.8 * s0 + 0.2 * C * g ** 2
    np.testing.assert_allclose(new["s"], s1, rtol=RTOL, atol=0)
    np.testing.assert_allclose(new["m"], m0 - 0.2 * g / s1, rtol=RTOL, atol=0)

"""scale_learning_rate (IVON's convention, not a BLR step): the mean's update m ← m − ρd uses the learning rate ρc
(ivon-opt's rescale_lr, c = h₀ + δ; Shen et al. 2024, Alg. 1), the other parameters keep ρ.

In the BLR (Eq. 6) one ρ updates every natural parameter; Eq. 36 already allows a separate rate per parameter, and
this rule rescales the mean's.  Checked numerically:

* the generated step equals the hand formula m − ρc·g/s_{t+1}, s_{t+1} = (1 − ρ)s + ρH (online Newton, Eq. 37,
  whose scale keeps the unscaled ρ);
* the step WITH the rule equals the step WITHOUT it on the gradient oracle c·g (the scale does not see g);
* the catalog's IVON equals a hand-written IVON step (one sample, Price's estimator), with rescale_lr on and off,
  and IVON(rescale_lr, ρ) equals IVON(no rescale, ρ(h₀ + δ)) exactly;
* a factor 1 and ``when`` false are the update without the rule, bit for bit.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

# Deterministic identities in float64 (the same closed forms, products grouped differently: ρc·g against ρ·(cg),
# one or two roundings of ~1e-16): 1e-12 relative is a wide margin, while a wrong factor is an O(1) change.
RTOL = 1e-12


@functools.lru_cache(maxsize=None)
def compiled(with_rule=True):
    approx = ["delta"] + ([{"scale_learning_rate": {"factor": "c", "when": "flag"}}] if with_rule else [])
    hp = {"lr": 0.1, **({"c": 2.0, "flag": True} if with_rule else {})}
    text = yaml.safe_dump({"name": "slr_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


@functools.lru_cache(maxsize=None)
def ivon():
    return api.derive("ivon").compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess


def test_hand_formula_scaled_mean_rate():
    mod = compiled()
    m0, s0, grad, hess = problem(1)
    lr, c = 0.2, 0.35
    state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
    for _ in range(8):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=lr, c=c, flag=True)
        s = (1 - lr) * s + lr * hess(m)
        m = m - lr * c * grad(m) / s
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_with_the_rule_equals_without_it_on_a_scaled_gradient():
    with_, without = compiled(), compiled(with_rule=False)
    m0, s0, grad, hess = problem(2)
    lr, c = 0.2, 3.0
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(8):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, lr=lr, c=c, flag=True)
        b = without.step(b, oracles={"grad": lambda x: c * grad(x), "hess": hess}, lr=lr)
        for k in ("m", "s"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=1e-14)


def test_a_unit_factor_and_a_false_condition_are_the_update_without_the_rule():
    with_, without = compiled(), compiled(with_rule=False)
    m0, s0, grad, hess = problem(3)
    o = {"grad": grad, "hess": hess}
    one = off = with_.init(m=m0, s=s0)
    b = without.init(m=m0, s=s0)
    for _ in range(5):
        one = with_.step(one, oracles=o, lr=0.2, c=1.0, flag=True)     # 1.0·ρ = ρ exactly
        off = with_.step(off, oracles=o, lr=0.2, c=3.0, flag=False)
        b = without.step(b, oracles=o, lr=0.2)
        for k in ("m", "s"):
            np.testing.assert_array_equal(one[k], b[k])
            np.testing.assert_array_equal(off[k], b[k])


def ivon_by_hand(m, h, mom, t, eps, grad, lr, ess, hess_init, beta1, beta2, wd, rescale):
    """One IVON step with one sample, Price's estimator ĥ = g·ε/σ, no clipping (Shen et al. 2024, Alg. 1)."""
    sigma = 1.0 / np.sqrt(ess * (h + wd))
    g = grad(m + sigma * eps)
    h_hat = g * eps / sigma
    mom = beta1 * mom + (1 - beta1) * g
    h = beta2 * h + (1 - beta2) * h_hat + 0.5 * (1 - beta2) ** 2 * (h - h_hat) ** 2 / (h + wd)
    mhat = mom / (1 - beta1 ** t)
    m = m - lr * (hess_init + wd if rescale else 1.0) * (mhat + wd * m) / (h + wd)
    return m, h, mom


def ivon_problem():
    rng = np.random.default_rng(4)
    n = 6
    A, c = rng.uniform(0.5, 2.0, size=n), rng.normal(size=n)
    grad = lambda th: A * (th - c) + 0.3 * np.sin(th)
    hp = dict(lr=0.1, ess=30.0, hess_init=0.4, beta1=0.9, beta2=0.95, weight_decay=2e-2, mc_samples=1)
    return rng.normal(size=n), grad, hp


def test_catalog_ivon_equals_ivon_by_hand_with_and_without_rescaling():
    mod = ivon()
    m0, grad, hp = ivon_problem()
    finals = []
    for rescale in (True, False):
        state = mod.init(hyperparameters=hp, m=m0)
        m, h, mom = m0.copy(), np.full(m0.shape, hp["hess_init"]), np.zeros(m0.shape)
        for t in range(1, 11):
            eps = np.random.default_rng(200 + t).standard_normal(m0.shape)
            state = mod.step(state, oracles={"grad": grad}, rng=np.random.default_rng(200 + t), rescale_lr=rescale,
                             **hp)
            m, h, mom = ivon_by_hand(m, h, mom, t, eps, grad, hp["lr"], hp["ess"], hp["hess_init"], hp["beta1"],
                                     hp["beta2"], hp["weight_decay"], rescale)
            # h goes through s = ess(h + δ) and back: a few roundings relative to h + δ
            np.testing.assert_allclose(state["h"], h, rtol=RTOL, atol=1e-14)
            np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)
        finals.append(state["m"])
    assert np.abs(finals[0] - finals[1]).max() > 1e-2       # c = h₀ + δ = 0.42 really changed the trajectory


def test_ivon_rescaled_equals_ivon_at_the_rescaled_learning_rate():
    mod = ivon()
    m0, grad, hp = ivon_problem()
    a = b = mod.init(hyperparameters=hp, m=m0)
    for t in range(10):
        a = mod.step(a, oracles={"grad": grad}, rng=np.random.default_rng(t), rescale_lr=True, **hp)
        b = mod.step(b, oracles={"grad": grad}, rng=np.random.default_rng(t), rescale_lr=False,
                     **{**hp, "lr": hp["lr"] * (hp["hess_init"] + hp["weight_decay"])})
        # the learning rate of the precision is 1 − β₂, not ρ, so only the mean's rate changes
        for k in ("m", "h", "momentum"):
            np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=1e-14)

"""clip_step (IVON's convention, not a BLR step): the preconditioned mean step d of m ← m − ρd is clipped
elementwise to [−r, r] (ivon-opt's clip_radius; Shen et al. 2024, Alg. 1).

The BLR over the mean-field Gaussian (Eq. 6) gives m ← m − ρ ĝ/s_{t+1} (online Newton, Eq. 37; IVON, Sec. 4.4,
Eq. 46); the rule replaces d = ĝ/s_{t+1} by min(max(d, −r), r).  Checked numerically:

* the generated step equals the hand formula m − ρ·clip(g/s_{t+1}, −r, r), with some coordinates clipped on
  either side and some not;
* the step WITH the rule equals the step WITHOUT it on a transformed gradient oracle g' = s_{t+1}·clip(g/s_{t+1})
  (s_{t+1} does not depend on g under the delta method);
* the catalog's IVON with a finite clip radius equals a hand-written IVON step (Shen et al. 2024, Alg. 1, one
  sample, Price's Hessian estimator) at every step;
* r = ∞ is the update without the rule (and any radius above max|d| is the same program bit for bit);
  r = 0 freezes the mean exactly.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

# Deterministic identities in float64 (min/max are exact; the rest is the same closed form grouped differently,
# e.g. ρ·(g/s) against (ρg)/s, one rounding of ~1e-16): 1e-12 relative is a wide margin, while a missed or
# misplaced clip is an O(1) change of the clipped coordinates here.
RTOL = 1e-12


@functools.lru_cache(maxsize=None)
def compiled(with_rule=True):
    approx = ["delta"] + ([{"clip_step": {"radius": "r"}}] if with_rule else [])
    hp = {"lr": 0.1, **({"r": {"default": float("inf"), "allow_infinite": True}} if with_rule else {})}
    text = yaml.safe_dump({"name": "clip_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)
    return api.derive(text).compile("numpy")


@functools.lru_cache(maxsize=None)
def ivon():
    return api.derive("ivon").compile("numpy")


def problem(seed=0, n=8):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = 3.0 * rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return rng.normal(size=n), rng.uniform(0.5, 1.5, size=n), grad, hess


def test_hand_formula_clipped_step():
    mod = compiled()
    m0, s0, grad, hess = problem(1)
    lr, r = 0.3, 0.8
    state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
    clipped_hi = clipped_lo = free = 0
    for _ in range(6):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=lr, r=r)
        s = (1 - lr) * s + lr * hess(m)
        d = grad(m) / s
        clipped_hi += np.sum(d > r)
        clipped_lo += np.sum(d < -r)
        free += np.sum(np.abs(d) < r)
        m = m - lr * np.clip(d, -r, r)
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)
    assert clipped_hi > 0 and clipped_lo > 0 and free > 0       # every case of the clip was exercised


def test_with_the_rule_equals_without_it_on_a_clipped_gradient():
    with_, without = compiled(), compiled(with_rule=False)
    m0, s0, grad, hess = problem(2)
    lr, r = 0.3, 0.5
    s1 = (1 - lr) * s0 + lr * hess(m0)
    g_clip = lambda x: s1 * np.clip(grad(x) / s1, -r, r)
    assert np.any(np.abs(grad(m0) / s1) > r)
    a = with_.step(with_.init(m=m0, s=s0), oracles={"grad": grad, "hess": hess}, lr=lr, r=r)
    b = without.step(without.init(m=m0, s=s0), oracles={"grad": g_clip, "hess": hess}, lr=lr)
    for k in ("m", "s"):
        np.testing.assert_allclose(a[k], b[k], rtol=RTOL, atol=1e-14)


def test_an_infinite_radius_is_the_update_without_the_rule_and_zero_freezes_the_mean():
    with_, without = compiled(), compiled(with_rule=False)
    m0, s0, grad, hess = problem(3)
    o = {"grad": grad, "hess": hess}
    inf = big = without_ = with_.init(m=m0, s=s0)
    for _ in range(6):
        inf = with_.step(inf, oracles=o, lr=0.3, r=np.inf)
        big = with_.step(big, oracles=o, lr=0.3, r=1e300)
        without_ = without.step(without_, oracles=o, lr=0.3)
        np.testing.assert_array_equal(inf["m"], big["m"])             # no coordinate clipped: same operations
        np.testing.assert_array_equal(inf["s"], without_["s"])
        # ρ·(g/s) against (−g·ρ)/s: one rounding apart
        np.testing.assert_allclose(inf["m"], without_["m"], rtol=1e-15, atol=1e-16)
    frozen = with_.step(with_.init(m=m0, s=s0), oracles=o, lr=0.3, r=0.0)
    np.testing.assert_array_equal(frozen["m"], m0)


def ivon_by_hand(m, h, mom, t, eps, grad, lr, ess, hess_init, beta1, beta2, wd, clip, rescale=True, debias=True):
    """One IVON step with one sample, Price's estimator ĥ = g·ε/σ (Shen et al. 2024, Alg. 1)."""
    sigma = 1.0 / np.sqrt(ess * (h + wd))
    g = grad(m + sigma * eps)
    h_hat = g * eps / sigma
    mom = beta1 * mom + (1 - beta1) * g
    h = beta2 * h + (1 - beta2) * h_hat + 0.5 * (1 - beta2) ** 2 * (h - h_hat) ** 2 / (h + wd)
    mhat = mom / (1 - beta1 ** t) if debias else mom
    d = (mhat + wd * m) / (h + wd)
    m = m - lr * (hess_init + wd if rescale else 1.0) * np.clip(d, -clip, clip)
    return m, h, mom, int(np.sum(np.abs(d) > clip))


def test_catalog_ivon_with_a_clip_radius_equals_ivon_by_hand():
    mod = ivon()
    rng = np.random.default_rng(4)
    n = 8
    A, c = rng.uniform(0.5, 2.0, size=n), 3.0 * rng.normal(size=n)
    grad = lambda th: A * (th - c) + 0.3 * np.sin(th)
    hp = dict(lr=0.2, ess=20.0, hess_init=0.5, beta1=0.9, beta2=0.95, weight_decay=1e-2, mc_samples=1,
              clip_radius=1.0)
    m0 = rng.normal(size=n)
    state = mod.init(hyperparameters=hp, m=m0)
    m, h, mom = m0.copy(), np.full(n, 0.5), np.zeros(n)
    n_clipped = 0
    for t in range(1, 11):
        eps = np.random.default_rng(100 + t).standard_normal(n)
        state = mod.step(state, oracles={"grad": grad}, rng=np.random.default_rng(100 + t), **hp)
        m, h, mom, k = ivon_by_hand(m, h, mom, t, eps, grad, hp["lr"], hp["ess"], hp["hess_init"], hp["beta1"],
                                 hp["beta2"], hp["weight_decay"], hp["clip_radius"])
        n_clipped += k
        # h goes through s = ess(h + δ) and back: a few roundings of ~1e-16 relative to h + δ
        np.testing.assert_allclose(state["h"], h, rtol=1e-12, atol=1e-14)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)
        np.testing.assert_allclose(state["momentum"], mom, rtol=RTOL, atol=1e-15)
    assert 0 < n_clipped < 10 * n          # the clip was active on some coordinates, not on all

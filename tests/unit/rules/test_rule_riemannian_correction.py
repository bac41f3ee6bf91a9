"""riemannian_correction (improved BLR of Lin, Schmidt & Khan 2020, used by IVON; the precision update of Eq. 12 /
Eq. 37): s ← (1 − ρ)s + ρT + ρ²(s − T)²/(2s), i.e. with G = s − T the update s − ρG + ρ²G²/(2s).

Checked numerically:
* multi-step against the hand recurrence, on a non-convex loss whose Hessian at the mean is often negative;
* positivity (Lin et al.'s point): the corrected update equals ((s − ρG)² + s²)/(2s) ≥ s/2 > 0 — checked as a
  closed form and as a bound — where the plain update of the same inputs goes negative;
* it is the second-order retraction of the Fisher–Rao geometry: the geodesic of N(m, 1/s) in the precision
  (metric ∝ 1/s²) from s with velocity −G is s·exp(−ρG/s); the corrected update differs from it by
  s(ρG/s)³/6 + O(ρ⁴), so the error divided by ρ³ converges to |G|³/(6s²), while the plain update's error is of
  order ρ² (it divided by ρ² converges to G²/(2s));
* IVON (catalog `ivon`, Shen et al. 2024, Alg. 1): h ← β₂h + (1 − β₂)ĥ + ½(1 − β₂)²(h − ĥ)²/(h + δ) with ĥ the
  Stein estimate from the drawn samples, and h + δ stays positive over steps where ĥ is negative.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

# Same arithmetic as the hand formulas up to grouping: a few ulps (~1e-16 relative) per step, ≤ 8 steps.  1e-12
# relative is a wide margin; dropping the correction changes s by ρ²G²/(2s) = O(0.01-1) here.
RTOL = 1e-12


def recipe(rule=True):
    approx = ["delta"] + ([{"riemannian_correction": {"param": "s"}}] if rule else [])
    return yaml.safe_dump({"name": "rc_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": {"lr": 0.3}, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def grad(x):
    """ℓ(θ) = θ⁴/4 − θ² + 0.3 sin(3θ): two wells, negative curvature for |θ| ≲ 0.8."""
    return x ** 3 - 2 * x + 0.9 * np.cos(3 * x)


def hess(x):
    return 3 * x ** 2 - 2 - 2.7 * np.sin(3 * x)


def test_hand_recurrence_over_steps():
    mod = compiled(recipe())
    rng = np.random.default_rng(0)
    m, s = rng.uniform(-1.5, 1.5, size=8), rng.uniform(1.0, 4.0, size=8)
    state = mod.init(m=m, s=s)
    lr = 0.3
    seen_negative = False
    for _ in range(8):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=lr)
        T = hess(m)
        seen_negative |= bool((T < 0).any())
        s = (1 - lr) * s + lr * T + lr ** 2 * (s - T) ** 2 / (2 * s)
        m = m - lr * grad(m) / s
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)
        assert (state["s"] > 0).all()
    assert seen_negative                          # the correction was exercised where it matters


def test_keeps_the_precision_positive_where_the_plain_update_does_not():
    with_, without = compiled(recipe()), compiled(recipe(rule=False))
    m0 = np.array([0.0, 0.3, -0.2, 0.5])            # Hessians −2.00, −3.84, −0.35, −3.94
    s0 = np.array([0.5, 1.0, 0.2, 2.0])
    lr = 0.9
    oracles = {"grad": grad, "hess": hess}
    a = with_.step(with_.init(m=m0, s=s0), oracles=oracles, lr=lr)
    b = without.step(without.init(m=m0, s=s0), oracles=oracles, lr=lr)
    assert (b["s"] < 0).all()                        # the plain BLR step leaves the positive half-line
    G = s0 - hess(m0)
    # Lin et al.'s rewriting as a sum of squares (its own rounding, hence 1e-12 rather than bitwise)
    np.testing.assert_allclose(a["s"], ((s0 - lr * G) ** 2 + s0 ** 2) / (2 * s0), rtol=RTOL)
    assert (a["s"] >= s0 / 2).all()
    # the correction is exactly what separates the two
    np.testing.assert_allclose(a["s"] - b["s"], lr ** 2 * G ** 2 / (2 * s0), rtol=1e-12)


def test_second_order_retraction_of_the_fisher_rao_geodesic():
    with_, without = compiled(recipe()), compiled(recipe(rule=False))
    m0 = np.array([0.1, 0.9, -1.3])
    s0 = np.array([1.5, 3.0, 0.7])
    G = s0 - hess(m0)
    oracles = {"grad": grad, "hess": hess}
    for lr in (1e-2, 5e-3, 2.5e-3):
        geodesic = s0 * np.exp(-lr * G / s0)
        a = with_.step(with_.init(m=m0, s=s0), oracles=oracles, lr=lr)["s"]
        b = without.step(without.init(m=m0, s=s0), oracles=oracles, lr=lr)["s"]
        # Taylor: exp(x) = 1 + x + x²/2 + x³/6 + O(x⁴), x = −ρG/s (|x| ≤ 0.06 here), so the relative deviation
        # from the leading term is ≲ |x|/4 + rounding (1e-16·s/ρ³·1/|G|³ ≲ 1e-8): 5e-2·(ρ/1e-2) covers it.
        np.testing.assert_allclose((geodesic - a) / lr ** 3, -G ** 3 / (6 * s0 ** 2), rtol=5.0 * lr)
        np.testing.assert_allclose((geodesic - b) / lr ** 2, G ** 2 / (2 * s0), rtol=5.0 * lr)


# ---------------------------------------------------------------------------------------------- IVON

class Recorder:
    def __init__(self, f):
        self.f, self.calls = f, []

    def __call__(self, x):
        self.calls.append(np.array(x, copy=True))
        return self.f(x)


def test_ivon_hessian_update():
    mod = compiled("ivon")
    hp = dict(lr=0.05, ess=20.0, beta1=0.9, beta2=0.6, weight_decay=0.05, mc_samples=2, hess_approx="price",
              debias=True, rescale_lr=False)
    rng = np.random.default_rng(5)
    m, h = rng.uniform(-0.6, 0.6, size=6), np.full(6, 0.2)
    state = mod.init(hyperparameters=hp, m=m, h=h)
    ess, wd, b2 = hp["ess"], hp["weight_decay"], hp["beta2"]
    seen_negative = False
    for t in range(6):
        rec = Recorder(grad)
        new = mod.step(state, oracles={"grad": rec}, rng=np.random.default_rng(100 + t), **hp)
        th = np.array(rec.calls)
        # Stein/Price with σ² = 1/(ess(h + δ)): ĥ = mean_k ∇ℓ(θ_k)(θ_k − m)·ess(h + δ)   (IVON, Alg. 1)
        h_hat = (grad(th) * (th - state["m"])).mean(axis=0) * ess * (state["h"] + wd)
        seen_negative |= bool((h_hat < 0).any())
        h_ref = b2 * state["h"] + (1 - b2) * h_hat + 0.5 * (1 - b2) ** 2 * (state["h"] - h_hat) ** 2 / (state["h"] + wd)
        # h = s/ess − δ is read back from the stored precision s = ess(h + δ): a subtraction that loses up to
        # (s/ess)/|h| ulps; here |h| ≥ 0.07 and s/ess ≲ 20, so ≤ 300 ulps ≈ 7e-14 relative (observed: 1e-15).
        # 1e-11 is a wide margin; the uncorrected update differs by ½(1 − β₂)²(h − ĥ)²/(h + δ) = O(0.1-10) here.
        np.testing.assert_allclose(new["h"], h_ref, rtol=1e-11, atol=0)
        assert (new["h"] + wd > 0).all()
        assert (new["h"] + wd >= (state["h"] + wd) / 2 * (1 - 1e-12)).all()    # ≥ half the previous precision
        state = new
    assert seen_negative

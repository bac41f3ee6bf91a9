"""separate_learning_rates (Sec. 4.2, Eqs. 36-37): the BLR's single ρ of Eq. 37,
θ ← θ − ρ g/s_{t+1}, s ← (1 − ρ)s + ρH, becomes Eq. 36: θ ← θ − α g/s_{t+1}, s ← (1 − β)s + βH.

Checked numerically:
* multi-step against the hand recurrence of Eq. 36 (delta method, online Newton);
* as a pass: from the same state, the step WITH the rule (α for m, β for s) has the precision of the step WITHOUT
  it run at ρ = β, and a mean displacement (α/β) times that step's; with β = α it is the plain step bit for bit;
* a rate for the mean alone ({m: a}), and for both ({m: a, s: b}: the recipe's ρ then drops out of the
  generated module);
* under Monte Carlo (VOGN, Eq. 46, catalog `vogn`: Gauss–Newton Hessian, mini-batch scaling, prior precision)
  against a hand reference on the same samples, with the separate precision rate β.
"""
import functools

import numpy as np
import yaml

from blr_derive import api

# Same arithmetic up to grouping: a few ulps per step over ≤ 8 steps.  1e-12 relative is a wide margin; swapping
# the two rates or using one for both changes m or s by O(0.01-1) here.
RTOL, ATOL = 1e-12, 1e-14
ALPHA, BETA = 0.3, 0.05


def recipe(rates=None):
    hp = {"lr": ALPHA, "beta": BETA, "a": 0.2}
    approx = ["delta"] + ([{"separate_learning_rates": rates}] if rates else [])
    if not rates:
        hp = {"lr": ALPHA}
    return yaml.safe_dump({"name": "slr_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def compiled(text):
    return api.derive(text).compile("numpy")


def problem(seed=0, n=6):
    """A separable, non-quadratic loss: ∇ℓ(θ) = a(θ − c) + 0.3 sin θ, ∇²ℓ = a + 0.3 cos θ > 0."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess


def test_eq_36_by_hand():
    mod = compiled(recipe({"s": "beta"}))
    m, s, grad, hess = problem()
    state = mod.init(m=m, s=s)
    for _ in range(8):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=ALPHA, beta=BETA)
        s = (1 - BETA) * s + BETA * hess(m)                # Eq. 36, the scale's rate β
        m = m - ALPHA * grad(m) / s                        # the mean's rate α, with s_{t+1}
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=ATOL)


def test_pass_equals_the_plain_step_at_rho_beta_with_a_rescaled_mean_step():
    with_, without = compiled(recipe({"s": "beta"})), compiled(recipe())
    for seed in range(4):
        m0, s0, grad, hess = problem(seed)
        oracles = {"grad": grad, "hess": hess}
        a = with_.step(with_.init(m=m0, s=s0), oracles=oracles, lr=ALPHA, beta=BETA)
        b = without.step(without.init(m=m0, s=s0), oracles=oracles, lr=BETA)
        np.testing.assert_array_equal(a["s"], b["s"])             # the same expression at the same numbers
        # m_a − m = −α g/s', m_b − m = −β g/s': the displacements are in the ratio α/β (the subtraction m_b − m
        # loses ≲ |m|/|Δm| ≲ 1e3 ulps, hence 1e-12)
        np.testing.assert_allclose(a["m"] - m0, (ALPHA / BETA) * (b["m"] - m0), rtol=1e-12, atol=1e-14)


def test_equal_rates_are_the_plain_update_bit_for_bit():
    with_, without = compiled(recipe({"s": "beta"})), compiled(recipe())
    m0, s0, grad, hess = problem(5)
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(4):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, lr=ALPHA, beta=ALPHA)
        b = without.step(b, oracles={"grad": grad, "hess": hess}, lr=ALPHA)
        for k in ("m", "s"):
            np.testing.assert_array_equal(a[k], b[k])


def test_a_rate_for_the_mean_alone_and_for_both():
    only_m = compiled(recipe({"m": "a"}))
    both = compiled(recipe({"m": "a", "s": "beta"}))
    m0, s0, grad, hess = problem(6)
    oracles = {"grad": grad, "hess": hess}
    a = only_m.step(only_m.init(m=m0, s=s0), oracles=oracles, lr=ALPHA, a=0.2)
    s1 = (1 - ALPHA) * s0 + ALPHA * hess(m0)              # s keeps ρ = lr
    np.testing.assert_allclose(a["s"], s1, rtol=RTOL, atol=0)
    np.testing.assert_allclose(a["m"], m0 - 0.2 * grad(m0) / s1, rtol=RTOL, atol=ATOL)
    assert "lr" not in both.HYPERPARAMETERS                  # ρ no longer appears in the update at all
    b = both.step(both.init(m=m0, s=s0), oracles=oracles, a=0.2, beta=BETA)
    s1 = (1 - BETA) * s0 + BETA * hess(m0)
    np.testing.assert_allclose(b["s"], s1, rtol=RTOL, atol=0)
    np.testing.assert_allclose(b["m"], m0 - 0.2 * grad(m0) / s1, rtol=RTOL, atol=ATOL)


class Recorder:
    def __init__(self, f):
        self.f, self.calls = f, []

    def __call__(self, x):
        self.calls.append(np.array(x, copy=True))
        return self.f(x)


def test_vogn_precision_rate_under_monte_carlo():
    """VOGN (Eq. 46): s ← (1 − β)s + β(N·mean_k ggn(θ_k) + δ), m ← m − α(N·mean_k g(θ_k) + δm)/s_{t+1}."""
    mod = compiled("vogn")
    N, delta, alpha, beta = 50.0, 1.0, 0.1, 0.02
    rng = np.random.default_rng(8)
    m0, s0 = rng.normal(size=5), rng.uniform(20.0, 80.0, size=5)
    grad = lambda x: np.tanh(x) + 0.2 * x
    ggn = lambda x: np.tanh(x) ** 2 + 0.04
    rg, rh = Recorder(grad), Recorder(ggn)
    out = mod.step(mod.init(hyperparameters={"ess": N}, m=m0, s=s0), oracles={"grad": rg, "ggn": rh}, rng=np.random.default_rng(9), ess=N,
                   lr=alpha, beta=beta, prior_precision=delta, mc_samples=3)
    th = np.array(rg.calls)
    np.testing.assert_array_equal(np.array(rh.calls), th)         # both oracles at the same samples
    s1 = (1 - beta) * s0 + beta * (N * ggn(th).mean(axis=0) + delta)
    m1 = m0 - alpha * (N * grad(th).mean(axis=0) + delta * m0) / s1
    np.testing.assert_allclose(out["s"], s1, rtol=RTOL, atol=0)
    np.testing.assert_allclose(out["m"], m1, rtol=RTOL, atol=ATOL)

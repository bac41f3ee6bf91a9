"""infinity_norm (Adamax's convention, not a BLR step): the exponential smoothing of Eq. 36, p ← a·p + (1 − a)·x,
becomes its L∞ limit p ← max(a·p, x) (Kingma & Ba 2015, Sec. 7.1).

Checked numerically:

* online Newton (Eq. 37) with the scale's rate 1 − β (Eq. 36) and the rule: s ← max(βs, H), m ← m − ρg/s_{t+1},
  on a Hessian oracle that rises and falls (so both branches of the max are taken);
* the step WITH the rule equals the step WITHOUT it on a transformed Hessian oracle
  H' = (max(βs, H) − βs)/(1 − β), whose average is the maximum;
* the rule is the p → ∞ limit of smoothing in the L^p norm: (β^p s^p + (1 − β^p)H^p)^{1/p} → max(βs, H);
* the catalog's Adamax equals Kingma & Ba's Algorithm 2 (with torch's ε added to |g|) written by hand;
* ``when`` false is the plain average, bit for bit; a state that is not an average is a located error.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

# max is exact; the rest is the same closed form grouped differently (one division and one product for the
# transformed oracle): 1e-12 relative over ≤ 20 steps is a wide margin, while the plain average differs from the
# maximum by O(1) relative on these oracles.
RTOL = 1e-12


def recipe(approx, hp):
    return yaml.safe_dump({"name": "inf_norm_test", "family": "gaussian_diag", "loss": "abstract",
                           "learning_rate": "lr", "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def online_newton(with_rule=True):
    approx = ["delta", {"separate_learning_rates": {"s": "1 - beta"}}]
    hp = {"lr": 0.1, "beta": 0.9}
    if with_rule:
        approx.append({"infinity_norm": {"param": "s", "when": "flag"}})
        hp["flag"] = True
    return api.derive(recipe(approx, hp)).compile("numpy")


@functools.lru_cache(maxsize=None)
def adamax():
    return api.derive("adamax").compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    m0 = rng.normal(size=n)
    s0 = rng.uniform(1.0, 3.0, size=n)
    H_big, H_small = rng.uniform(4.0, 6.0, size=n), rng.uniform(0.2, 0.5, size=n)
    hess_at = lambda t: H_big if t % 5 < 2 else H_small
    grad = lambda x: 1.5 * (x - 0.3) + 0.2 * np.sin(3 * x)
    return m0, s0, grad, hess_at


def test_hand_formula_of_the_infinity_norm():
    mod = online_newton()
    m0, s0, grad, hess_at = problem(1)
    lr, beta = 0.3, 0.8
    state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
    took = set()
    for t in range(15):
        H = hess_at(t)
        state = mod.step(state, oracles={"grad": grad, "hess": lambda x, H=H: H}, lr=lr, beta=beta, flag=True)
        took |= {"decay" if v else "new" for v in (beta * s > H)}
        s = np.maximum(beta * s, H)
        m = m - lr * grad(m) / s
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)
    assert took == {"decay", "new"}


def test_with_the_rule_is_without_it_on_the_oracle_whose_average_is_the_max():
    with_, without = online_newton(), online_newton(with_rule=False)
    m0, s0, grad, hess_at = problem(2)
    lr, beta = 0.25, 0.85
    a = with_.init(m=m0, s=s0)
    for t in range(12):
        H = hess_at(t)
        H_t = (np.maximum(beta * a["s"], H) - beta * a["s"]) / (1 - beta)
        b = without.step(without.init(m=a["m"], s=a["s"]), oracles={"grad": grad, "hess": lambda x, H_t=H_t: H_t},
                         lr=lr, beta=beta)
        a = with_.step(a, oracles={"grad": grad, "hess": lambda x, H=H: H}, lr=lr, beta=beta, flag=True)
        np.testing.assert_allclose(a["s"], b["s"], rtol=RTOL, atol=1e-15)
        np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=1e-14)


def test_the_rule_is_the_limit_of_lp_smoothing():
    mod = online_newton()
    rng = np.random.default_rng(3)
    s, H, beta = rng.uniform(0.5, 3.0, size=50), rng.uniform(0.5, 3.0, size=50), 0.7
    out = mod.step(mod.init(m=np.zeros(50), s=s), oracles={"grad": lambda x: x, "hess": lambda x: H},
                   lr=0.1, beta=beta, flag=True)["s"]
    for p in (50, 500, 5000):
        # (β^p s^p + (1 − β^p) H^p)^{1/p} in log space (no overflow): it converges to the max as p grows
        lp = np.exp(np.logaddexp(p * np.log(beta * s), np.log1p(-beta ** p) + p * np.log(H)) / p)
        np.testing.assert_allclose(lp, out, rtol=np.log(2) / p + 1e-12)
    assert np.all(np.abs(((1 - beta) * H + beta * s) - out) > 0) and np.any(beta * s > H) and np.any(beta * s < H)


def test_catalog_adamax_is_kingma_and_ba_algorithm_2():
    mod = adamax()
    rng = np.random.default_rng(4)
    m0, a_, c = rng.normal(size=8), rng.uniform(0.5, 2.0, size=8), rng.normal(size=8)
    grad = lambda x: a_ * (x - c) + 0.3 * np.sin(x)
    hp = dict(lr=0.05, betas=(0.8, 0.95), eps=1e-4, weight_decay=0.02)
    b1, b2 = hp["betas"]
    state = mod.init(m=m0)
    m, u, s = m0.copy(), np.zeros(8), np.zeros(8)
    for t in range(1, 21):
        state = mod.step(state, oracles={"grad": grad}, **hp)
        g = grad(m) + hp["weight_decay"] * m
        u = b1 * u + (1 - b1) * g
        s = np.maximum(b2 * s, np.abs(g) + hp["eps"])
        m = m - hp["lr"] / (1 - b1 ** t) * u / s
        for k, ref in (("u", u), ("s", s), ("m", m)):
            np.testing.assert_allclose(state[k], ref, rtol=RTOL, atol=1e-15)
    assert np.abs(state["m"] - m0).max() > 0.1


def test_a_false_condition_is_the_plain_average_bit_for_bit():
    with_, without = online_newton(), online_newton(with_rule=False)
    m0, s0, grad, hess_at = problem(5)
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for t in range(6):
        o = {"grad": grad, "hess": lambda x, t=t: hess_at(t)}
        a = with_.step(a, oracles=o, lr=0.2, beta=0.9, flag=False)
        b = without.step(b, oracles=o, lr=0.2, beta=0.9)
        for k in ("m", "s"):
            np.testing.assert_array_equal(a[k], b[k])


def test_errors_and_the_recorded_convention():
    with pytest.raises(SpecError, match="infinity_norm.*not an average") as exc:
        api.derive(recipe(["delta", {"ema_momentum": {"rate": "b", "state": "u"}}, {"infinity_norm": {"param": "m"}}],
                          {"lr": 0.1, "b": 0.9}))
    assert exc.value.line is not None
    d = api.derive(recipe(["delta", {"infinity_norm": {"param": "s"}}], {"lr": 0.1}))
    (st,) = d.steps_for("infinity_norm")
    assert "convention" in st.equation
    _, rhs = st.equations[0][:2]              # max((1 − ρ)s, H) at numbers
    vals = {x: {"lr": 0.5, "s": 4.0, "H": 1.5}[x.name] for x in rhs.free_symbols}
    assert float(rhs.subs(vals)) == 2.0

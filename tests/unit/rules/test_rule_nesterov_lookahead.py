"""nesterov_lookahead (NAdam's convention, not a BLR step): the mean step uses the EMA momentum of App. F, Eq. 77
one step ahead, each term bias-corrected (Dozat 2016):

    ũ = μ_{t+1}·u_{t+1}/(1 − Π_{k≤t+1} μ_k) + (1 − μ_t)·ĝ_t/(1 − Π_{k≤t} μ_k).

Checked numerically:

* over N(θ | m, I) (SGD with EMA momentum) the generated step equals the hand formula with a constant μ
  (Π μ_k = μ^t), and with Dozat's schedule μ_t = β(1 − ½·0.96^{tψ}) read from ``momentum_schedule``;
* the step WITH the rule equals the step WITHOUT it (plain EMA momentum, m ← m − ρu_{t+1}) on transformed inputs:
  at learning rate ρ' = ρμ/(1 − μ^{t+1}) from the momentum state u' = u + (1 − μ^{t+1})(1 − μ)/(μ²(1 − μ^t))·ĝ;
* the catalog's NAdam equals the algorithm of torch.optim.NAdam's documentation written by hand (coupled
  weight decay, Adam's bias correction of the scale);
* ``when`` false is plain EMA momentum bit for bit; a debiased or missing momentum is a located error.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

# The same closed forms grouped differently (a few roundings of ~1e-16 relative per step) over ≤ 20 steps;
# dropping either bias correction or the look-ahead changes the step by O(0.1-1) relative here.
RTOL = 1e-12


def recipe(extra, hp, family="gaussian_fixed_cov"):
    approx = ["delta", {"ema_momentum": {"rate": "mu", "state": "u"}}] + extra
    return yaml.safe_dump({"name": "nesterov_test", "family": family, "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": {"lr": 0.1, "mu": 0.9, **hp}, "approximations": approx},
                          sort_keys=False)


@functools.lru_cache(maxsize=None)
def sgd(rule=True, schedule=False):
    extra, hp = [], {}
    if schedule:
        extra.append({"momentum_schedule": {"rate": "mu*(1 - 0.5*0.96**(t*psi))", "state": "P"}})
        hp["psi"] = 0.004
    if rule:
        extra.append({"nesterov_lookahead": {"param": "u", "when": "flag", **({"schedule": "P"} if schedule else {})}})
        hp["flag"] = True
    return api.derive(recipe(extra, hp)).compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    return rng.normal(size=n), (lambda x: a * (x - c) + 0.3 * np.sin(x))


def test_hand_formula_with_a_constant_coefficient():
    mod = sgd()
    m0, grad = problem(1)
    lr, mu = 0.2, 0.8
    state, m, u = mod.init(m=m0), m0.copy(), np.zeros_like(m0)
    for t in range(1, 16):
        state = mod.step(state, oracles={"grad": grad}, lr=lr, mu=mu, flag=True)
        g = grad(m)
        u = mu * u + (1 - mu) * g
        m = m - lr * (mu * u / (1 - mu ** (t + 1)) + (1 - mu) * g / (1 - mu ** t))
        np.testing.assert_allclose(state["u"], u, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_hand_formula_with_dozats_schedule():
    mod = sgd(schedule=True)
    m0, grad = problem(2)
    lr, mu, psi = 0.1, 0.9, 0.2
    sched = lambda k: mu * (1 - 0.5 * 0.96 ** (k * psi))
    state, m, u, P = mod.init(m=m0), m0.copy(), np.zeros_like(m0), 1.0
    for t in range(1, 16):
        state = mod.step(state, oracles={"grad": grad}, lr=lr, mu=mu, psi=psi, flag=True)
        g = grad(m)
        u = mu * u + (1 - mu) * g                  # the average keeps the constant rate (as torch.optim.NAdam)
        P *= sched(t)
        m = m - lr * (sched(t + 1) * u / (1 - P * sched(t + 1)) + (1 - sched(t)) * g / (1 - P))
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_with_the_rule_is_plain_momentum_on_a_shifted_state_and_rate():
    with_, without = sgd(), sgd(rule=False)
    m0, grad = problem(3)
    lr, mu = 0.15, 0.7
    a = with_.init(m=m0)
    for t in range(1, 13):
        g = grad(a["m"])
        c_u, c_g = mu / (1 - mu ** (t + 1)), (1 - mu) / (1 - mu ** t)
        shifted = without.init(m=a["m"], u=a["u"] + c_g / (c_u * mu) * g)
        b = without.step(shifted, oracles={"grad": grad}, lr=lr * c_u, mu=mu)
        a = with_.step(a, oracles={"grad": grad}, lr=lr, mu=mu, flag=True)
        np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=1e-14)


def test_catalog_nadam_is_the_documented_algorithm():
    mod = api.derive("nadam").compile("numpy")
    rng = np.random.default_rng(4)
    m0, a_, c = rng.normal(size=8), rng.uniform(0.5, 2.0, size=8), rng.normal(size=8)
    grad = lambda x: a_ * (x - c) + 0.3 * np.sin(x)
    hp = dict(lr=0.02, betas=(0.85, 0.98), eps=1e-4, weight_decay=0.03, momentum_decay=0.1)
    b1, b2 = hp["betas"]
    state = mod.init(m=m0)
    m, u, v, P = m0.copy(), np.zeros(8), np.zeros(8), 1.0
    for t in range(1, 21):
        state = mod.step(state, oracles={"grad": grad}, **hp)
        g = grad(m) + hp["weight_decay"] * m
        mu_t = b1 * (1 - 0.5 * 0.96 ** (t * hp["momentum_decay"]))
        mu_next = b1 * (1 - 0.5 * 0.96 ** ((t + 1) * hp["momentum_decay"]))
        P *= mu_t
        u = b1 * u + (1 - b1) * g
        v = b2 * v + (1 - b2) * g * g
        denom = np.sqrt(v / (1 - b2 ** t)) + hp["eps"]
        m = m - hp["lr"] * (1 - mu_t) / (1 - P) * g / denom - hp["lr"] * mu_next / (1 - P * mu_next) * u / denom
        for k, ref in (("u", u), ("s", v), ("m", m)):
            np.testing.assert_allclose(state[k], ref, rtol=RTOL, atol=1e-15)
        np.testing.assert_allclose(state["mu_product"], P, rtol=RTOL, atol=0)


def test_a_false_condition_is_plain_momentum_bit_for_bit():
    with_, without = sgd(), sgd(rule=False)
    m0, grad = problem(5)
    a, b = with_.init(m=m0), without.init(m=m0)
    for _ in range(6):
        a = with_.step(a, oracles={"grad": grad}, lr=0.2, mu=0.9, flag=False)
        b = without.step(b, oracles={"grad": grad}, lr=0.2, mu=0.9)
        for k in ("m", "u"):
            np.testing.assert_array_equal(a[k], b[k])


def test_errors_and_the_recorded_convention():
    debiased = recipe([{"debias": {"param": "u", "rate": "mu"}}, {"nesterov_lookahead": {"param": "u"}}], {})
    with pytest.raises(SpecError, match="nesterov_lookahead.*raw average") as exc:
        api.derive(debiased)
    assert exc.value.line is not None
    with pytest.raises(SpecError, match="not a momentum schedule|not a parameter"):
        api.derive(recipe([{"nesterov_lookahead": {"param": "u", "schedule": "m"}}], {}))
    d = api.derive(recipe([{"nesterov_lookahead": {"param": "u"}}], {}))
    (st,) = d.steps_for("nesterov_lookahead")
    assert "convention" in st.equation

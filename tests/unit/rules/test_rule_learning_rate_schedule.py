"""learning_rate_schedule (a pass: the step-dependent learning rate ρ_t of Eq. 6; Sec. 5.3's Robbins–Monro
schedule): one parameter's update uses ρ·factor(t) instead of ρ, t = 1 at the first step.

Checked numerically:

* over N(θ | m, I) (SGD, Sec. 4.1) the generated step equals the hand formula m ← m − ρ/(1 + (t − 1)d)·g
  (Adagrad's lr_decay), and over N(m, diag(s)⁻¹) a schedule on the scale's rate gives
  s ← (1 − ρ_t)s + ρ_t H with the mean keeping ρ (Robbins–Monro ρ_t = ρ(t + τ)^−κ);
* the step WITH the rule equals the step WITHOUT it at the learning rate ρ·factor(t) passed at step t;
* a factor 1 and ``when`` false are the update without the rule, bit for bit; naming a parameter whose update
  does not use ρ is a located error.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

# ρ·factor(t) computed in the generated code against the same product computed here: one or two roundings of
# ~1e-16 relative per step, over ≤ 20 steps; a wrong t (off by one) changes the step by ≥ 1% here.
RTOL = 1e-12


def recipe(family, approx, hp):
    return yaml.safe_dump({"name": "lr_schedule_test", "family": family, "loss": "abstract", "learning_rate": "lr",
                           "hyperparameters": hp, "approximations": approx}, sort_keys=False)


@functools.lru_cache(maxsize=None)
def sgd(with_rule=True):
    approx = ["delta"]
    hp = {"lr": 0.1}
    if with_rule:
        approx.append({"learning_rate_schedule": {"factor": "1/(1 + (t - 1)*decay)", "when": "flag"}})
        hp.update(decay=0.1, flag=True)
    return api.derive(recipe("gaussian_fixed_cov", approx, hp)).compile("numpy")


@functools.lru_cache(maxsize=None)
def newton_scale_schedule():
    approx = ["delta", {"learning_rate_schedule": {"factor": "(t + tau)**(-kappa)", "param": "s"}}]
    return api.derive(recipe("gaussian_diag", approx, {"lr": 0.5, "tau": 1.0, "kappa": 0.6})).compile("numpy")


def problem(seed=0, n=6):
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess


def test_hand_formula_of_a_decaying_mean_rate():
    mod = sgd()
    m0, _, grad, _ = problem(1)
    lr, decay = 0.3, 0.25
    state, m = mod.init(m=m0), m0.copy()
    for t in range(1, 21):
        state = mod.step(state, oracles={"grad": grad}, lr=lr, decay=decay, flag=True)
        m = m - lr / (1 + (t - 1) * decay) * grad(m)
        assert int(state["step"]) == t
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_with_the_rule_is_without_it_at_the_scheduled_rate():
    with_, without = sgd(), sgd(with_rule=False)
    m0, _, grad, _ = problem(2)
    lr, decay = 0.2, 0.5
    a, b, plain = with_.init(m=m0), without.init(m=m0), without.init(m=m0)
    for t in range(1, 16):
        a = with_.step(a, oracles={"grad": grad}, lr=lr, decay=decay, flag=True)
        b = without.step(b, oracles={"grad": grad}, lr=lr * (1 / (1 + (t - 1) * decay)))
        plain = without.step(plain, oracles={"grad": grad}, lr=lr)
        np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=1e-14)
    assert np.abs(a["m"] - plain["m"]).max() > 1e-2


def test_a_schedule_on_the_scale_leaves_the_mean_rate():
    """Robbins–Monro on the scale of online Newton: s ← (1 − ρ_t)s + ρ_t H, ρ_t = ρ(t + τ)^−κ; m ← m − ρg/s."""
    mod = newton_scale_schedule()
    m0, s0, grad, hess = problem(3)
    lr, tau, kappa = 0.5, 2.0, 0.7
    state, m, s = mod.init(m=m0, s=s0), m0.copy(), s0.copy()
    for t in range(1, 11):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=lr, tau=tau, kappa=kappa)
        rho_t = lr * (t + tau) ** (-kappa)
        s = (1 - rho_t) * s + rho_t * hess(m)
        m = m - lr * grad(m) / s
        np.testing.assert_allclose(state["s"], s, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_unit_factor_and_false_condition_are_the_update_without_the_rule():
    with_, without = sgd(), sgd(with_rule=False)
    m0, _, grad, _ = problem(4)
    a0 = a1 = with_.init(m=m0)
    b = without.init(m=m0)
    for _ in range(6):
        a0 = with_.step(a0, oracles={"grad": grad}, lr=0.2, decay=0.0, flag=True)       # ρ·1/(1 + 0) = ρ exactly
        a1 = with_.step(a1, oracles={"grad": grad}, lr=0.2, decay=0.7, flag=False)
        b = without.step(b, oracles={"grad": grad}, lr=0.2)
        np.testing.assert_array_equal(a0["m"], b["m"])
        np.testing.assert_array_equal(a1["m"], b["m"])


def test_a_parameter_without_the_learning_rate_is_a_located_error():
    text = recipe("gaussian_diag", ["delta", {"separate_learning_rates": {"s": "r"}},
                                    {"learning_rate_schedule": {"factor": "1/t", "param": "s"}}], {"lr": 0.1, "r": 0.2})
    with pytest.raises(SpecError, match="learning_rate_schedule.*does not use the learning rate") as exc:
        api.derive(text)
    assert exc.value.line is not None


def test_the_recorded_step_is_a_pass_citing_eq_6():
    d = api.derive(recipe("gaussian_fixed_cov", ["delta", {"learning_rate_schedule": {"factor": "1/t"}}], {"lr": 0.1}))
    (st,) = d.steps_for("learning_rate_schedule")
    assert st.equation.startswith("Eq. 6")
    _, rhs = st.equations[0][:2]
    vals = {x: {"lr": 0.3, "t": 4}[x.name] for x in rhs.free_symbols}
    assert float(rhs.subs(vals)) == pytest.approx(0.3 / 4, rel=1e-15)

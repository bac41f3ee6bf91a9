"""accumulated_sum (a pass: Eq. 37 with the decreasing learning rate ρ_t = 1/(t + c), i.e. no forgetting; the
posterior precision of Eq. 54): the average p ← a·p + (1 − a)·x becomes the sum p ← p + w·x.

Online Newton with a diagonal Hessian (Eq. 37) and its own rate r for the scale (Eq. 36) updates
s ← (1 − r)s + rH; with the rule the scale is S ← S + wH.  Checked numerically:

* the generated step equals the hand formula S_{t+1} = S_t + wH_t, m_{t+1} = m_t − ρ g/S_{t+1};
* the step WITH the rule equals the step WITHOUT it on transformed inputs: started from s_1 = S_1/c, with the
  scale's rate r_t = 1/(t + c) and the mean's rate ρ/(t + c) at step t, the no-rule scale is s_{t+1} = S_{t+1}/(t + c)
  (the average of everything seen, nothing forgotten) and the means agree — the decreasing-learning-rate reading
  of the docstring;
* after the squared-gradient Hessian and weight decay (the catalog's Adagrad) the target read off the average is
  (g + δm)², and the catalog's Adagrad equals Duchi et al.'s recursion (with torch's lr_decay) written by hand;
* ``when`` false is the update without the rule, bit for bit; a state that is not an average is a located error.
"""
import functools

import numpy as np
import pytest
import yaml

from blr_derive import api
from blr_derive.core.errors import SpecError

# The same closed forms grouped differently (e.g. ρ/(t + c)·g/s against ρ·g/S with S = (t + c)s: a few roundings of
# ~1e-16 relative per step) over ≤ 15 steps: 1e-12 relative is a wide margin, while forgetting (a ≠ 1) or a
# missing weight changes the step by O(1) relative.
RTOL = 1e-12


def recipe(approx, hp, state_init=None):
    d = {"name": "accumulated_sum_test", "family": "gaussian_diag", "loss": "abstract", "learning_rate": "lr",
         "hyperparameters": hp}
    if state_init is not None:
        d["state_init"] = state_init
    d["approximations"] = approx
    return yaml.safe_dump(d, sort_keys=False)


@functools.lru_cache(maxsize=None)
def online_newton(with_rule=True):
    approx = ["delta", {"separate_learning_rates": {"s": "r"}}]
    hp = {"lr": 0.1, "r": 0.5}
    if with_rule:
        approx.append({"accumulated_sum": {"param": "s", "weight": "w", "when": "flag"}})
        hp.update(w=1.0, flag=True)
    return api.derive(recipe(approx, hp)).compile("numpy")


@functools.lru_cache(maxsize=None)
def adagrad():
    return api.derive("adagrad").compile("numpy")


def problem(seed=0, n=7):
    """A separable non-quadratic loss ℓ(θ) = Σ a(θ − c)²/2 − 0.3 cos θ with its gradient and elementwise Hessian."""
    rng = np.random.default_rng(seed)
    a = rng.uniform(0.5, 2.0, size=n)
    c = rng.normal(size=n)
    grad = lambda x: a * (x - c) + 0.3 * np.sin(x)
    hess = lambda x: a + 0.3 * np.cos(x)
    return rng.normal(size=n), rng.uniform(1.0, 3.0, size=n), grad, hess


def test_hand_formula_of_the_sum():
    mod = online_newton()
    m0, S0, grad, hess = problem(1)
    lr, w = 0.3, 0.7
    state = mod.init(m=m0, s=S0)
    m, S = m0.copy(), S0.copy()
    for _ in range(10):
        state = mod.step(state, oracles={"grad": grad, "hess": hess}, lr=lr, r=0.5, w=w, flag=True)
        S = S + w * hess(m)
        m = m - lr * grad(m) / S
        np.testing.assert_allclose(state["s"], S, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)


def test_the_sum_is_the_average_with_a_decreasing_learning_rate():
    with_, without = online_newton(), online_newton(with_rule=False)
    m0, S0, grad, hess = problem(2)
    lr, c = 0.4, 3.0
    oracles = {"grad": grad, "hess": hess}
    a, b = with_.init(m=m0, s=S0), without.init(m=m0, s=S0 / c)
    for t in range(1, 16):
        a = with_.step(a, oracles=oracles, lr=lr, r=0.9, w=1.0, flag=True)           # r is not used by the sum
        b = without.step(b, oracles=oracles, lr=lr / (t + c), r=1 / (t + c))
        np.testing.assert_allclose(a["s"], (t + c) * b["s"], rtol=RTOL, atol=0)
        np.testing.assert_allclose(a["m"], b["m"], rtol=RTOL, atol=1e-14)
    fixed = without.init(m=m0, s=S0 / c)
    for _ in range(15):
        fixed = without.step(fixed, oracles=oracles, lr=lr / c, r=1 / c)              # a fixed rate forgets
    assert np.abs(fixed["m"] - a["m"]).max() > 1e-3


def test_catalog_adagrad_is_duchis_recursion_with_lr_decay():
    mod = adagrad()
    m0, _, grad, _ = problem(3)
    hp = dict(lr=0.2, lr_decay=0.05, weight_decay=0.01, initial_accumulator_value=0.3, eps=1e-3)
    state = mod.init(hp, m=m0)
    np.testing.assert_array_equal(state["s"], 0.3)
    m, S = m0.copy(), np.full_like(m0, 0.3)
    for t in range(1, 13):
        state = mod.step(state, oracles={"grad": grad}, **hp)
        g = grad(m) + hp["weight_decay"] * m
        S = S + g * g
        m = m - hp["lr"] / (1 + (t - 1) * hp["lr_decay"]) * g / (np.sqrt(S) + hp["eps"])
        np.testing.assert_allclose(state["s"], S, rtol=RTOL, atol=0)
        np.testing.assert_allclose(state["m"], m, rtol=RTOL, atol=1e-14)
    assert np.abs(state["m"] - m0).max() > 0.1


def test_a_false_condition_is_the_update_without_the_rule():
    with_, without = online_newton(), online_newton(with_rule=False)
    m0, s0, grad, hess = problem(4)
    a, b = with_.init(m=m0, s=s0), without.init(m=m0, s=s0)
    for _ in range(5):
        a = with_.step(a, oracles={"grad": grad, "hess": hess}, lr=0.2, r=0.3, w=1.0, flag=False)
        b = without.step(b, oracles={"grad": grad, "hess": hess}, lr=0.2, r=0.3)
        for k in ("m", "s"):
            np.testing.assert_array_equal(a[k], b[k])           # the 'else' branch is the same expression


def test_a_state_that_is_not_an_average_is_a_located_error():
    text = recipe(["delta", {"ema_momentum": {"rate": "beta", "state": "u"}}, {"accumulated_sum": {"param": "m"}}],
                  {"lr": 0.1, "beta": 0.9})
    with pytest.raises(SpecError, match="accumulated_sum.*not an average") as exc:
        api.derive(text)
    assert exc.value.line is not None
    with pytest.raises(SpecError, match="'nope' is not a parameter"):
        api.derive(recipe(["delta", {"accumulated_sum": {"param": "nope"}}], {"lr": 0.1}))


def test_the_recorded_step_is_a_pass_citing_eq_37_and_54():
    d = api.derive(recipe(["delta", {"accumulated_sum": {"param": "s"}}], {"lr": 0.1}))
    (st,) = d.steps_for("accumulated_sum")
    assert st.equation.startswith("Eq. 37") and "Eq. 54" in st.equation
    assert st.equations[0][1] == d.update["s"]
    assert str(d.update["s"]) in ("H + s", "s + H")         # Eq. 37's (1 − ρ)s + ρH without forgetting
